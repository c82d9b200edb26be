"""The consistency checker as a command (its table, JSON and exit codes) and on the harvester's
schedule: stored, exported, served, run once per interval by the worker holding it."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client import generate_latest

from tests.integration.checks.nodes import SET, Mesh, wiscat
from tests.support.harvest_pair import sink_settings
from tests.support.servers import serving
from wiscat.harvester.scheduled_checks import export_check_metrics, run_due_checks
from wiscat.harvester.service import harvest_context
from wiscat.shared.db import checks as check_store
from wiscat.shared.db.pool import Pool, create_pool
from wiscat.shared.oaipmh import render


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
        # what WiscatCheckStopped compares the last run with: the check's interval (1d)
        assert 'wiscat_check_interval_seconds{check="offenbach"} 86400.0' in text
        assert 'wiscat_check_created_timestamp_seconds{check="offenbach"}' in text

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
        for gauge in (
            "items",
            "peer_checked",
            "consistent",
            "last_run_timestamp_seconds",
            "interval_seconds",
            "created_timestamp_seconds",
        ):
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
