"""Reading a ListSets response as a client: the setSpecs of one page and its resumptionToken."""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from shared.oaipmh.pages import OAI_NS, NotOAIResponse, PageReader

_Q = "{" + OAI_NS + "}"


@dataclass(frozen=True)
class SetsPage:
    set_specs: list[str]
    resumption_token: str | None


def read_sets_page(body: bytes) -> SetsPage:
    """Parse one ListSets page; raise the OAI error (say ``noSetHierarchy``) or the
    ResponseError it carries."""
    # the page reader refuses HTML, DOCTYPEs and broken XML, raises the OAI-PMH error, and reads
    # the resumptionToken (OAI-PMH 2.0 §3.5: ListSets may be split like the other lists)
    reader = PageReader(body)
    for _ in reader.items():
        pass
    if reader.summary.verb != "ListSets":
        raise NotOAIResponse(f"a ListSets request was answered with {reader.summary.verb!r}")
    root = etree.fromstring(body, etree.XMLParser(resolve_entities=False, no_network=True))
    specs = root.iterfind(f"{_Q}ListSets/{_Q}set/{_Q}setSpec")
    return SetsPage([(spec.text or "").strip() for spec in specs], reader.summary.resumption_token)
