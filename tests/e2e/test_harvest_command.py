"""``wiscat harvest NAME`` as a cron job or an operator runs it: a run longer than a lease keeps
its link, and a run stopped with SIGTERM (a job's time limit, ``timeout``, a container's stop)
records its run and gives the link back, as one stopped with Ctrl-C does."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from aiohttp import web

from tests.e2e.nodes import WISCAT, Node, NodeFactory, stop_signals_by_default
from tests.support.servers import list_records_page, serving
from wiscat.shared.db.pool import connect
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render

PAGES = 30


class SlowPeer:
    """A peer whose list has ``PAGES`` pages of one record, each sent after ``delay`` s."""

    def __init__(self) -> None:
        self.delay = 0.3
        now = datetime.now(UTC)
        self.pages = []
        for n in range(PAGES):
            record = parse_record(generate_record(n, centre="slow"))
            more = n + 1 < PAGES
            token = render.resumption_token(
                f"p{n + 1}" if more else None, cursor=n, complete_list_size=PAGES, expiration=None
            )
            piece = render.record(record.identifier, now, [], False, record.xml)
            self.pages.append(list_records_page([piece + token]))

    async def page(self, request: web.Request) -> bytes:
        token = request.query.get("resumptionToken")
        await asyncio.sleep(self.delay)
        return self.pages[int(token[1:]) if token else 0]


@pytest.fixture
async def peer_url() -> AsyncIterator[tuple[SlowPeer, str]]:
    peer = SlowPeer()
    async with serving(b"", pages=peer.page) as url:
        yield peer, url


async def start_harvest(node: Node) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        WISCAT,
        "harvest",
        "slow",
        env=node.env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=stop_signals_by_default,
    )


async def pages_done(node: Node, at_least: int) -> None:
    conn = await connect(node.database_url)
    try:
        for _ in range(300):
            if (await conn.fetchval("select max(pages) from harvest_runs") or 0) >= at_least:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the harvest did not reach page {at_least}")
    finally:
        await conn.close()


async def runs(node: Node) -> list[tuple[str, str | None]]:
    conn = await connect(node.database_url)
    try:
        rows = await conn.fetch("select status, error_kind from harvest_runs order by id")
    finally:
        await conn.close()
    return [(row["status"], row["error_kind"]) for row in rows]


async def test_a_run_longer_than_its_lease_keeps_its_link(
    make_node: NodeFactory, peer_url: tuple[SlowPeer, str]
) -> None:
    _, url = peer_url
    node = await make_node("LEASE")
    node.extra["WISCAT_HARVEST_LEASE_SECONDS"] = "1"
    await node.wiscat("link", "add", "slow", "--url", url, "--into", "WIS-GISC-SLOW")
    first = await start_harvest(node)
    await pages_done(node, 8)  # 2.4 s at least: the lease was taken more than twice as long ago

    code, _, err = await node.wiscat("harvest", "slow", check=False)
    assert code == 1
    # who runs it, and where to look: the first command's worker (host:pid), its lease
    assert re.fullmatch(
        rf"wiscat: link slow is being harvested by another worker \([^ ]+:{first.pid}, its "
        r"lease until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\); its run shows in "
        r"`wiscat link runs slow`",
        err.splitlines()[-1],
    ), err

    out, err = await first.communicate()
    assert first.returncode == 0, err.decode()
    assert f"pages {PAGES}; added {PAGES}" in out.decode()
    assert await runs(node) == [("ok", None)]  # one run, never marked abandoned by another


# SIGHUP: the terminal of an operator's session gone (its default ended the process on the spot,
# the run left marked running until another worker found it abandoned)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_a_stop_signal_ends_the_run_as_stopped_and_frees_the_link(
    make_node: NodeFactory, peer_url: tuple[SlowPeer, str], sig: signal.Signals
) -> None:
    peer, url = peer_url
    node = await make_node("STOPPED")
    await node.wiscat("link", "add", "slow", "--url", url, "--into", "WIS-GISC-SLOW")
    process = await start_harvest(node)
    await pages_done(node, 3)
    process.send_signal(sig)
    _, err = await process.communicate()
    assert process.returncode == 128 + sig
    assert f"wiscat: stopped by {sig.name}" in err.decode()
    assert "Traceback" not in err.decode()
    assert await runs(node) == [("failed", "cancelled")]
    _, listed, _ = await node.wiscat("link", "list")
    assert "the process was asked to stop" in listed

    # the link is free at once (no lease left to run out), and the next run completes the list
    peer.delay = 0
    code, _, err = await node.wiscat("harvest", "slow", check=False)
    assert code == 0, err
    assert await runs(node) == [("failed", "cancelled"), ("ok", None)]
    conn = await connect(node.database_url)
    try:
        assert await conn.fetchval("select count(*) from records") == PAGES
    finally:
        await conn.close()


async def test_a_long_run_prints_progress_every_progress_seconds(
    make_node: NodeFactory, peer_url: tuple[SlowPeer, str]
) -> None:
    # WISCAT_PROGRESS_SECONDS, as for ingest and check (it was 60 s whatever that said)
    peer, url = peer_url
    peer.delay = 0.1  # 30 pages: 3 s at least
    node = await make_node("PROGRESS")
    node.extra.update(WISCAT_PROGRESS_SECONDS="0.5", WISCAT_LOG_FORMAT="text")
    await node.wiscat("link", "add", "slow", "--url", url, "--into", "WIS-GISC-SLOW")
    code, out, err = await node.wiscat("harvest", "slow")
    assert code == 0 and f"pages {PAGES}; added {PAGES}" in out, err
    progress = re.findall(r"harvest slow run \d+: (\d+) pages, (\d+) records so far", err)
    assert len(progress) >= 2, err
    assert all(0 < int(pages) <= PAGES for pages, _ in progress), err
