"""The consistency checker (docs/checks.md): a set compared from ListIdentifiers alone.

The authoritative source and every peer are listed at once (ListIdentifiers: identifier,
datestamp, status). Each list is spilled to disk in sorted runs as it arrives, and the runs are
merged back in identifier order, so comparing a set of a million identifiers needs memory for one
run per list, not for the lists. Each peer is then compared with the source in one merge pass:

==================  ===========================================================================
missing             live at the source; absent at the peer, or deleted there
extra               live at the peer; absent or deleted at the source (a missed deletion)
outdated            the peer's datestamp is older than the source's (a missed update)
copied_datestamp    the peer's datestamp equals the source's (it is not stamping arrival time)
duplicates          an identifier the peer's list holds more than once
altered             (``--sample``) the peer's copy is not older, yet its content differs: the
                    peer changed the record
datestamp_only      (``--sample``) "outdated" by datestamp, but the content is identical: the
                    source bumped its datestamp without a change
==================  ===========================================================================

A peer that cannot be listed (HTTP or OAI-PMH errors, connection failures, timeouts) is "could not
check" with the reason; it never stops the others. When one side gives day granularity only, two
datestamps of the same day are taken as in step (neither outdated nor copied).

A source that lists no identifier at all is asked for its ListSets: a set it does not have (a
mistyped name, say) makes the check "could not check", where the empty list would otherwise find
every peer consistent.

The table and the JSON report are written by :mod:`wiscat.harvester.check_output`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import io
import json
import logging
import marshal
import random
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from wiscat.harvester.client import OAIClient
from wiscat.harvester.errors import BadResponse, HarvestError, reason_of
from wiscat.shared.iso19139 import canonical_hash
from wiscat.shared.oaipmh.dates import format_datestamp
from wiscat.shared.oaipmh.errors import IdDoesNotExist, NoSetHierarchy, OAIError
from wiscat.shared.oaipmh.pages import HeaderItem, ResponseError, UnreadableItem
from wiscat.shared.urls import safe_url

log = logging.getLogger("wiscat.check")

DATESTAMP_CATEGORIES = ("missing", "extra", "outdated", "copied_datestamp", "duplicates")
SAMPLE_CATEGORIES = ("altered", "datestamp_only")
CATEGORIES = DATESTAMP_CATEGORIES + SAMPLE_CATEGORIES

# An entry of a list: (identifier, datestamp, deleted). Datestamps are kept as the peer wrote them,
# which the page parser has checked is "YYYY-MM-DDThh:mm:ssZ" or "YYYY-MM-DD": strings that
# compare as the moments they stand for.
Entry = tuple[str, str, bool]

RUN_SIZE = 50_000  # entries sorted in memory per run, per list
BLOCK = 1_000  # entries per marshal block in a run file (what a merge holds per run)
MAX_SET_PAGES = 100  # ListSets pages read to find the checked set (a guard against endless lists)


def compare_datestamps(peer: str, source: str) -> int:
    """-1, 0 or 1 as the peer's datestamp is older, equal or newer; at day level when either is
    a day, where the same day counts as newer (in step): it cannot be told apart."""
    if len(peer) == 10 or len(source) == 10:
        peer, source = peer[:10], source[:10]
        return -1 if peer < source else 1
    return (peer > source) - (peer < source)


class SortedSpill:
    """Entries added in any order, read back sorted by identifier; memory for one run only."""

    def __init__(self, directory: Path, name: str, run_size: int = RUN_SIZE) -> None:
        self.directory = directory
        self.name = name
        self.run_size = run_size
        self.buffer: list[Entry] = []
        self.runs: list[Path] = []
        self.count = 0

    def add(self, entry: Entry) -> None:
        self.buffer.append(entry)
        self.count += 1
        if len(self.buffer) >= self.run_size:
            self._flush()

    def _flush(self) -> None:
        if not self.buffer:
            return
        self.buffer.sort()
        path = self.directory / f"{self.name}-{len(self.runs)}.run"
        with path.open("wb") as out:
            for start in range(0, len(self.buffer), BLOCK):
                block = marshal.dumps(self.buffer[start : start + BLOCK])
                out.write(len(block).to_bytes(4, "little") + block)
        self.runs.append(path)
        self.buffer = []

    def close(self) -> None:
        """No more entries: the rest goes to disk too, so the spill can be read many times."""
        self._flush()

    def sorted(self) -> Iterator[Entry]:
        """Every entry, by identifier (then datestamp); read as often as needed."""
        return heapq.merge(*(_read_run(path) for path in self.runs))


def _read_run(path: Path) -> Iterator[Entry]:
    # length-prefixed blocks: marshal.load() on a file reads it in tiny pieces, loads() does not
    with path.open("rb") as stream:
        while size := stream.read(4):
            yield from marshal.loads(stream.read(int.from_bytes(size, "little")))  # noqa: S302 - our own temporary file


def collapse(entries: Iterable[Entry], duplicates: list[str]) -> Iterator[Entry]:
    """One entry per identifier (the newest datestamp wins); repeated identifiers go to
    ``duplicates``, once each."""
    previous: Entry | None = None
    repeated = False
    for entry in entries:
        if previous is not None and entry[0] == previous[0]:
            if not repeated:
                duplicates.append(entry[0])
                repeated = True
            previous = entry  # sorted by datestamp after identifier: the later one is newer
            continue
        if previous is not None:
            yield previous
        previous, repeated = entry, False
    if previous is not None:
        yield previous


class Findings:
    """One category at one peer: an exact count, the first items in memory, every item on disk."""

    def __init__(self, spool: IO[str], keep: int) -> None:
        self.count = 0
        self.head: list[dict[str, Any]] = []
        self.keep = keep
        self.spool = spool

    def add(self, item: dict[str, Any]) -> None:
        self.count += 1
        if len(self.head) < self.keep:
            self.head.append(item)
        self.spool.write(json.dumps(item) + "\n")

    def items(self) -> Iterator[dict[str, Any]]:
        self.spool.flush()
        self.spool.seek(0)
        for line in self.spool:
            yield json.loads(line)
        self.spool.seek(0, io.SEEK_END)


@dataclass
class ListResult:
    url: str
    status: str = "ok"  # or "failed"
    reason: str | None = None
    identifiers: int = 0
    live: int = 0
    deleted: int = 0
    pages: int = 0
    duplicates: list[str] = field(default_factory=list)


@dataclass
class PeerResult:
    listing: ListResult
    url: str  # as given (credentials and all); listing.url is the one to show
    findings: dict[str, Findings] = field(default_factory=dict)
    sampled: int = 0

    @property
    def checked(self) -> bool:
        return self.listing.status == "ok"

    @property
    def consistent(self) -> bool:
        return self.checked and not any(f.count for f in self.findings.values())

    def counts(self) -> dict[str, int]:
        return {name: found.count for name, found in self.findings.items()}


@dataclass
class CheckReport:
    set_spec: str
    metadata_prefix: str
    source: ListResult
    peers: list[PeerResult]
    sample: int
    started_at: datetime
    finished_at: datetime

    @property
    def outcome(self) -> str:
        """``consistent`` (exit 0), ``inconsistent`` (1) or ``unchecked`` (2: the source could
        not be listed, or not one peer could)."""
        if self.source.status != "ok" or not any(p.checked for p in self.peers):
            return "unchecked"
        if all(p.consistent for p in self.peers):
            return "consistent"
        return "inconsistent"

    @property
    def exit_code(self) -> int:
        return {"consistent": 0, "inconsistent": 1, "unchecked": 2}[self.outcome]

    def as_json(self, *, items: int | None = None) -> dict[str, Any]:
        """Everything (``items=None``) or at most ``items`` items per category and peer."""

        def listing(result: ListResult) -> dict[str, Any]:
            return {
                "url": result.url,
                "status": result.status,
                "reason": result.reason,
                "identifiers": result.identifiers,
                "live": result.live,
                "deleted": result.deleted,
                "pages": result.pages,
            }

        peers = []
        for peer in self.peers:
            entry = listing(peer.listing)
            entry["counts"] = peer.counts() if peer.checked else {}
            entry["items"] = {
                name: list(found.items()) if items is None else found.head[:items]
                for name, found in peer.findings.items()
            }
            entry["truncated"] = items is not None and any(
                found.count > items for found in peer.findings.values()
            )
            entry["sampled"] = peer.sampled
            peers.append(entry)
        source = listing(self.source)
        source["duplicates"] = self.source.duplicates
        return {
            "set": self.set_spec,
            "metadata_prefix": self.metadata_prefix,
            "outcome": self.outcome,
            "started_at": format_datestamp(self.started_at),
            "finished_at": format_datestamp(self.finished_at),
            "sample": self.sample,
            "source": source,
            "peers": peers,
        }


@dataclass(frozen=True)
class CheckRequest:
    set_spec: str
    source: str
    peers: tuple[str, ...]
    metadata_prefix: str = "iso19139"
    sample: int = 0
    keep: int = 1_000  # items per category kept in memory (and in a stored report)


class Checker:
    """Runs one check with an :class:`OAIClient`; temporary files live until :meth:`close`."""

    def __init__(self, client: OAIClient, request: CheckRequest) -> None:
        self.client = client
        self.request = request
        self.stack = contextlib.ExitStack()
        self.directory = Path(self.stack.enter_context(tempfile.TemporaryDirectory("-check")))
        # what the run has listed so far, each endpoint's spill; for progress lines
        self.listing: list[tuple[str, SortedSpill]] = []
        self.listed = False

    def progress(self) -> str:
        """How far the run is: the identifiers listed so far from each endpoint, or comparing."""
        listed = sum(spill.count for _, spill in self.listing)
        each = ", ".join(f"{safe_url(url)} {spill.count:,}" for url, spill in self.listing)
        doing = "comparing" if self.listed else "listing"
        return f"{doing}: {listed:,} identifiers listed ({each})"

    def close(self) -> None:
        self.stack.close()

    def __enter__(self) -> Checker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def run(self) -> CheckReport:
        request = self.request
        started = datetime.now(UTC)
        urls = (request.source, *request.peers)
        spills = [SortedSpill(self.directory, f"list{n}") for n in range(len(urls))]
        self.listing = list(zip(urls, spills, strict=True))
        listings = await asyncio.gather(*(self._list(url, spill) for url, spill in self.listing))
        self.listed = True
        listed = datetime.now(UTC)
        log.info(
            "listed %d identifiers from %d endpoints in %.1f s",
            sum(spill.count for spill in spills),
            len(urls),
            (listed - started).total_seconds(),
        )
        source, source_spill = listings[0], spills[0]
        if source.status == "ok" and not source.identifiers:
            await self._confirm_set(source)
        peers = [
            PeerResult(listing, url)
            for listing, url in zip(listings[1:], request.peers, strict=True)
        ]
        sample: dict[str, str] = {}
        if source.status == "ok":
            sample = self._scan_source(source, source_spill)
            verdicts = [
                self._compare(peer, source_spill, spill, sample)
                for peer, spill in zip(peers, spills[1:], strict=True)
                if peer.checked
            ]
            if sample:
                hashes = await self._hashes(request.source, sample)
                checked = [peer for peer in peers if peer.checked]
                await asyncio.gather(
                    *(
                        self._sample(peer, hashes, peer_verdicts)
                        for peer, peer_verdicts in zip(checked, verdicts, strict=True)
                    )
                )
        report = CheckReport(
            set_spec=request.set_spec,
            metadata_prefix=request.metadata_prefix,
            source=source,
            peers=peers,
            sample=len(sample),
            started_at=started,
            finished_at=datetime.now(UTC),
        )
        log.info(
            "check of %s against %d peer(s): %s",
            request.set_spec,
            len(peers),
            report.outcome,
        )
        return report

    async def _list(self, url: str, spill: SortedSpill) -> ListResult:
        result = ListResult(safe_url(url))
        try:
            async for page in self.client.list_pages(
                url,
                "ListIdentifiers",
                metadata_prefix=self.request.metadata_prefix,
                set_spec=self.request.set_spec,
            ):
                result.pages += 1
                for item in page.items():
                    if isinstance(item, UnreadableItem):
                        # not compared, but the list cannot be called complete without it
                        raise BadResponse(f"{item.reason} (from {safe_url(url)})")
                    header = item if isinstance(item, HeaderItem) else item.header
                    spill.add((header.identifier, header.datestamp, header.deleted))
        except (HarvestError, OAIError, ResponseError) as exc:
            result.status, result.reason = "failed", reason_of(exc)
        except Exception as exc:  # a peer must never stop the others
            log.exception("listing %s failed unexpectedly", safe_url(result.url))
            result.status, result.reason = "failed", f"{type(exc).__name__}: {exc}"
        spill.close()
        result.identifiers = spill.count
        if result.status == "failed":
            log.warning("could not check %s: %s", safe_url(result.url), result.reason)
        return result

    async def _confirm_set(self, source: ListResult) -> None:
        """The source listed nothing: it fails unless its ListSets names the set."""
        wanted = self.request.set_spec
        try:
            named = await self._names_set(self.request.source, wanted)
        except (HarvestError, OAIError, ResponseError) as exc:
            # cannot tell: the empty list stands, as the source gave it
            log.warning("ListSets of %s failed: %s", safe_url(source.url), reason_of(exc))
            return
        if named is False:
            source.status = "failed"
            source.reason = (
                f"the source has no set {wanted!r} (it lists no identifier in it, and its "
                "ListSets does not name it)"
            )
            log.warning("could not check %s: %s", safe_url(source.url), source.reason)

    async def _names_set(self, url: str, wanted: str) -> bool | None:
        """Whether the ListSets of ``url`` names ``wanted``; None if it did not end in time."""
        try:
            found, _ = await self.client.find_set(url, wanted, MAX_SET_PAGES)
        except NoSetHierarchy:
            return False
        return found

    def _scan_source(self, source: ListResult, spill: SortedSpill) -> dict[str, str]:
        """Count the source's live and deleted identifiers and draw the sample (a reservoir of
        live identifiers, so any list size costs the same memory)."""
        want = self.request.sample
        reservoir: list[tuple[str, str]] = []
        rng = random.Random()
        live = 0
        for identifier, datestamp, deleted in collapse(spill.sorted(), source.duplicates):
            if deleted:
                source.deleted += 1
                continue
            live += 1
            if len(reservoir) < want:
                reservoir.append((identifier, datestamp))
            elif want:
                slot = rng.randrange(live)
                if slot < want:
                    reservoir[slot] = (identifier, datestamp)
        source.live = live
        return dict(reservoir)

    def _findings(self, peer: PeerResult, categories: Iterable[str]) -> None:
        for name in categories:
            spool = self.stack.enter_context(
                tempfile.TemporaryFile("w+", encoding="utf-8", dir=self.directory)  # noqa: SIM115
            )
            peer.findings[name] = Findings(spool, self.request.keep)

    def _compare(
        self,
        peer: PeerResult,
        source_spill: SortedSpill,
        peer_spill: SortedSpill,
        sample: dict[str, str],
    ) -> dict[str, int]:
        """One merge pass over the source and the peer; returns the datestamp verdict (-1, 0, 1)
        of each sampled identifier the peer holds live."""
        self._findings(peer, DATESTAMP_CATEGORIES)
        found = peer.findings
        listing = peer.listing
        verdicts: dict[str, int] = {}
        ignored: list[str] = []
        source = collapse(source_spill.sorted(), ignored)
        theirs = _counted(collapse(peer_spill.sorted(), listing.duplicates), listing)
        mine = next(source, None)
        other = next(theirs, None)
        while mine is not None or other is not None:
            if other is None or (mine is not None and mine[0] < other[0]):
                assert mine is not None
                if not mine[2]:
                    found["missing"].add(_item(mine, None))
                mine = next(source, None)
                continue
            if mine is None or other[0] < mine[0]:
                if not other[2]:
                    found["extra"].add(_item(None, other))
                other = next(theirs, None)
                continue
            # the same identifier on both sides
            if mine[2]:
                if not other[2]:
                    found["extra"].add(_item(mine, other))
            elif other[2]:
                found["missing"].add(_item(mine, other))
            else:
                verdict = compare_datestamps(other[1], mine[1])
                if verdict < 0:
                    found["outdated"].add(_item(mine, other))
                elif verdict == 0:
                    found["copied_datestamp"].add(_item(mine, other))
                if mine[0] in sample:
                    verdicts[mine[0]] = verdict
            mine = next(source, None)
            other = next(theirs, None)
        for identifier in listing.duplicates:
            found["duplicates"].add({"identifier": identifier})
        return verdicts

    async def _hashes(self, url: str, identifiers: Iterable[str]) -> dict[str, bytes | None]:
        """Canonical content hashes by GetRecord, a few requests at a time; None where the
        record could not be had (absent, deleted, or the request failed: logged)."""
        limit = asyncio.Semaphore(4)
        prefix = self.request.metadata_prefix

        async def one(identifier: str) -> bytes | None:
            async with limit:
                try:
                    record = await self.client.get_record(url, identifier, prefix)
                except IdDoesNotExist:
                    return None
                except (HarvestError, OAIError, ResponseError) as exc:
                    log.warning(
                        "sample %s at %s not compared: %s",
                        identifier,
                        safe_url(url),
                        reason_of(exc),
                    )
                    return None
                if record.header.deleted or record.metadata is None:
                    return None
                return canonical_hash(record.metadata)

        wanted = list(identifiers)
        found = await asyncio.gather(*(one(identifier) for identifier in wanted))
        return dict(zip(wanted, found, strict=True))

    async def _sample(
        self, peer: PeerResult, source: dict[str, bytes | None], verdicts: dict[str, int]
    ) -> None:
        """Compare the peer's content with the source's for each sampled identifier the peer
        holds live: what datestamps alone cannot show."""
        self._findings(peer, SAMPLE_CATEGORIES)
        theirs = await self._hashes(peer.url, verdicts)
        for identifier, verdict in verdicts.items():
            mine, other = source.get(identifier), theirs[identifier]
            if mine is None or other is None:
                continue
            peer.sampled += 1
            if mine != other and verdict >= 0:
                peer.findings["altered"].add({"identifier": identifier})
            elif mine == other and verdict < 0:
                peer.findings["datestamp_only"].add({"identifier": identifier})


def _counted(entries: Iterator[Entry], listing: ListResult) -> Iterator[Entry]:
    for entry in entries:
        if entry[2]:
            listing.deleted += 1
        else:
            listing.live += 1
        yield entry


def _item(mine: Entry | None, other: Entry | None) -> dict[str, Any]:
    item: dict[str, Any] = {"identifier": (mine or other)[0]}  # type: ignore[index]
    if mine is not None:
        item["source_datestamp"] = mine[1]
        item["source_deleted"] = mine[2]
    if other is not None:
        item["peer_datestamp"] = other[1]
        item["peer_deleted"] = other[2]
    return item


async def run_check(client: OAIClient, request: CheckRequest) -> tuple[CheckReport, Checker]:
    """Run a check; the caller closes the returned :class:`Checker` once done with the report
    (its items are read from temporary files)."""
    checker = Checker(client, request)
    try:
        return await checker.run(), checker
    except BaseException:
        checker.close()
        raise
