"""What the load and soak tests (RELIABILITY L01-L05) share: their sizes, a large catalogue
made in seconds, clients that walk a list as a harvester does, and what a process holds, read
from /proc and pg_stat_activity.

The sizes come from the environment, so that ``make test`` runs short versions and ``make soak``
the catalogue's sizes, each bounded in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from bench.measure import descendants, spooled_mb, tree_memory_mb
from tests.support import factories
from tests.support.proc import status_kib
from wiscat.shared.db.pool import Pool
from wiscat.shared.db.queries import load as load_queries
from wiscat.shared.oaipmh.pages import announced_token

#: Records of the catalogue that L01, L03 and L04 page through (``make soak``: 100,000).
RECORDS = "WISCAT_LOAD_RECORDS"
#: Records of the catalogue that L03's harvesters harvest (``make soak``: 100,000).
HARVEST_RECORDS = "WISCAT_LOAD_HARVEST_RECORDS"
#: Seconds of L03's concurrent harvests (``make soak``: 600, the catalogue's 10 minutes).
LOAD_SECONDS = "WISCAT_LOAD_SECONDS"
#: Seconds of L05's repeated incremental harvests (``make soak``: 600).
SOAK_SECONDS = "WISCAT_SOAK_SECONDS"

#: The catalogue's sizes: at these, L01's ratio is held to the catalogue's bound (2), not to
#: the tolerant bound of the short version.
FULL_RECORDS = 100_000


def records() -> int:
    return int(os.environ.get(RECORDS, "10000"))


def harvest_records() -> int:
    return int(os.environ.get(HARVEST_RECORDS, "1000"))


def load_seconds() -> float:
    return float(os.environ.get(LOAD_SECONDS, "10"))


def soak_seconds() -> float:
    return float(os.environ.get(SOAK_SECONDS, "10"))


# Copies of the generated records already in a set, made by PostgreSQL: copy c of a record is
# the record with "-c" after its identifier, in its header and in its document (the identifier
# is followed by "<" only where it is an element's text). The triggers stamp the rows as any
# write; the documents are known well-formed, so the mend check is skipped.
_COPIES = """
with copied as (
    insert into records (identifier, md_datestamp, content_hash, xml, deleted, set_specs, source)
    select copy.identifier, r.md_datestamp,
        sha256(convert_to(copy.xml, 'UTF8')), copy.xml, false, r.set_specs, r.source
    from records r
    cross join generate_series($1::int, $2::int) as c
    cross join lateral (
        select r.identifier || '-' || c as identifier,
            replace(r.xml, r.identifier || '<', r.identifier || '-' || c || '<') as xml
    ) as copy
    where r.identifier = any($3::text[])
    returning identifier
)
insert into set_members (set_spec, identifier)
select $4, identifier from copied
"""


async def fill(pool: Pool, set_spec: str, total: int, *, base: int = 500) -> list[str]:
    """``total`` records in ``set_spec``: ``base`` generated ones (``factories.load_records``,
    the way ``make bench`` loads its catalogue), then copies of them made by one statement per
    10 copies, vacuumed as a catalogue served for a while is. Returns the first ``base``
    identifiers. Generating and parsing a record costs milliseconds in Python; a copy costs
    PostgreSQL microseconds, so 100,000 records take seconds, not minutes."""
    if total % base:
        raise ValueError(f"{total} records are not a whole number of copies of {base}")
    originals = await factories.load_records(pool, set_spec, range(min(base, total)))
    copies = total // base - 1
    for first in range(1, copies + 1, 10):
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("select set_config('wiscat.xml_checked', 'on', true)")
            await conn.execute(_COPIES, first, min(first + 9, copies), originals, set_spec)
    await pool.execute("vacuum (analyze) records, set_members")
    return originals


def p(latencies: list[float], share: float) -> float:
    """The ``share`` quantile of ``latencies`` (nearest rank, so p95 of ten is the largest)."""
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


@dataclass
class Traffic:
    """What the clients of a load test saw."""

    pages: list[float] = field(default_factory=list)  # latency of every list page answered
    get_records: list[float] = field(default_factory=list)  # of every GetRecord answered
    harvests: list[int] = field(default_factory=list)  # records of every list walked to its end
    honoured: int = 0  # 503s with a Retry-After that the client waited out
    errors: list[str] = field(default_factory=list)


async def _answer(
    session: aiohttp.ClientSession,
    url: str,
    params: dict[str, str],
    traffic: Traffic,
    latencies: list[float],
) -> bytes | None:
    """One request, asked again after each 503 with a Retry-After (waited out, as OAI-PMH 2.0
    §3.1.2.2 asks of a harvester); the body of a 200 without an OAI-PMH error, else None with
    the reason in ``traffic.errors``."""
    while True:
        started = time.monotonic()
        async with session.get(url, params=params) as response:
            body = await response.read()
            status, retry_after = response.status, response.headers.get("Retry-After", "")
        if status == 503 and retry_after.isdigit() and 1 <= int(retry_after) <= 300:
            traffic.honoured += 1
            await asyncio.sleep(int(retry_after))
            continue
        if status != 200 or b"<error " in body:
            traffic.errors.append(f"{params}: HTTP {status} {body[:300]!r}")
            return None
        latencies.append(time.monotonic() - started)
        return body


async def harvest_until(
    session: aiohttp.ClientSession, oai: str, deadline: float, traffic: Traffic
) -> None:
    """Full ListRecords harvests, one after the other, until ``deadline`` (time.monotonic): each
    page read whole, its records counted and its resumptionToken followed. A list still being
    walked at the deadline is left there, as a harvester that stops does."""
    while time.monotonic() < deadline:
        params = {"verb": "ListRecords", "metadataPrefix": "iso19139"}
        seen = 0
        while time.monotonic() < deadline:
            body = await _answer(session, oai, params, traffic, traffic.pages)
            if body is None:
                return
            seen += body.count(b"<record>")
            token = announced_token(body)
            if not token:
                traffic.harvests.append(seen)
                break
            params = {"verb": "ListRecords", "resumptionToken": token}


async def get_records_until(
    session: aiohttp.ClientSession,
    oai: str,
    identifiers: list[str],
    per_second: float,
    deadline: float,
    traffic: Traffic,
) -> None:
    """GetRecord of ``identifiers`` in turn at ``per_second`` until ``deadline``, each request
    started on time whether or not the ones before it were answered."""

    async def one(identifier: str) -> None:
        params = {"verb": "GetRecord", "metadataPrefix": "iso19139", "identifier": identifier}
        body = await _answer(session, oai, params, traffic, traffic.get_records)
        if body is not None and f"<identifier>{identifier}</identifier>".encode() not in body:
            traffic.errors.append(f"GetRecord {identifier}: {body[:300]!r}")

    asked: set[asyncio.Task[None]] = set()
    start, n = time.monotonic(), 0
    while (due := start + n / per_second) < deadline:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        task = asyncio.create_task(one(identifiers[n % len(identifiers)]))
        asked.add(task)
        task.add_done_callback(asked.discard)
        n += 1
    await asyncio.gather(*asked)


def resident_mib(pid: int) -> float:
    """The resident memory (VmRSS) of process ``pid``, in MiB."""
    return status_kib(pid, "VmRSS") / 1024


def tree_mib(pid: int) -> float:
    """The memory of process ``pid`` and every process under it (a harvester's page workers),
    proportional set sizes added up, with the pages waiting in its spool (``make bench``'s
    measure: ``bench.measure.timed_command``)."""
    return tree_memory_mb([pid, *descendants(pid)]) + spooled_mb(pid)


def own_mib(pid: int) -> float:
    """The memory of process ``pid`` alone, as its proportional set size, in MiB."""
    return tree_memory_mb([pid])


def open_fds(pid: int) -> int:
    """Open file descriptors of process ``pid`` and every process under it."""
    total = 0
    for member in [pid, *descendants(pid)]:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += len(os.listdir(f"/proc/{member}/fd"))
    return total


#: The application_name of the tests' own sessions, which :func:`connections` leaves out.
TEST_SESSION = "wiscat-load-test"


def test_session_url(database_url: str) -> str:
    """``database_url`` for the test's own sessions: asyncpg sends a query parameter it does not
    know as a server setting, here ``application_name``."""
    parts = urlsplit(database_url)
    query = "&".join(q for q in (parts.query, f"application_name={TEST_SESSION}") if q)
    return urlunsplit(parts._replace(query=query))


async def connections(pool: Pool, database_url: str) -> int:
    """Client sessions open on the database of ``database_url``, the tests' own left out."""
    count = await pool.fetchval(
        "select count(*) from pg_stat_activity where datname = $1"
        " and backend_type = 'client backend' and application_name <> $2",
        urlsplit(database_url).path.lstrip("/"),
        TEST_SESSION,
    )
    return int(count)


# L01: what the provider's list queries cost at a page, told by PostgreSQL itself
RECORDS_SQL = load_queries("records.sql")
_EARLIEST = datetime(1, 1, 1, tzinfo=UTC)
_LATEST = datetime(9999, 12, 31, tzinfo=UTC)


@dataclass
class PageWork:
    """A page's query as EXPLAIN (ANALYZE, BUFFERS) measured it: the rows its plan's nodes
    produced, summed (an index scan's are the index entries it read, a count's subquery's
    included), and the shared buffers it touched (hit or read)."""

    rows: int
    buffers: int


def _rows(node: dict[str, object]) -> int:
    own = int(node["Actual Rows"]) * int(node["Actual Loops"])  # type: ignore[call-overload]
    return own + sum(_rows(child) for child in node.get("Plans", []))  # type: ignore[attr-defined]


async def _explain(pool: Pool, query: str, *args: object) -> PageWork:
    text = await pool.fetchval("explain (analyze, buffers, format json) " + query, *args)
    top = json.loads(text)[0]["Plan"]
    return PageWork(_rows(top), top["Shared Hit Blocks"] + top["Shared Read Blocks"])


async def page_work(pool: Pool, page: int, size: int) -> tuple[PageWork, PageWork]:
    """The work of the whole catalogue's list at page ``page`` (from 0) of ``size`` records:
    its keys (list_keys_all) and its records (list_all), as the provider asks for them."""
    keys = await pool.fetch(
        "select datestamp, identifier from records order by datestamp, identifier "
        "offset $1 limit $2",
        max(page * size - 1, 0),
        size + 1,
    )
    after = (keys[0]["datestamp"], keys[0]["identifier"]) if page else (_EARLIEST, "")
    through = keys[-1]["datestamp"], keys[-1]["identifier"]
    scope = (_EARLIEST, _LATEST, datetime.now(UTC))
    return (
        await _explain(pool, RECORDS_SQL["list_keys_all"], *after, *scope, size),
        await _explain(pool, RECORDS_SQL["list_all"], *after, *scope, True, size, *through),
    )
