"""Schemathesis hooks for RELIABILITY F05 (``SCHEMATHESIS_HOOKS``, test_api_schema): a check that
every 200 answer of ``/oai`` validates against the official OAI-PMH.xsd, whatever the generated
arguments (the hostile input P02 lists)."""

from __future__ import annotations

from typing import Any

import schemathesis

from tests.oai_validation import validate_oai


@schemathesis.check
def oai_pmh_xsd_conformance(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 200 of ``/oai`` is an OAI-PMH document that validates against OAI-PMH.xsd."""
    if case.operation.path != "/oai" or response.status_code != 200:
        return None
    validate_oai(response.content)
    return True
