"""Reading ListSets pages (the checker asks a source whose list is empty whether the set exists)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wiscat.shared.oaipmh.errors import NoRecordsMatch
from wiscat.shared.oaipmh.pages import NotOAIResponse
from wiscat.shared.oaipmh.sets import SetsPage, read_sets_page

FIXTURES = Path(__file__).parent.parent / "data" / "oai"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def test_pages_give_their_set_specs_and_token() -> None:
    assert read_sets_page(fixture("ListSets-page1.xml")) == SetsPage(
        ["WIS-CATALOGUE", "WIS-GISC-OTHER"], "sets-2"
    )
    # OAI-PMH 2.0 §3.5: an empty resumptionToken ends the list
    assert read_sets_page(fixture("ListSets-page2.xml")) == SetsPage(["WIS-GISC-TEST"], None)


def test_errors_and_other_answers_are_raised() -> None:
    with pytest.raises(NoRecordsMatch):
        read_sets_page(fixture("error-noRecordsMatch.xml"))
    with pytest.raises(NotOAIResponse, match="answered with 'Identify'"):
        read_sets_page(fixture("Identify.xml"))
    with pytest.raises(NotOAIResponse, match="HTML"):
        read_sets_page(fixture("not-oai-html-error.html"))
