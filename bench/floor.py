"""What the libraries alone cost a harvested record, in the process that measures it.

A page worker (:func:`wiscat.harvester.page_content.read_copy`) parses a page, and for each
record serializes it (what is stored), takes its exclusive C14N and hashes it (invariant 7).
Those calls into libxml2 and OpenSSL are work the design asks for whatever the code around them
does: measured here each on its own, at the cheapest way lxml offers (the whole page parsed
into one tree, where the page reader parses it in pieces to bound its memory), they are the
floor under the page workers' share of a harvest. The harvester section reports them beside
the page worker's whole work on the same pages, so the Python around the calls shows as the
difference, at the machine's pace of that run.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from lxml import etree

from tests.support.servers import list_records_page, records_of
from wiscat.harvester.page_content import read_copy
from wiscat.shared.oaipmh.namespaces import OAI_TAG


def generated_pages(pages: int, page_size: int) -> list[bytes]:
    """``pages`` ListRecords pages of ``page_size`` generated records each, as a provider sends
    them."""
    return [
        list_records_page(records_of(range(first, first + page_size), "S"))
        for first in range(0, pages * page_size, page_size)
    ]


def _best(rounds: int, work: Callable[[], object]) -> float:
    """The least CPU time (seconds) of ``rounds`` runs of ``work``."""
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best


def library_costs(pages: int = 10, page_size: int = 500, rounds: int = 3) -> dict[str, float]:
    """Microseconds of CPU a record: the page worker's whole work (``"page worker"``), then each
    library call it makes alone, by what it does; each the best of ``rounds`` runs over the
    same generated pages."""
    bodies = generated_pages(pages, page_size)
    records = pages * page_size
    for body in bodies:  # the worker reads every record: the measure is of real work
        content, _, _ = read_copy("http://peer/oai", body)
        assert len(content.sorter.batch) == page_size, content.sorter.quarantined[:1]

    parser = etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        remove_comments=True,
        remove_blank_text=True,
    )
    trees = [etree.fromstring(body, parser) for body in bodies]
    elements = [md[0] for tree in trees for md in tree.iter(f"{OAI_TAG}metadata")]
    for element in elements:  # taken out of the page, as the worker takes each record
        element.getparent().remove(element)
    canonical = [etree.tostring(e, method="c14n", exclusive=True) for e in elements]
    assert len(elements) == records

    def worker() -> None:
        for body in bodies:
            read_copy("http://peer/oai", body)

    def parse() -> None:
        for body in bodies:
            etree.fromstring(body, parser)

    def serialize() -> None:
        for element in elements:
            etree.tostring(element, encoding="unicode", with_tail=False)

    def c14n() -> None:
        for element in elements:
            etree.tostring(element, method="c14n", exclusive=True, with_comments=False)

    def sha256() -> None:
        for data in canonical:
            hashlib.sha256(data).digest()

    work = {
        "page worker": worker,
        "parsing the page": parse,
        "serializing the record": serialize,
        "its exclusive C14N": c14n,
        "SHA-256": sha256,
    }
    return {name: _best(rounds, run) / records * 1e6 for name, run in work.items()}


def floor_lines(
    costs: dict[str, float], page_size: int, postgresql: float, provider: float
) -> list[str]:
    """The harvester section's lines on :func:`library_costs`' ``costs`` (on pages of
    ``page_size``), with the CPU a record
    of PostgreSQL storing the same documents by COPY alone (the minimal sequential harvester's
    share) and of the provider serving them, both in µs, from the same run."""
    calls = {part: us for part, us in costs.items() if part != "page worker"}
    libraries = sum(calls.values())
    parts = ", ".join(f"{part} {us:.1f}" for part, us in calls.items())
    floor = libraries + postgresql + provider
    return [
        f"- a page worker's work a record, in this process on generated pages of {page_size}: "
        f"{costs['page worker']:.0f} µs; the calls into libxml2 and OpenSSL it must make, each "
        f"alone at the cheapest lxml offers, in µs: {parts}; {libraries:.0f} in all "
        f"({libraries / costs['page worker']:.0%} of it)",
        f"- those calls, PostgreSQL storing the documents by COPY alone ({postgresql:.0f} µs, the "
        f"minimal sequential harvester's share) and the provider serving them ({provider:.0f} "
        f"µs): **{floor:.0f} µs** a record before any of wiscat's own work (goal: at most 200 "
        "in all)",
    ]
