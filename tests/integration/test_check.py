"""The consistency checker against real nodes built to show each category (docs/checks.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import generate_latest

from tests import factories
from tests.harvest_pair import SOURCE_SET, Pair, add_link, run, sink_settings
from tests.pg import clone_template, drop_database
from tests.servers import RunningProvider, loopback_socket, running_provider, serving
from wiscat.harvester.check import CheckRequest, run_check
from wiscat.harvester.client import ClientSettings, OAIClient
from wiscat.harvester.scheduled_checks import export_check_metrics, run_due_checks
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import checks as check_store
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render

SET = "WIS-GISC-TEST"
FIXTURES = Path(__file__).parent.parent / "data" / "oai"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def _days_ago(days: int) -> str:
    # recent enough that the providers' tombstone purge (90 days) leaves the deletions alone
    return (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


T0 = _days_ago(10)  # the source's datestamps
T1 = _days_ago(9)  # arrival at the peers, later: in step
T_OLD = _days_ago(20)
T_BUMP = _days_ago(8)  # a datestamp bumped at the source without a change
T_LATE = _days_ago(7)


async def stamp(pool: Pool, identifiers: list[str], when: str) -> None:
    """Set the arrival datestamp of ``identifiers`` (in every set) to ``when``."""
    for table in ("records", "set_members"):
        await factories.backdate(
            pool,
            f"update {table} set datestamp = $2::text::timestamptz where identifier = any($1)",
            identifiers,
            when,
        )


@dataclass
class Mesh:
    ids: list[str]  # ids[n] is record n
    source: RunningProvider
    good: RunningProvider
    bad: RunningProvider
    duplicating: str
    failing: str
    unreachable: str


@contextlib.asynccontextmanager
async def fixture_server(handler: web.RequestHandler) -> AsyncIterator[str]:  # type: ignore[type-arg]
    app = web.Application()
    app.router.add_route("*", "/oai", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = loopback_socket()
    site = web.SockSite(runner, sock)
    await site.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/oai"
    finally:
        await runner.cleanup()


def identifiers_page(entries: list[tuple[str, str]]) -> str:
    headers = "".join(
        f"<header><identifier>{i}</identifier><datestamp>{d}</datestamp>"
        f"<setSpec>{SET}</setSpec></header>"
        for i, d in entries
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        f"<responseDate>{T_LATE}</responseDate>"
        '<request verb="ListIdentifiers">http://peer/oai</request>'
        f"<ListIdentifiers>{headers}</ListIdentifiers></OAI-PMH>"
    )


@pytest.fixture
async def mesh(db: Pool, database_url: str, template_ready: str) -> AsyncIterator[Mesh]:
    # The source: records 0..29 of its own set, 28 and 29 deleted, all stamped T0; record 6's
    # datestamp is later bumped to T_BUMP with no change of content.
    ids = await factories.load_records(db, SET, range(30))
    await factories.load_records(db, SET, [3], version=1)  # 3 changed at the source
    await factories.delete(db, SET, ids[28:30])
    await stamp(db, ids, T0)
    await stamp(db, [ids[6]], T_BUMP)

    good_url = await clone_template(template_ready)
    bad_url = await clone_template(template_ready)
    good = await create_pool(good_url, max_size=2)
    bad = await create_pool(bad_url, max_size=2)
    try:
        # A peer in step: every live record, arrived after the source stamped it.
        await factories.load_records(good, SET, range(28), kind="remote")
        await factories.load_records(good, SET, [3], version=1, kind="remote")
        await stamp(good, ids, T1)
        await stamp(good, [ids[6]], T_LATE)
        # A peer with one of each fault.
        await factories.load_records(bad, SET, [*range(2, 29), 99], kind="remote")  # 0, 1 missing
        await factories.load_records(bad, SET, [5], version=1, kind="remote")  # 5 altered
        await factories.delete(bad, SET, [ids[2]])  # 2: deleted at the peer only
        await stamp(bad, [*ids, generated_id(99)], T1)
        await stamp(bad, [ids[3]], T_OLD)  # 3 outdated: the peer missed its change
        await stamp(bad, [ids[4]], T0)  # 4 copied datestamp
        # 6: T1 < T_BUMP, outdated by datestamp, same content; 28 live: a missed deletion

        live = [(ids[n], T_LATE if n == 6 else T1) for n in range(28)]

        async def duplicating(request: web.Request) -> web.Response:
            if request.query.get("verb") == "ListIdentifiers":
                page = identifiers_page([*live[:8], (ids[7], T_LATE), *live[8:]])
                return web.Response(text=page, content_type="text/xml")
            return web.Response(status=400)

        async def failing(request: web.Request) -> web.Response:
            return web.Response(status=500, text="<html>Internal Server Error</html>")

        closed = loopback_socket()
        unreachable = f"http://127.0.0.1:{closed.getsockname()[1]}/oai"
        closed.close()

        async with (
            running_provider(database_url, page_size=7) as source,  # five pages
            running_provider(good_url, gisc_name="GOOD") as good_provider,
            running_provider(bad_url, gisc_name="BAD") as bad_provider,
            fixture_server(duplicating) as duplicating_url,
            fixture_server(failing) as failing_url,
        ):
            yield Mesh(
                ids, source, good_provider, bad_provider, duplicating_url, failing_url, unreachable
            )
    finally:
        await good.close()
        await bad.close()
        await drop_database(template_ready, good_url)
        await drop_database(template_ready, bad_url)


def generated_id(n: int) -> str:
    return parse_record(generate_record(n, centre="xx")).identifier


def found(peer: dict[str, object], category: str) -> set[str]:
    items = peer["items"][category]  # type: ignore[index]
    return {item["identifier"] for item in items}  # type: ignore[union-attr]


async def check(
    mesh_urls: list[str],
    source: str,
    sample: int = 0,
    *,
    set_spec: str = SET,
    timeout: float = 10,
) -> dict[str, object]:
    config = ClientSettings(max_retries=0, read_timeout=timeout, connect_timeout=5)
    async with OAIClient.session(config) as session:
        report, checker = await run_check(
            OAIClient(session, config),
            CheckRequest(set_spec=set_spec, source=source, peers=tuple(mesh_urls), sample=sample),
        )
        with checker:
            return report.as_json()


async def test_each_category_with_its_exact_identifiers(mesh: Mesh) -> None:
    """D11: the check reports each kind of difference with its identifiers."""
    ids = mesh.ids
    peers = [
        mesh.good.oai,
        mesh.bad.oai,
        mesh.duplicating,
        mesh.failing,
        mesh.unreachable,
    ]
    report = await check(peers, mesh.source.oai, sample=100)
    assert report["outcome"] == "inconsistent"
    source = report["source"]
    assert (source["status"], source["live"], source["deleted"]) == ("ok", 28, 2)  # type: ignore[index]
    good, bad, duplicating, failing, unreachable = report["peers"]  # type: ignore[misc]

    assert good["status"] == "ok"
    # record 6 was bumped at the source, and the good peer took it again later (T_LATE)
    assert good["counts"] == {
        "missing": 0,
        "extra": 0,
        "outdated": 0,
        "copied_datestamp": 0,
        "duplicates": 0,
        "altered": 0,
        "datestamp_only": 0,
    }
    assert good["sampled"] == 28

    assert bad["status"] == "ok"
    assert found(bad, "missing") == {ids[0], ids[1], ids[2]}
    assert found(bad, "extra") == {ids[28], generated_id(99)}
    assert found(bad, "outdated") == {ids[3], ids[6]}
    assert found(bad, "copied_datestamp") == {ids[4]}
    assert found(bad, "duplicates") == set()
    assert found(bad, "altered") == {ids[5]}
    assert found(bad, "datestamp_only") == {ids[6]}
    assert bad["sampled"] == 25  # live on both sides: 3..27
    outdated = {i["identifier"]: i for i in bad["items"]["outdated"]}
    assert outdated[ids[3]]["source_datestamp"] == T0
    assert outdated[ids[3]]["peer_datestamp"] == T_OLD

    assert duplicating["status"] == "ok"
    assert found(duplicating, "duplicates") == {ids[7]}
    assert duplicating["counts"]["duplicates"] == 1
    # the newer of the two headers counts: record 7 is in step, nothing else is wrong
    assert sum(duplicating["counts"].values()) == 1

    assert failing["status"] == "failed"
    assert "HTTP 500" in failing["reason"]
    assert failing["counts"] == {}
    assert unreachable["status"] == "failed"
    assert "cannot reach" in unreachable["reason"]


async def test_consistent_and_unchecked_outcomes(mesh: Mesh) -> None:
    consistent = await check([mesh.good.oai], mesh.source.oai)
    assert consistent["outcome"] == "consistent"
    # the source itself cannot be listed: nothing could be checked
    unchecked = await check([mesh.good.oai], mesh.failing)
    assert unchecked["outcome"] == "unchecked"
    assert unchecked["source"]["status"] == "failed"  # type: ignore[index]
    # every peer failing is "could not check" too
    none_listed = await check([mesh.failing, mesh.unreachable], mesh.source.oai)
    assert none_listed["outcome"] == "unchecked"
    # one peer failing, the other in step: not consistent (exit 1), and the other is compared
    partly = await check([mesh.good.oai, mesh.failing], mesh.source.oai)
    assert partly["outcome"] == "inconsistent"
    good, failing = partly["peers"]  # type: ignore[misc]
    assert (good["status"], sum(good["counts"].values())) == ("ok", 0)
    assert failing["status"] == "failed"


def headers_of(list_records: bytes) -> bytes:
    """A ListRecords fixture as the ListIdentifiers page that lists its headers (the checker
    asks for ListIdentifiers, and a page that answers another verb fails for that reason)."""
    body = re.sub(rb"<metadata>.*?</metadata>", b"", list_records, flags=re.DOTALL)
    body = re.sub(rb"</?record>", b"", body)
    return body.replace(b"ListRecords>", b"ListIdentifiers>")


@contextlib.asynccontextmanager
async def silent_peer() -> AsyncIterator[str]:
    """A peer that accepts connections and never answers."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes
        writer.close()

    sock = loopback_socket()
    server = await asyncio.start_server(hold, sock=sock)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/oai"
    finally:
        server.close()
        await server.wait_closed()


async def test_each_peer_that_cannot_be_checked_says_why(mesh: Mesh) -> None:
    async with (
        serving(fixture("error-cannotDisseminateFormat.xml")) as oai_error,
        serving(fixture("not-oai-html-error.html"), content_type="text/html") as html,
        serving(headers_of(fixture("malformed-truncated.xml"))) as truncated,
        serving(headers_of(fixture("ListRecords-unreadable-headers.xml"))) as undated,
        serving(fixture("ListRecords-page1.xml")) as records,
        silent_peer() as silent,
    ):
        report = await check(
            [oai_error, mesh.good.oai, html, truncated, undated, records, silent],
            mesh.source.oai,
            timeout=1,
        )
    assert report["outcome"] == "inconsistent"
    reasons = {peer["url"]: peer["reason"] for peer in report["peers"]}  # type: ignore[attr-defined]
    assert reasons == {
        oai_error: "OAI-PMH error cannotDisseminateFormat: iso19115 is not supported",
        mesh.good.oai: None,
        html: f"the peer answered with an HTML page, not OAI-PMH XML (from {html})",
        truncated: reasons[truncated],  # libxml2's words, below
        # a list with a header that cannot be read is not a list the checker can call complete
        undated: f"a header whose datestamp '2024-02-30T08:00:00Z' is no date (from {undated})",
        # its records' headers were compared as if listed
        records: f"a ListIdentifiers request to {records} was answered with 'ListRecords'",
        silent: f"no answer from {silent} in time (after 1 attempts)",
    }
    assert reasons[truncated].startswith("not well-formed XML: Premature end of data")
    assert reasons[truncated].endswith(f"(from {truncated})")
    assert "<string>" not in reasons[truncated]  # lxml's own suffix, which names no real place
    good = report["peers"][1]  # type: ignore[index]
    assert (good["status"], sum(good["counts"].values())) == ("ok", 0)


async def test_a_set_the_source_does_not_have_cannot_be_checked(mesh: Mesh) -> None:
    # a mistyped set name: the source and the peer list nothing, which is no proof of anything
    report = await check([mesh.good.oai], mesh.source.oai, set_spec="WIS-GISC-TSET")
    assert report["outcome"] == "unchecked"
    source = report["source"]
    assert (source["status"], source["reason"]) == (  # type: ignore[index]
        "failed",
        "the source has no set 'WIS-GISC-TSET' (it lists no identifier in it, and its ListSets "
        "does not name it)",
    )

    # a source whose set exists (named on the second page of its ListSets) and is empty
    async def empty_set(request: web.Request) -> bytes:
        if request.query.get("resumptionToken") == "sets-2":
            return fixture("ListSets-page2.xml")
        if request.query.get("verb") == "ListSets":
            return fixture("ListSets-page1.xml")
        return fixture("error-noRecordsMatch.xml")

    async with serving(b"", pages=empty_set) as source_url:
        report = await check([mesh.good.oai], source_url)
    assert report["outcome"] == "inconsistent"
    assert report["source"]["status"] == "ok"  # type: ignore[index]
    (good,) = report["peers"]  # type: ignore[misc]
    assert found(good, "extra") == set(mesh.ids[:28])  # every record the source no longer has


async def wiscat(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "wiscat.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_command_prints_a_table_writes_json_and_exits_by_outcome(
    mesh: Mesh, tmp_path: Path
) -> None:
    ids = mesh.ids
    report_file = tmp_path / "report.json"
    code, out, err = await wiscat(
        "check",
        "--set",
        SET,
        "--source",
        mesh.source.oai,
        mesh.good.oai,
        mesh.bad.oai,
        mesh.failing,
        "--retries",
        "0",
        "--details",
        "--json",
        str(report_file),
    )
    assert code == 1, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("http")}
    assert rows[mesh.good.oai].endswith("consistent")
    bad_row = rows[mesh.bad.oai].split()
    # listed, missing, extra, outdated, copied, duplicates
    assert bad_row[1:7] == ["28", "3", "2", "2", "1", "0"]
    assert "could not check: HTTP 500" in rows[mesh.failing]
    assert ids[3] in out  # --details lists the items
    written = json.loads(report_file.read_text())
    assert written["outcome"] == "inconsistent"
    assert {i["identifier"] for i in written["peers"][1]["items"]["missing"]} == {
        ids[0],
        ids[1],
        ids[2],
    }

    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no part file left
    # a report that could not be written is refused before the check, not after it (an hour
    # of listing a million identifiers at every GISC, lost)
    for target, problem in [
        (
            tmp_path / "no-such-folder" / "r.json",
            f"there is no folder {tmp_path / 'no-such-folder'}",
        ),
        (tmp_path, "it is a folder"),
    ]:
        code, out, err = await wiscat(
            "check", "--set", SET, "--source", mesh.failing, mesh.good.oai, "--json", str(target)
        )
        assert (code, out) == (2, "")
        assert err == f"wiscat: check refused: --json {target}: {problem}\n"

    code, out, _ = await wiscat("check", "--set", SET, "--source", mesh.source.oai, mesh.good.oai)
    assert code == 0
    assert "outcome: consistent" in out
    # the table every list of the command line prints: columns two spaces apart, counts right
    head, row = out.splitlines()[1:3]
    assert head.split() == [
        "PEER", "LISTED", "MISSING", "EXTRA", "OUTDATED", "COPIED", "DUPL.", "STATUS"
    ]  # fmt: skip
    url, listed, *counts = row.split()
    assert (url, counts) == (mesh.good.oai, ["0", "0", "0", "0", "0", "consistent"])
    # LISTED ends where its number ends; STATUS starts where its text starts
    end = row.index(listed, len(url)) + len(listed)
    assert (end, row.index("consistent")) == (head.index("LISTED") + 6, head.index("STATUS"))

    code, out, _ = await wiscat(
        "check", "--set", SET, "--source", mesh.failing, mesh.good.oai, "--retries", "0"
    )
    assert code == 2
    assert "could not be listed: HTTP 500" in out

    # a peer that could not be checked is not consistent
    code, out, _ = await wiscat(
        "check", "--set", SET, "--source", mesh.source.oai, mesh.good.oai, mesh.failing,
        "--retries", "0",
    )  # fmt: skip
    assert code == 1
    assert out.splitlines()[-1] == "outcome: inconsistent"

    # a set the source does not have: nothing could be checked
    code, out, _ = await wiscat(
        "check", "--set", "WIS-GISC-TSET", "--source", mesh.source.oai, mesh.good.oai
    )
    assert code == 2
    assert "could not be listed: the source has no set 'WIS-GISC-TSET'" in out

    code, _, err = await wiscat("check", "--set", SET, "--source", "ftp://x", mesh.good.oai)
    assert code == 2
    assert "not an http(s) URL" in err


async def test_scheduled_check_is_stored_exported_and_served(
    mesh: Mesh, db: Pool, database_url: str
) -> None:
    ids = mesh.ids
    await check_store.save_check(
        db, "offenbach", SET, mesh.source.oai, [mesh.good.oai, mesh.bad.oai, mesh.failing]
    )
    settings = sink_settings(database_url, harvest_max_retries=0, harvest_poll_seconds=0.2)
    async with harvest_context(settings, database_url) as ctx:
        stop = asyncio.Event()
        task = asyncio.create_task(run_due_checks(ctx, stop))
        try:
            for _ in range(300):
                if await check_store.recent_reports(db, "offenbach"):
                    break
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
        (stored,) = await check_store.recent_reports(db, "offenbach")
        assert stored["outcome"] == "inconsistent"
        checks = await check_store.all_checks(db)
        assert checks[0][0].next_run_at > datetime.now(UTC) + timedelta(hours=23)  # every 1d
        assert checks[0][1]["last_outcome"] == "inconsistent"

        # the harvester's metrics carry the latest counts
        await export_check_metrics(ctx)
        text = generate_latest(ctx.metrics.registry).decode()
        bad = mesh.bad.oai
        assert (
            f'wiscat_check_items{{category="missing",check="offenbach",peer="{bad}"}} 3.0' in text
        )
        assert f'wiscat_check_items{{category="extra",check="offenbach",peer="{bad}"}} 2.0' in text
        assert f'wiscat_check_peer_checked{{check="offenbach",peer="{mesh.failing}"}} 0.0' in text
        assert 'wiscat_check_consistent{check="offenbach"} 0.0' in text

        # and the provider's admin API serves them, behind the token
        headers = {"Authorization": "Bearer test-admin-token"}
        async with aiohttp.ClientSession(mesh.source.root) as http:
            async with http.get("/admin/check-reports") as response:
                assert response.status == 401
            async with http.get("/admin/check-reports", headers=headers) as response:
                assert response.status == 200
                (listed,) = await response.json()
            assert listed["check_name"] == "offenbach"
            assert "items" not in listed["report"]["peers"][1]
            assert listed["report"]["peers"][1]["counts"]["missing"] == 3
            async with http.get(
                f"/admin/check-reports/{listed['id']}", headers=headers
            ) as response:
                whole = await response.json()
            missing = {i["identifier"] for i in whole["report"]["peers"][1]["items"]["missing"]}
            assert missing == {ids[0], ids[1], ids[2]}
            async with http.get("/admin/checks", headers=headers) as response:
                (listed_check,) = await response.json()
            assert listed_check["name"] == "offenbach"
            assert listed_check["last_outcome"] == "inconsistent"
            body = {"set": SET, "source": "file:///etc/passwd", "peers": [mesh.good.oai]}
            async with http.put("/admin/checks/x", json=body, headers=headers) as response:
                assert response.status == 400
                assert "not an http(s) URL" in (await response.json())["detail"]
            body = {"set": SET, "source": mesh.source.oai, "peers": [mesh.good.oai], "every": "10s"}
            async with http.put("/admin/checks/x", json=body, headers=headers) as response:
                assert (
                    response.status == 400
                )  # a whole-set audit back to back is no low-impact check
                assert (await response.json())["detail"] == (
                    "check refused: every '10s': at least 1m between runs"
                )
            async with http.post("/admin/checks/offenbach/run", headers=headers) as response:
                assert response.status == 202
            assert (await check_store.all_checks(db))[0][0].next_run_at <= datetime.now(UTC)

        # a removed check's gauges go at the next scrape: its "inconsistent" stayed, for an
        # alert to fire on until the harvester restarted
        async with (
            aiohttp.ClientSession(mesh.source.root) as http,
            http.delete("/admin/checks/offenbach", headers=headers) as response,
        ):
            assert response.status == 200
        await export_check_metrics(ctx)
        text = generate_latest(ctx.metrics.registry).decode()
        for gauge in ("items", "peer_checked", "consistent", "last_run_timestamp_seconds"):
            assert f"wiscat_check_{gauge}{{" not in text
        assert 'wiscat_check_duration_seconds_count{check="offenbach"} 1.0' in text  # history


async def test_a_check_longer_than_its_lease_runs_once(database_url: str) -> None:
    # Two harvester processes on one database: a check that outlasted its lease (6 hours, never
    # renewed: a check of a large set against slow GISCs) was leased again by the other, and run
    # again against every peer at once, storing two reports.
    db = await create_pool(database_url)
    asked: list[str] = []
    now = datetime.now(UTC)

    async def slow_list(request: web.Request) -> bytes:
        token = request.query.get("resumptionToken")
        asked.append(f"{request.url.port} {token}")
        await asyncio.sleep(1.0)  # two pages a list: each list takes 2 s, the lease is 1 s
        ids = [f"urn:x-wmo:md:test::{n}" for n in (range(5) if token is None else range(5, 10))]
        headers = b"".join(render.header(i, now, [SET], False) for i in ids)
        more = b"" if token else b"<resumptionToken>2</resumptionToken>"
        start = render.response_start(
            now, "http://peer/oai", dict(request.query), "ListIdentifiers"
        )
        return start + headers + more + render.response_end("ListIdentifiers")

    settings = sink_settings(
        database_url, harvest_max_retries=0, harvest_poll_seconds=0.2, harvest_lease_seconds=1
    )
    try:
        async with serving(b"", pages=slow_list) as source, serving(b"", pages=slow_list) as peer:
            await check_store.save_check(db, "slow", SET, source, [peer])
            stop = asyncio.Event()
            async with (
                harvest_context(settings, database_url) as first,
                harvest_context(settings, database_url) as second,
            ):
                first.worker, second.worker = "first:1", "second:2"
                tasks = [asyncio.create_task(run_due_checks(ctx, stop)) for ctx in (first, second)]
                try:
                    for _ in range(150):
                        if await check_store.recent_reports(db, "slow"):
                            break
                        await asyncio.sleep(0.1)
                    await asyncio.sleep(3)  # time for a second run to end, if one began
                finally:
                    stop.set()
                    await asyncio.wait_for(asyncio.gather(*tasks), 30)
        reports = await check_store.recent_reports(db, "slow")
        assert len(reports) == 1, reports
        assert len(asked) == 4, asked  # two pages from the source, two from the peer: once
    finally:
        await db.close()


async def test_a_report_is_stored_only_by_the_worker_holding_the_check(db: Pool) -> None:
    # a worker whose lease ran out anyway (cut off from the database for longer than a lease)
    # leaves the check, and its report, to the worker that took it over
    await check_store.save_check(db, "held", SET, "http://source/oai", ["http://peer/oai"])
    leased = await check_store.lease_due(db, "holder", timedelta(minutes=5))
    assert leased is not None and leased.name == "held"
    report = {"set": SET, "source": {"url": "http://source/oai"}, "outcome": "consistent"}
    now = datetime.now(UTC)
    assert await check_store.store_report(db, "held", report, now, now, leased_by="late") is None
    stored = await check_store.store_report(db, "held", report, now, now, leased_by="holder")
    assert stored is not None
    assert [r["id"] for r in await check_store.recent_reports(db, "held")] == [stored]
    # nor a check removed while it ran (its report failed the run: a foreign key violation)
    assert await check_store.remove_check(db, "held")
    assert await check_store.store_report(db, "held", report, now, now, leased_by="holder") is None


async def test_d11_drift_is_reported_exactly_and_a_full_reharvest_repairs_what_its_list_shows(
    pair: Pair,
) -> None:
    """D11: a sink that lost 1 % of its records (2 of 200), holds 0.5 % stale identifiers the
    source never had (1) and missed a deletion whose tombstone the source still lists: the
    check names exactly these. A full re-harvest under the mass-deletion breaker's thresholds
    (H19) brings back the lost records and applies the missed deletion; the stale identifiers
    stay and the check still names them, and only them. Rule: wiscat deletes a harvested record
    only on a deleted header of its source, never because a list did not name it (docs/
    checks.md)."""
    ids = await factories.load_records(pair.source, SOURCE_SET, range(200), centre="dr")
    for table in ("records", "set_members"):  # written an hour ago: no datestamp is "copied"
        await factories.backdate(
            pair.source, f"update {table} set datestamp = datestamp - interval '1 hour'"
        )
    await add_link(pair)
    assert (await run(pair)).status == "ok"
    lost, missed_deletion = ids[50:200:75], ids[7]
    await pair.sink.execute("delete from records where identifier = any($1)", lost)
    stale = await factories.load_records(pair.sink, SOURCE_SET, [900], centre="st")
    await factories.delete(pair.source, SOURCE_SET, [missed_deletion])

    database_url = str(pair.ctx.settings.database_url)
    async with running_provider(database_url, gisc_name="SINK") as sink:
        report = await check([sink.oai], pair.provider.oai, set_spec=SOURCE_SET)
        [before] = report["peers"]  # type: ignore[misc]
        repair = await run(pair, full=True)
        assert (repair.mode, repair.status) == ("full", "ok"), repair.summary()
        assert (repair.counts["added"], repair.counts["deleted"]) == (len(lost), 1)
        report = await check([sink.oai], pair.provider.oai, set_spec=SOURCE_SET)
        [after] = report["peers"]  # type: ignore[misc]
    assert before["status"] == "ok"
    assert {c: found(before, c) for c in before["counts"]} == {
        "missing": set(lost),
        "extra": {*stale, missed_deletion},
        "outdated": set(),
        "copied_datestamp": set(),
        "duplicates": set(),
    }
    assert {c: found(after, c) for c in after["counts"]} == {
        "missing": set(),
        "extra": set(stale),
        "outdated": set(),
        "copied_datestamp": set(),
        "duplicates": set(),
    }
