"""F03: whatever a source node does between harvests, a wiscat harvester ends with its copy.

A Hypothesis state machine creates, updates and deletes records on a source node (its own
set, through the local ingest's functions, on a real PostgreSQL), interleaved with harvests by
a real wiscat harvester of the source's real provider on loopback, each with a page size drawn
anew (1 to 5 records a page), by ListRecords or by ListIdentifiers and GetRecord. A harvest
may be stopped by the mass-deletion guard (when it is not allowed to delete many records);
any other outcome than completing or that stop fails.

Invariants: after every completed harvest, and after a final incremental harvest allowed to
delete, the sink's set holds what the source's holds: the same identifiers, the same deleted
flags, the same content hashes (tests/support/harvest_pair.py ``content``).

The sink reaches the source through a loopback peer that forwards every request but may, once
in a harvest, answer 503 (the run must then complete all the same), cut a page asked for by
resumptionToken in half, or answer badResumptionToken as for an expired token (the run may
then fail; a later one must make up for it).

One source database, provider and sink serve every example; each example has a source set, a
link (into a sink set) and records (a centre) of its own, so examples never see each other's.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.support.harvest_pair import Pair, content, run
from tests.support.servers import serving_app
from wiscat.shared import ingest
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.linkspec import build_link
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.errors import BadResumptionToken

T = TypeVar("T")

#: the records an example works on: few, so that they are updated and deleted often
NUMBERS = range(8)
PAGE_SIZES = st.integers(min_value=1, max_value=5)

#: The faults a harvest may meet, each made once, to the first request it fits: ``503``, the
#: first list request answered 503 with Retry-After: 0 (retried: the run must complete);
#: ``truncated``, the first page asked for by resumptionToken cut in half (not well-formed);
#: ``expired``, the first request with a resumptionToken answered badResumptionToken.
FAULTS = st.sampled_from([None, "503", "truncated", "expired"])


@dataclass
class FaultyPeer:
    """The source as the sink sees it: a loopback server that forwards each request to the
    source's provider, but for the one fault it is told to make."""

    upstream: str
    http: aiohttp.ClientSession
    fault: str | None = None
    made: bool = False

    async def handle(self, request: web.Request) -> web.Response:
        listing = request.query.get("verb") in ("ListRecords", "ListIdentifiers")
        by_token = "resumptionToken" in request.query
        fault = None if self.made else self.fault
        if fault == "503" and listing:
            self.made = True
            return web.Response(status=503, headers={"Retry-After": "0"}, text="busy")
        if fault == "expired" and by_token:
            self.made = True
            expired = BadResumptionToken("the resumptionToken has expired")
            body = render.render_error(
                datetime.now(UTC), self.upstream, dict(request.query), [expired]
            )
            return web.Response(body=body, content_type="text/xml")
        async with self.http.get(self.upstream, params=request.query) as response:
            status, body = response.status, await response.read()
        if fault == "truncated" and by_token:
            self.made = True
            body = body[: len(body) // 2]
        return web.Response(status=status, body=body, content_type="text/xml")


def machine_for(
    pair: Pair, peer: FaultyPeer, peer_url: str, loop: asyncio.AbstractEventLoop
) -> type[RuleBasedStateMachine]:
    """The state machine class over ``pair``, whose sink harvests the source through ``peer``
    (at ``peer_url``); its rules run in a thread of their own, and hand each coroutine to
    ``loop``, where the provider and the peer serve."""
    examples = itertools.count(1)

    def wait(coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout=120)

    class SourceAndSink(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            example = next(examples)
            self.source_set = f"WIS-F03-SOURCE-{example}"
            self.sink_set = f"WIS-F03-SINK-{example}"
            self.link = f"f03-{example}"
            # records are one per identifier, whatever their sets: a centre per example
            self.centre = f"f03e{example}"
            self.versions: dict[int, int] = {}  # record number -> its latest version
            self.live: set[int] = set()

        @initialize(
            strategy=st.sampled_from(["ListRecords", "ListIdentifiers"]),
            loaded=st.lists(st.sampled_from(NUMBERS), unique=True),
        )
        def start(self, strategy: str, loaded: list[int]) -> None:
            """The source's set, with some records already, and the sink's link to it."""
            wait(ingest.ensure_own_set(pair.source, self.source_set))
            self.put(loaded)
            new = build_link(
                name=self.link,
                url=peer_url,
                remote_set=self.source_set,
                into=self.sink_set,
                own_set=pair.ctx.settings.own_set,
                strategy=strategy,
            )
            wait(store.ensure_set(pair.sink, self.sink_set, self.sink_set, "remote"))
            wait(link_store.add_link(pair.sink, new))

        @rule(numbers=st.lists(st.sampled_from(NUMBERS), min_size=1, max_size=4, unique=True))
        def put(self, numbers: list[int]) -> None:
            """Create records, or update them (a new version), or create them again after
            their deletion, one at a time."""
            for n in numbers:
                version = self.versions.get(n, -1) + 1
                record = parse_record(generate_record(n, centre=self.centre, version=version))
                outcome = wait(ingest.put_record(pair.source, self.source_set, record))
                assert outcome == ("updated" if n in self.live else "added"), (n, outcome)
                self.versions[n] = version
                self.live.add(n)

        @precondition(lambda self: bool(self.live))
        @rule(data=st.data())
        def delete(self, data: st.DataObject) -> None:
            """Delete some of the live records, in one transaction."""
            numbers = data.draw(
                st.lists(st.sampled_from(sorted(self.live)), min_size=1, unique=True)
            )
            identifiers = [self.identifier(n) for n in numbers]
            result = wait(ingest.delete_local(pair.source, self.source_set, identifiers))
            assert result.outcomes == dict.fromkeys(identifiers, "deleted")
            self.live.difference_update(numbers)

        @rule(page_size=PAGE_SIZES, allow_mass_delete=st.booleans(), fault=FAULTS)
        def harvest(self, page_size: int, allow_mass_delete: bool, fault: str | None) -> None:
            """An incremental harvest (the first is full), which may meet a fault; when it
            completes, the sink holds what the source holds."""
            report = self.harvest_once(page_size, allow_mass_delete, fault)
            if report.status == "stopped":
                assert not allow_mass_delete
                assert report.error_kind == "mass_delete", report.summary()
                return
            if report.status == "failed":
                # a list cut short by a broken page or a lost token: the next run resumes
                assert peer.made, report.summary()
                assert fault in ("truncated", "expired"), report.summary()
                return
            assert report.status == "ok", report.summary()
            self.check_copy()

        def identifier(self, n: int) -> str:
            return identifier_for(n, self.centre)

        def harvest_once(
            self, page_size: int, allow_mass_delete: bool, fault: str | None = None
        ) -> Any:
            pair.provider.settings.page_size = page_size
            peer.fault, peer.made = fault, False
            return wait(run(pair, self.link, allow_mass_delete=allow_mass_delete))

        def check_copy(self) -> None:
            source = wait(content(pair.source, self.source_set))
            sink = wait(content(pair.sink, self.sink_set))
            assert sink == source
            expected_live = {self.identifier(n) for n in self.live}
            assert {i for i, (_, deleted) in source.items() if not deleted} == expected_live

        def teardown(self) -> None:
            report = self.harvest_once(2, allow_mass_delete=True)
            assert report.status == "ok", report.summary()
            self.check_copy()

    return SourceAndSink


async def test_f03_a_harvested_copy_equals_its_source_after_any_changes(pair: Pair) -> None:
    """F03: random creates, updates and deletes on a source node, interleaved with harvests of
    random page sizes (by ListRecords or ListIdentifiers) that may meet a 503, a truncated page
    or an expired token; after every completed harvest and after a final one, the sink's copy
    equals the source: identifiers, deleted flags and content hashes."""
    app = web.Application()
    async with aiohttp.ClientSession() as http:
        peer = FaultyPeer(pair.provider.oai, http)
        app.router.add_get("/oai", peer.handle)
        async with serving_app(app) as root:
            await run_machine(machine_for(pair, peer, root + "/oai", asyncio.get_running_loop()))


async def run_machine(machine: type[RuleBasedStateMachine]) -> None:
    # a tenth of the profile's examples (each is a run of up to 20 steps): 10 in CI, 1000 soak
    examples = max(10, settings().max_examples // 10)
    await asyncio.to_thread(
        run_state_machine_as_test,
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=20,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
