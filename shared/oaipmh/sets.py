"""Reading a ListSets response as a client: the setSpecs of one page and its resumptionToken;
and a ListMetadataFormats response: the metadataPrefixes offered."""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from wiscat.shared.oaipmh.namespaces import OAI_TAG
from wiscat.shared.oaipmh.pages import NotOAIResponse, PageReader, PageSummary


@dataclass(frozen=True)
class SetsPage:
    """One ListSets page: its setSpecs and the resumptionToken for the next, if any."""

    set_specs: list[str]
    resumption_token: str | None


def read_sets_page(body: bytes) -> SetsPage:
    """Parse one ListSets page; raise the OAI error (say ``noSetHierarchy``) or the
    ResponseError it carries."""
    # ListSets may be split like the other lists (OAI-PMH 2.0 §3.5)
    root, summary = _answer(body, "ListSets")
    specs = root.iterfind(f"{OAI_TAG}ListSets/{OAI_TAG}set/{OAI_TAG}setSpec")
    return SetsPage([(spec.text or "").strip() for spec in specs], summary.resumption_token)


def read_metadata_formats(body: bytes) -> list[str]:
    """The metadataPrefixes of a ListMetadataFormats response; raise the OAI error (say
    ``noMetadataFormats``) or the ResponseError it carries."""
    root, _ = _answer(body, "ListMetadataFormats")
    path = f"{OAI_TAG}ListMetadataFormats/{OAI_TAG}metadataFormat/{OAI_TAG}metadataPrefix"
    return [(prefix.text or "").strip() for prefix in root.iterfind(path)]


def _answer(body: bytes, verb: str) -> tuple[etree._Element, PageSummary]:
    """The root of an answer to ``verb``, and what the page reader made of it: the reader
    refuses HTML, DOCTYPEs and broken XML, raises the OAI-PMH error, and reads the
    resumptionToken."""
    reader = PageReader(body)
    for _ in reader.items():
        pass
    if reader.summary.verb != verb:
        raise NotOAIResponse(f"a {verb} request was answered with {reader.summary.verb!r}")
    root = etree.fromstring(body, etree.XMLParser(resolve_entities=False, no_network=True))
    return root, reader.summary
