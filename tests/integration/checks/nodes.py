"""Nodes for the consistency checker's tests: a source and peers built to show each category."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tests.support.servers import RunningProvider
from wiscat.harvester.check import CheckRequest, run_check
from wiscat.harvester.client import ClientSettings, OAIClient
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record

SET = "WIS-GISC-TEST"


def _days_ago(days: int) -> str:
    # recent enough that the providers' tombstone purge (90 days) leaves the deletions alone
    return (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


T0 = _days_ago(10)  # the source's datestamps


T_OLD = _days_ago(20)


@dataclass
class Mesh:
    ids: list[str]  # ids[n] is record n
    source: RunningProvider
    good: RunningProvider
    bad: RunningProvider
    duplicating: str
    failing: str
    unreachable: str


def generated_id(n: int) -> str:
    return parse_record(generate_record(n, centre="xx")).identifier


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
