"""The logs of a real ``wiscat harvest`` with ``WISCAT_LOG_FORMAT=json``: one JSON object per line,
and every run, every refused and every quarantined record says why."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.e2e.nodes import WISCAT, Node, NodeFactory, stop_signals_by_default
from tests.support.servers import list_records_page, serving
from wiscat.harvester.page_workers import WORKER_MIN_BYTES
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render
from wiscat.shared.version import VERSION

PEER_SET = "WIS-GISC-PEER"


def events(stderr: str) -> list[dict[str, Any]]:
    """Every line of ``stderr`` as a JSON object (a line that is not one fails the test)."""
    parsed = []
    for line in stderr.splitlines():
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise AssertionError(f"not a JSON log line: {line!r}") from exc
        assert {"time", "level", "logger", "message"} <= set(event), line
        parsed.append(event)
    return parsed


def said(found: list[dict[str, Any]], level: str, *words: str) -> bool:
    return any(e["level"] == level and all(w in e["message"] for w in words) for e in found)


async def harvest(node: Node, link: str) -> tuple[int, list[dict[str, Any]], str]:
    """Exit status, log events and stdout: the run's summary, the command's result, is printed
    there, once (the harvester service logs it)."""
    code, out, err = await node.wiscat("harvest", link, check=False)
    return code, events(err), out


async def test_harvest_logs_say_why_in_json_lines(make_node: NodeFactory, tmp_path: Path) -> None:
    node = await make_node("LOGS")
    own_xml = generate_record(0, centre="lg")
    own = parse_record(own_xml)
    (tmp_path / "own.xml").write_bytes(own_xml)
    await node.wiscat("ingest", str(tmp_path / "own.xml"))

    now = datetime.now(UTC)
    newer = parse_record(generate_record(1, centre="lg", md_datestamp=datetime(2024, 6, 1)))
    older = parse_record(generate_record(1, centre="lg", md_datestamp=datetime(2023, 6, 1)))
    first = list_records_page(
        [
            render.record(newer.identifier, now, [PEER_SET], False, newer.xml),
            # a GISC link may not change the own set (invariant 6)
            render.record(
                own.identifier,
                now,
                [PEER_SET],
                False,
                generate_record(0, centre="lg", version=1).decode(),
            ),
            render.record(
                "no-file-id",
                now,
                [PEER_SET],
                False,
                "<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'/>",
            ),
        ]
    )
    # the second run brings an older revision of the record the first run stored (invariant 5)
    second = list_records_page([render.record(older.identifier, now, [PEER_SET], False, older.xml)])
    served = [first, second]

    async def pages(request: web.Request) -> bytes:
        return served[0]

    async with serving(first, pages=pages) as url:
        await node.wiscat("link", "add", "peer", "--url", url, "--set", PEER_SET)
        code, found, out = await harvest(node, "peer")
        assert code == 0, found
        assert said(found, "warning", "peer", "quarantined no-file-id", "fileIdentifier")
        assert said(found, "warning", "peer", f"refused {own.identifier}", "own set")
        assert out.startswith("peer full run "), out
        assert all(w in out for w in (": ok", "added 1", "quarantined 1", "refused 1")), out

        served.pop(0)
        code, found, _ = await harvest(node, "peer")
        assert code == 0, found
        assert said(found, "info", f"refused {older.identifier}", "older")

    async with serving(b"<html><body>down for maintenance</body></html>", "text/html") as url:
        await node.wiscat("link", "add", "broken", "--url", url, "--set", "WIS-GISC-BROKEN")
        code, found, out = await harvest(node, "broken")
    assert code == 1
    assert out.startswith("broken full run "), out
    assert all(w in out for w in (": failed", "BadResponse", "HTML")), out
    # a run's events name its link and run as fields of their own
    runs = [e for e in found if e["logger"] == "wiscat.harvester" and "link" in e]
    assert runs and all(e["link"] == "broken" and isinstance(e["run"], int) for e in runs)


async def test_a_service_stopped_by_a_signal_says_which_and_that_it_stopped(
    make_node: NodeFactory,
) -> None:
    """An operator (or a test that sees a service gone) reads in its log why it stopped."""
    node = await make_node("SIGNALS")
    for command, port, sig, stopped in (
        ("provider", node.provider_port, signal.SIGTERM, "provider stopped"),
        ("harvester", node.harvester_port, signal.SIGINT, "harvester stopped"),
        ("run", node.provider_port, signal.SIGTERM, "node stopped"),
        # its terminal gone: the default ended the process on the spot, without a word, an
        # embedded PostgreSQL left running
        ("run", node.provider_port, signal.SIGHUP, "node stopped"),
    ):
        process = await node.start(command, f"http://127.0.0.1:{port}/readyz")
        process.send_signal(sig)
        assert await process.wait() == 0, command
        found = events(node.logs[-1].read_text())
        assert said(found, "info", f"{sig.name} received: stopping"), (command, found[-5:])
        assert said(found, "info", stopped), (command, found[-5:])
        # which wiscat it was, for a report of what happened
        started = "provider ready" if command == "provider" else "scheduling"
        assert said(found, "info", started, f"wiscat {VERSION}"), (command, found[:8])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
async def test_a_node_whose_process_group_is_signalled_stops_without_a_traceback(
    make_node: NodeFactory, tmp_path: Path, sig: signal.Signals
) -> None:
    """Ctrl-C and a closed terminal signal the whole process group, the harvester's page workers
    and multiprocessing's helpers with it. Ctrl-C gave a KeyboardInterrupt traceback per worker;
    a hangup killed the resource tracker, which the stopping harvester started again, and the
    new one printed a KeyError traceback for each of the pool's semaphores."""
    node = await make_node("GROUP")
    now = datetime.now(UTC)
    records = [parse_record(generate_record(n, centre="group")) for n in range(40)]
    page = list_records_page([render.record(r.identifier, now, [], False, r.xml) for r in records])
    assert len(page) > WORKER_MIN_BYTES  # read by the page workers, not in a thread
    log = tmp_path / "run.log"
    async with serving(page) as url:
        await node.wiscat("link", "add", "peer", "--url", url, "--into", PEER_SET)
        with log.open("wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                WISCAT,
                "run",
                env=node.env(),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,  # a group of its own, as a terminal's job has
                preexec_fn=stop_signals_by_default,
            )
        try:
            for _ in range(300):  # the link is due at once
                _, out, _ = await node.wiscat("link", "runs", "peer", "--json")
                if any(run["status"] == "ok" for run in json.loads(out)):
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"no harvest: {log.read_text()[-2000:]}")
            os.killpg(process.pid, sig)
            assert await asyncio.wait_for(process.wait(), 60) == 0
        finally:
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGKILL)
    found = events(log.read_text())  # every line a JSON event: no traceback printed raw
    assert said(found, "info", f"{sig.name} received: stopping")
    assert said(found, "info", "node stopped")
    assert not [e for e in found if e["level"] in ("warning", "error", "critical")], found
