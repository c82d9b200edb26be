"""The WIS 2.0 bridge's benchmark (``python -m bench.run --only wis2``): records rendered and
validated as WCMP2, the publish rate to a loopback mosquitto, the time from a change ingested
at the node to its message on the broker, and the offline part of WMO's WCMP2 KPIs (title,
description, contacts, time) of the records rendered.

The KPI rules are WMO's (pywcmp's ``kpi.py``, the WCMP2 KPI text) written again here, without
the spelling tests (they need a dictionary of English words a node does not ship) and the
tests that fetch URLs (links health, graphic overview): :func:`kpi` scores each of the four,
and the mean is the points of all four over their totals, averaged over the records.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.measure import (
    ROOT,
    WISCAT,
    free_port,
    machine,
    percentile,
    process,
    provider_env,
)
from tests.support import factories, pg
from tests.support.mosquitto import PUBLISHER, Mosquitto, Subscriber, running_mosquitto
from wiscat.harvester.wis2 import BATCH, Broker, Counts, publish_once
from wiscat.shared.db import wis2
from wiscat.shared.db.pool import create_pool
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.wcmp2.centres import parse_rules
from wiscat.shared.wcmp2.convert import convert
from wiscat.shared.wcmp2.identifiers import wcmp2_id
from wiscat.shared.wcmp2.urls import collection_url
from wiscat.shared.wcmp2.validation import SCHEMA_FILE, load_schema, schema_errors

OWN = "WIS-GISC-BENCH"
CENTRES = "de-dwd;de-dwd=licence:https://www.dwd.de/terms"
BASE_URL = "http://127.0.0.1:8080/oai"
SAMPLES = 20
#: WMO's WCMP2 schema, read in place: where ``pywcmp bundle sync`` leaves it, else the team's copy
SCHEMAS = (SCHEMA_FILE.expanduser(), ROOT.parent / "shared/reference/wis2/wcmp2/wcmp2-bundled.json")

_ACRONYM = re.compile(r"\b([A-Z]{2,}\d*)\b")
_BULLETIN = re.compile(r"[A-Z]{4}\d{2}[\s_]*[A-Z]{4}")
_MARKUP = re.compile(r"<[A-Za-z/][^>]*>")


def kpi(record: dict[str, Any]) -> dict[str, tuple[int, int, list[str]]]:
    """The offline KPIs of one WCMP2 record: name -> (score, total, what cost points)."""
    properties = record.get("properties") or {}
    return {
        "title": _title(properties.get("title") or ""),
        "description": _description(properties.get("description") or ""),
        "contacts": _contacts(properties.get("contacts") or []),
        "time": _time(record.get("time")),
    }


def _title(title: str) -> tuple[int, int, list[str]]:
    words = title.split()
    bare = _ACRONYM.sub("", title).strip()
    checks = [
        (bool(title), "no title"),
        (len(words) >= 3, "title of fewer than 3 words"),
        (len(title) <= 150, "title over 150 characters"),
        (all(word.isalnum() for word in words), "title with a word not alphanumeric"),
        (bare.capitalize() == bare, "title not in sentence case"),
        (len(_ACRONYM.findall(title)) <= 3, "title with more than 3 acronyms"),
    ]
    score = sum(ok for ok, _ in checks)
    lost = [why for ok, why in checks if not ok]
    if _BULLETIN.search(title):
        score -= 1  # WMO's rule takes a point away
        lost.append("title with a GTS bulletin header")
    else:
        score += 1
    return score, 7, lost  # 8 with the spelling test


def _description(text: str) -> tuple[int, int, list[str]]:
    checks = [
        (16 <= len(text) <= 2048, "description not of 16 to 2,048 characters"),
        (not _MARKUP.search(text), "description with markup"),
        (not _BULLETIN.search(text), "description with a GTS bulletin header"),
    ]
    return sum(ok for ok, _ in checks), 3, [why for ok, why in checks if not ok]  # 4 with spelling


def _contacts(contacts: list[dict[str, Any]]) -> tuple[int, int, list[str]]:
    host = next((c for c in contacts if "host" in (c.get("roles") or [])), None)
    if host is None:
        return 0, 3, ["no contact of role host"]
    lost = []
    if host.get("contactInstructions") is None:
        lost.append("host contact without contactInstructions")
    if not any("value" in email for email in host.get("emails") or []):
        lost.append("host contact without an email")
    return 3 - len(lost), 3, lost


def _time(extent: dict[str, Any] | None) -> tuple[int, int, list[str]]:
    interval = (extent or {}).get("interval")
    if interval is None:
        return 0, 0, []  # WMO's rule scores no instant and no record without time
    lost = []
    begin, end = interval
    if not ((".." not in interval and begin <= end) or end == ".."):
        lost.append("time interval ending before it begins")
    if interval == ["..", ".."]:
        lost.append("time interval open at both ends")
    if extent is not None and extent.get("resolution") is None:
        lost.append("time interval without a resolution")
    return 3 - len(lost), 3, lost


def kpi_summary(contents: list[bytes]) -> tuple[float, dict[str, float], Counter[str]]:
    """The mean KPI percentage over the records, each KPI's, and what cost points how often."""
    percentages = []
    each: dict[str, list[float]] = {}
    lost: Counter[str] = Counter()
    for content in contents:
        found = kpi(json.loads(content))
        score = sum(s for s, _, _ in found.values())
        total = sum(t for _, t, _ in found.values())
        percentages.append(100 * score / total)
        for name, (s, t, why) in found.items():
            if t:
                each.setdefault(name, []).append(100 * s / t)
            lost.update(why)
    means = {name: statistics.fmean(values) for name, values in each.items()}
    return statistics.fmean(percentages), means, lost


async def bench_render(server_url: str, count: int) -> tuple[str, list[str]]:
    """A database of ``count`` generated records of the own set rendered: its URL and lines."""
    url = await pg.clone_template(server_url)
    pool = await create_pool(url, max_size=2)
    try:
        await factories.load_records(pool, OWN, range(count))
        how = wis2.Rendering(OWN, parse_rules(CENTRES), BASE_URL, page_size=200)
        started = time.perf_counter()
        done = await wis2.render(pool, how)
        seconds = time.perf_counter() - started
        contents = [
            bytes(r["content"])
            for r in await pool.fetch("select content from wis2_records where not deleted")
        ]
        sources = [r["xml"] for r in await pool.fetch("select xml from records limit 1000")]
    finally:
        await pool.close()
    started = time.perf_counter()
    for xml in sources:
        convert(xml, how.rules, oai_base_url=how.oai_base_url)
    converting = (time.perf_counter() - started) / len(sources)
    mean, means, lost = kpi_summary(contents)
    lines = [
        f"- render: {count:,} generated records of the own set converted to WCMP2, checked "
        "against the test suite's rules (what the harvester's renderer does) and queued, one "
        f"transaction a page of 200: **{seconds:.1f} s** ({count / seconds:,.0f} records a "
        f"second); {done.canonical:,} announced, {done.invalid:,} invalid. The conversion "
        f"alone (1,000 of them again, no database): {converting * 1000:.1f} ms a record, "
        f"{converting * count:.1f} s of the {count:,}; the rest is the database work of the "
        "page transactions (each statement once a page, its rows in a pipeline).",
        _schema_check(contents, seconds),
        f"- offline WCMP2 KPIs of the {len(contents):,} records rendered (title, description, "
        f"contacts, time; WMO's rules without the spelling tests): **mean {mean:.1f}%** "
        "(goal: at least 65%); "
        + ", ".join(f"{name} {value:.1f}%" for name, value in means.items())
        + ". What costs points: "
        + "; ".join(f"{why} ({n / len(contents):.0%} of records)" for why, n in lost.most_common())
        + ".",
    ]
    return url, lines


def _schema_check(contents: list[bytes], render_seconds: float) -> str:
    """The records checked against WMO's WCMP2 schema (``wiscat wis2 render --schema``)."""
    path = next((path for path in SCHEMAS if path.is_file()), None)
    if path is None:
        return "- validate against WMO's WCMP2 schema: not yet (no wcmp2-bundled.json found)."
    validator = load_schema(path)
    started = time.perf_counter()
    failing = sum(bool(schema_errors(json.loads(content), validator)) for content in contents)
    seconds = time.perf_counter() - started
    return (
        f"- validate against WMO's WCMP2 schema (jsonschema; `wiscat wis2 render --schema` "
        f"runs it, the harvester's renderer does not): the {len(contents):,} records in "
        f"{seconds:.1f} s ({seconds / len(contents) * 1000:.1f} ms a record), {failing:,} "
        f"failing; render and validate together: **{render_seconds + seconds:.1f} s** (goal: at "
        "most 60 s)."
    )


async def bench_publish(database_url: str, broker: Mosquitto) -> list[str]:
    """The rendered outbox sent to ``broker``: messages the broker acknowledged a second."""
    pool = await create_pool(database_url, max_size=2)
    client = Broker(broker.url, *PUBLISHER, None)
    client.start()
    try:
        if not await asyncio.to_thread(client.connected.wait, 10):
            raise RuntimeError(f"no connection to the broker: {client.last_error}")
        counts = Counts()
        collection = collection_url(BASE_URL)
        started = time.perf_counter()
        sent = 0
        while (done := await publish_once(pool, client, collection, counts)) > 0:
            sent += done
        seconds = time.perf_counter() - started
        left = await pool.fetchval("select count(*) from wis2_outbox where sent_at is null")
    finally:
        client.stop()
        await pool.close()
    return [
        f"- publish: {sent:,} messages sent to mosquitto on loopback (QoS 1, each counted "
        f"when its PUBACK came; {BATCH} in flight, the outbox marked a batch at a time) in "
        f"{seconds:.1f} s: **{sent / seconds:,.0f} messages a second** (goal: at least 100); "
        f"{left} left unsent.",
    ]


class TimedSubscriber(Subscriber):
    """A subscriber noting when each record's message arrived (monotonic clock)."""

    def __init__(self, broker: Mosquitto) -> None:
        self.arrived: dict[str, float] = {}
        self.arrival = threading.Condition()
        super().__init__(broker)

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        metadata_id = json.loads(msg.payload)["properties"]["metadata_id"]
        with self.arrival:
            self.arrived.setdefault(metadata_id, time.monotonic())
            self.arrival.notify_all()

    def wait(self, metadata_id: str, timeout: float = 30) -> float:
        with self.arrival:
            if not self.arrival.wait_for(lambda: metadata_id in self.arrived, timeout):
                raise RuntimeError(f"no message for {metadata_id} within {timeout} s")
            return self.arrived[metadata_id]


async def bench_latency(server_url: str, broker: Mosquitto, poll: str) -> str:
    """A harvester announcing (the default settle window, WISCAT_WIS2_POLL_SECONDS ``poll``);
    ``wiscat ingest`` of one new record at a time, :data:`SAMPLES` times: the seconds from the
    ingest's commit (the command's exit) to the record's message on the broker."""
    url = await pg.clone_template(server_url)
    env = provider_env(url, free_port(), 200)
    env.pop("WISCAT_SETTLE_SECONDS")
    port = free_port()
    env.update(
        {
            "WISCAT_HARVESTER_PORT": str(port),
            "WISCAT_WIS2_CENTRES": CENTRES,
            "WISCAT_WIS2_BROKER_URL": broker.url,
            "WISCAT_WIS2_BROKER_USER": PUBLISHER[0],
            "WISCAT_WIS2_BROKER_PASSWORD": PUBLISHER[1],
            "WISCAT_WIS2_POLL_SECONDS": poll,
        }
    )
    subscriber = TimedSubscriber(broker)
    delays = []
    try:
        ready = f"http://127.0.0.1:{port}/readyz"
        with tempfile.TemporaryDirectory() as folder:
            async with process([WISCAT, "harvester"], ready, env):
                for n in range(1_000_000, 1_000_000 + SAMPLES):
                    for old in Path(folder).iterdir():
                        old.unlink()
                    (Path(folder) / f"{n}.xml").write_bytes(generate_record(n))
                    ingest = await asyncio.create_subprocess_exec(
                        WISCAT, "ingest", folder, env=env, stdout=asyncio.subprocess.DEVNULL
                    )
                    if await ingest.wait():
                        raise RuntimeError(f"wiscat ingest exited {ingest.returncode}")
                    committed = time.monotonic()
                    arrived = await asyncio.to_thread(
                        subscriber.wait, wcmp2_id("de-dwd", identifier_for(n))
                    )
                    delays.append(arrived - committed)
    finally:
        subscriber.close()
    p95 = percentile(delays, 0.95)
    return (
        f"WISCAT_WIS2_POLL_SECONDS={poll}: p95 **{p95:.2f} s**, median "
        f"{statistics.median(delays):.2f} s, most {max(delays):.2f} s"
    )


async def run(server_url: str, server: str, count: int = 10_000) -> list[str]:
    """The ``wis2`` section of docs/benchmarks.md, on the PostgreSQL server ``server``."""
    lines = [
        "## WIS 2.0 bridge",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {machine()}, `nproc` {os.cpu_count()}, "
        f"PostgreSQL {server}, `python -m bench.run --only wis2 --servers {server}`:",
        "",
    ]
    database, rendered = await bench_render(server_url, count)
    lines += rendered
    print(*rendered, sep="\n", flush=True)
    with running_mosquitto() as broker:
        lines += await bench_publish(database, broker)
        figures = [await bench_latency(server_url, broker, poll) for poll in ("2", "0.5")]
    lines.append(
        f"- from a change to its message: {SAMPLES} records ingested one at a time "
        "(`wiscat ingest`, the default settle window of 0.5 s) into a node whose harvester "
        "announces; seconds from the ingest's commit to the message on the broker (goal: p95 "
        "at most 2 s): " + "; ".join(figures) + "."
    )
    return [*lines, ""]
