"""Schemathesis hooks for RELIABILITY F05 (``SCHEMATHESIS_HOOKS``, test_api_schema):

- a check that every 200 answer of ``/oai`` validates against the official OAI-PMH.xsd,
  whatever the generated arguments (the hostile input P02 lists);
- ``POST /urls`` bodies drawn from the schema's own strategy or, as often, hostile base URLs:
  S02's local addresses in each literal form, at the port of the run's canary, with generated
  paths, other schemes (S06), credentials and ports off the fetch list (S07);
- each ``POST /urls`` asked and answered written to ``WISCAT_F05_URLS`` (one JSON a line).
"""

from __future__ import annotations

import json
import os
from typing import Any

import schemathesis
from hypothesis import strategies as st

from tests.support.oai_validation import validate_oai
from tests.support.registry_network import S02_HOSTS


def _posts_urls(context: Any) -> bool:
    operation = context.operation
    return operation is not None and (operation.method.upper(), operation.path) == (
        "POST",
        "/urls",
    )


# schemes a registry node refuses before any socket (S06)
HOSTILE_SCHEMES = ("file", "ftp", "gopher", "ws", "javascript")


def hostile_base_urls(canary_port: int) -> st.SearchStrategy[str]:
    """Base URLs a registry node must refuse without a connection: half of them S02's local
    addresses at the canary's port (a connection there shows a refused address fetched), the
    rest with credentials, at ports off the fetch list (S07), or of other schemes (S06)."""
    path = st.text(st.characters(codec="ascii", categories=("L", "N")), max_size=12)
    scheme = st.sampled_from(("http", "https"))
    local = st.sampled_from(S02_HOSTS)
    at_canary = st.builds("{}://{}:{}/{}".format, scheme, local, st.just(canary_port), path)
    return st.one_of(
        at_canary,
        at_canary,
        at_canary,
        st.builds("{}://user:secret@{}:{}/{}".format, scheme, local, st.just(canary_port), path),
        st.builds("{}://{}:{}/{}".format, scheme, local, st.sampled_from((22, 5432)), path),
        st.builds(
            "{}://127.0.0.1:{}/{}".format,
            st.sampled_from(HOSTILE_SCHEMES),
            st.just(canary_port),
            path,
        ),
    )


@schemathesis.hook
def before_generate_body(context: Any, strategy: Any) -> Any:
    """``POST /urls``: the schema's bodies, or a hostile base URL in its one form field."""
    port = os.environ.get("WISCAT_F05_CANARY_PORT")
    if not _posts_urls(context) or port is None:
        return strategy
    return st.one_of(strategy, hostile_base_urls(int(port)).map(lambda url: {"baseURL": url}))


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    """Keep each ``POST /urls`` and its answer for the test to read."""
    record = os.environ.get("WISCAT_F05_URLS")
    if record is None or (case.method.upper(), case.operation.path) != ("POST", "/urls"):
        return
    body = case.body if isinstance(case.body, dict) else {}
    with open(record, "a", encoding="utf-8") as file:
        line = {"baseURL": body.get("baseURL"), "status": response.status_code}
        file.write(json.dumps({**line, "text": response.text}) + "\n")


@schemathesis.check
def oai_pmh_xsd_conformance(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 200 of ``/oai`` is an OAI-PMH document that validates against OAI-PMH.xsd."""
    if case.operation.path != "/oai" or response.status_code != 200:
        return None
    validate_oai(response.content)
    return True
