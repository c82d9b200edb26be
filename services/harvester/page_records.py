"""What one harvested page brings: records to store, records to quarantine, deletions.

:func:`read_page` does all the per-record work of a page (parsing, checks, canonical hash,
serialization) and touches neither the network nor the database. Every lxml object it makes
stays inside it: what it returns is plain values. That work is most of a harvest's CPU, so
:class:`PageReaders` runs it in worker processes, where pages are read on every core while the
harvest's event loop receives the next page and writes the previous one; small pages, and every
page when no worker is configured, are read in a thread instead.

A page goes to its worker as a file in a spool folder in memory (``/dev/shm`` where there is
one), not through the pool's pipe. A pipe carries it in 64 KiB pieces, each a system call and a
wake-up on both sides: for a page of 500 records (about 4.7 MB) that cost, measured, about
17 ms of CPU against about 2 ms for writing and reading the file.

The workers' fork server imports this module, and so every worker has what it imports: nothing
here may import aiohttp, asyncpg or the settings (the client's exceptions are in
:mod:`wiscat.harvester.errors`, the rows written in :mod:`wiscat.shared.db.rows`). Measured, two
idle
workers and their server then hold 27 MB (proportional set size) instead of 45, and start in
0.11 s instead of 0.35.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing import resource_tracker
from typing import Any, TypeVar

from lxml import etree

from wiscat.harvester.errors import BadResponse
from wiscat.shared.db.rows import IncomingRecord
from wiscat.shared.iso19139 import RecordError, identifier_error, record_from_element
from wiscat.shared.oaipmh.errors import NoRecordsMatch
from wiscat.shared.oaipmh.pages import (
    HeaderItem,
    Item,
    PageReader,
    PageSummary,
    RecordItem,
    ResponseError,
    UnreadableItem,
)

log = logging.getLogger("wiscat.harvester.pages")


@dataclass
class Page:
    """One response of a list: iterate its items once, in order; then read its summary.

    noRecordsMatch is not a failure (§3.6: an empty list): the page then has no items and ends
    the list.
    """

    url: str  # the request's URL as shown in logs and reasons (wiscat.shared.urls.safe_url)
    bytes: int
    reader: PageReader
    consumed: bool = False
    # the verb asked: a page that answers another (ListIdentifiers' headers to a ListRecords
    # request) fails, before any of its items is taken for what was asked
    verb: str | None = None

    def items(self) -> Iterator[Item]:
        if self.consumed:
            return
        self.consumed = True
        try:
            for item in self.reader.items():
                self._check_verb(self.reader.summary)
                yield item
        except NoRecordsMatch:
            self.reader.summary.errors.clear()
            self.reader.summary.resumption_token = None
        except ResponseError as exc:
            raise BadResponse(f"{exc} (from {self.url})") from exc
        self._check_verb(self.reader.summary)

    @property
    def summary(self) -> PageSummary:
        return self.reader.summary

    def adopt(self, summary: PageSummary, items_seen: int) -> None:
        """Take the outcome of reading this page elsewhere (a worker process read a copy)."""
        self._check_verb(summary)
        self.consumed = True
        self.reader.summary = summary
        self.reader.items_seen = items_seen

    def _check_verb(self, summary: PageSummary) -> None:
        # None: an error, or noRecordsMatch, read as such
        if self.verb is not None and summary.verb not in (None, self.verb):
            raise answered_otherwise(self.verb, self.url, summary.verb)


def answered_otherwise(asked: str, url: str, answered: str | None) -> BadResponse:
    """The failure of a request for verb ``asked`` that ``url`` answered with another verb's
    element (``answered``)."""
    return BadResponse(f"a {asked} request to {url} was answered with {answered!r}")


def _raw(element: Any) -> bytes:
    if element is None:
        return b""
    return bytes(etree.tostring(element))


@dataclass
class PageSorter:
    """Turns a page's items into records to store and records to quarantine."""

    batch: list[IncomingRecord] = field(default_factory=list)
    quarantined: list[tuple[str | None, str, bytes]] = field(default_factory=list)

    def take(self, header: HeaderItem, metadata: Any) -> None:
        # Called while the payload element is alive (the page parser frees it afterwards).
        if metadata is None:
            self.quarantined.append((header.identifier, "record without metadata", b""))
            return
        try:
            record = record_from_element(metadata, safe_parsed=True)
        except RecordError as exc:
            self.quarantined.append((header.identifier, str(exc), _raw(metadata)))
            return
        if record.identifier != header.identifier:
            # WIS guidelines: the OAI identifier MUST equal gmd:fileIdentifier.
            self.quarantined.append(
                (
                    header.identifier,
                    f"gmd:fileIdentifier {record.identifier!r} differs from the OAI identifier",
                    _raw(metadata),
                )
            )
            return
        self.batch.append(
            IncomingRecord(record.identifier, record.md_datestamp, record.content_hash, record.xml)
        )

    def set_aside(self, item: UnreadableItem) -> None:
        """Quarantine an item whose header cannot be read: neither stored nor deleted, and its
        datestamp, if any, is no date to go by."""
        self.quarantined.append((item.identifier, item.reason, item.raw))


@dataclass
class PageContent:
    """What one page brings: records sorted, deleted identifiers, headers whose records are
    still to get (ListIdentifiers + GetRecord), and the page's greatest datestamp."""

    sorter: PageSorter = field(default_factory=PageSorter)
    deletions: list[str] = field(default_factory=list)
    wanted: list[HeaderItem] = field(default_factory=list)
    greatest: datetime | None = None


def read_page(page: Page) -> PageContent:
    """Read every item of ``page`` (once) and sort it; the page's errors propagate.

    An identifier the page lists more than once is taken at its newest header datestamp, the
    last of those on a tie (invariant 4: the last event wins): its other items are
    neither stored nor deleted nor asked for. Items set aside (quarantined) are no event.
    """
    content = PageContent()
    newest: dict[str, tuple[datetime, int]] = {}  # identifier -> its winning item's (stamp, n)
    taken: list[int] = []  # the item number of each record of content.sorter.batch
    deleted: list[int] = []  # likewise, of content.deletions
    wanted: list[int] = []  # likewise, of content.wanted
    for number, item in enumerate(page.items()):
        if isinstance(item, UnreadableItem):
            content.sorter.set_aside(item)
            continue
        header = item.header if isinstance(item, RecordItem) else item
        stamp = header.datestamp_parsed
        if content.greatest is None or stamp > content.greatest:
            content.greatest = stamp
        if isinstance(item, RecordItem) and not header.deleted:
            held = len(content.sorter.batch)
            content.sorter.take(header, item.metadata)
            if len(content.sorter.batch) == held:
                continue  # quarantined
            taken.append(number)
        elif (problem := identifier_error(header.identifier)) is not None:
            # a header alone: no record can have this identifier (iso19139.file_identifier),
            # nor can a tombstone, so it is neither a deletion nor a record to get
            reason = f"a header whose identifier {problem}"
            content.sorter.quarantined.append((header.identifier, reason, b""))
            continue
        elif header.deleted:
            content.deletions.append(header.identifier)
            deleted.append(number)
        else:
            content.wanted.append(header)
            wanted.append(number)
        if header.identifier not in newest or stamp >= newest[header.identifier][0]:
            newest[header.identifier] = (stamp, number)
    if len(newest) < len(taken) + len(deleted) + len(wanted):  # an identifier came twice
        content.sorter.batch = _winners(content.sorter.batch, taken, newest)
        content.deletions = _winners(content.deletions, deleted, newest)
        content.wanted = _winners(content.wanted, wanted, newest)
    return content


_Item = TypeVar("_Item", IncomingRecord, HeaderItem, str)


def _winners(
    items: list[_Item], numbers: list[int], newest: dict[str, tuple[datetime, int]]
) -> list[_Item]:
    """The ``items`` (numbered ``numbers`` in their page) that are their identifier's newest."""
    return [
        item
        for item, number in zip(items, numbers, strict=True)
        if newest[_identifier(item)][1] == number
    ]


def _identifier(item: IncomingRecord | HeaderItem | str) -> str:
    return item if isinstance(item, str) else item.identifier


def read_copy(url: str, body: bytes) -> tuple[PageContent, PageSummary, int]:
    """:func:`read_page` in a worker process: the page's content, its summary and its item count
    (for :meth:`Page.adopt`)."""
    page = Page(url, len(body), PageReader(body))
    content = read_page(page)
    return content, page.summary, page.reader.items_seen


Reader = Callable[[str, bytes], tuple[PageContent, PageSummary, int]]


def read_spooled(reader: Reader, url: str, path: str) -> tuple[PageContent, PageSummary, int]:
    """What a worker runs for a page the harvester spooled to ``path``: ``reader`` on its bytes."""
    with open(path, "rb") as file:
        body = file.read()
    return reader(url, body)


def _watch(harvester: int, spool: str) -> None:
    """Worker initializer: end this worker when the harvester process that started it is gone
    (killed with SIGKILL, it cannot stop its workers itself; they would wait forever), and take
    the spool folder with it, whose files would otherwise hold memory until the next boot.

    Ctrl-C and a closed terminal signal the whole process group: SIGINT and SIGHUP are the
    harvester's to act on, which stops its workers in order; a worker that took SIGINT as its own
    died mid-page with a KeyboardInterrupt traceback. (SIGTERM is left as it is: the pool ends a
    worker of a broken pool with it.)"""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(harvester, 0)
            except (ProcessLookupError, PermissionError):  # gone (its pid free, or reused)
                shutil.rmtree(spool, ignore_errors=True)
                os._exit(0)

    threading.Thread(target=watch, name="harvester-watch", daemon=True).start()


def spool_prefix(harvester: int) -> str:
    """How the names of the spool folders of harvester process ``harvester`` begin."""
    return f"wiscat-pages-{harvester}-"


def spool_root() -> str:
    """Where spool folders go: ``/dev/shm`` (memory) where it is usable, else the temp folder.

    Shared, like any temp folder; a spool folder in it has a random name, cannot be guessed
    beforehand, is made only if no such name exists, and only this user can read or write it.
    """
    shm = "/dev/shm"  # noqa: S108 (private folders with random names, see above)
    usable = os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK)
    return shm if usable else tempfile.gettempdir()


class _BrokenBeforeSent(BrokenProcessPool):
    """The pool broke while idle (a worker died between pages): the page never reached it."""


# Below this size a page is read in a thread: sending it to a worker and its records back would
# cost more than it saves (an empty or one-record page, a quiet incremental run).
WORKER_MIN_BYTES = 256 * 1024


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, from the main thread, ignoring SIGHUP as it
    ignores SIGINT and SIGTERM itself. Started later by the pool, it took a closed terminal's
    SIGHUP (it is in this process's group) and died; the harvester, stopping in order, had it
    started again, and the new one knew none of the pool's semaphores (a traceback each)."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # inherited by the tracker
    try:
        resource_tracker.ensure_running()
    finally:
        if previous is not None:
            signal.signal(signal.SIGHUP, previous)


class PageReaders:
    """Where a harvester process reads its pages: ``workers`` processes shared by all its runs,
    or a thread when ``workers`` is 0.

    The workers start on the first page big enough to need them. Starting them takes about a
    second (a fork server that imports this module, then the forks): it runs in a thread, so
    that the event loop, and every other run, go on meanwhile; the runs that have a page for
    them wait. (Reading those pages in a thread meanwhile saved that wait but raised the peak
    memory of a harvest by 12 to 30 MB, measured, for the whole life of the process.)

    A worker that dies (killed, out of memory) is replaced, and the page it held is read again
    once by fresh workers; a page that kills its reader twice fails its run with that reason,
    and other runs, and this process, carry on. Where this system cannot run worker processes
    at all, pages are read in a thread. ``reader`` is what a worker runs (:func:`read_copy`).
    """

    def __init__(
        self,
        workers: int,
        *,
        min_bytes: int = WORKER_MIN_BYTES,
        reader: Reader = read_copy,
    ) -> None:
        self.workers = workers
        self.min_bytes = min_bytes
        self.reader = reader
        if workers:
            _start_resource_tracker()
        self._executor: ProcessPoolExecutor | None = None
        self._warming: asyncio.Task[None] | None = None
        self._spool: str | None = None
        self._closed = False
        # the spool folder is made in the thread that starts the workers, and removed by close()
        self._guard = threading.Lock()

    @property
    def ahead(self) -> int:
        """How many pages a list should fetch and read ahead: one per worker, and one more
        being fetched."""
        return max(1, self.workers) + 1

    async def read(self, page: Page) -> PageContent:
        if self.workers == 0 or len(page.reader.body) < self.min_bytes:
            return await asyncio.to_thread(read_page, page)
        died = False
        while True:
            await self.warm()
            executor = self._executor
            if executor is None:  # no worker processes could start
                return await asyncio.to_thread(read_page, page)
            try:
                return await self._in_worker(executor, page)
            except _BrokenBeforeSent:
                self._discard(executor)  # fresh workers, and this page goes to them
            except BrokenProcessPool as exc:
                self._discard(executor)
                if died:
                    log.error("a page from %s killed its reader process twice", page.url)
                    raise BadResponse(
                        f"the process reading a page from {page.url} died, twice (out of "
                        "memory, or a crash in the XML parser)"
                    ) from exc
                died = True
                log.warning("a page reader process died; the page from %s is read again", page.url)

    async def warm(self) -> None:
        """Start the worker processes, off the event loop, and wait until they are up; at once
        when they are up already, or when there are none to start."""
        if self._executor is not None or self.workers == 0 or self._closed:
            return
        if self._warming is None:
            self._warming = asyncio.get_running_loop().create_task(self._warm())
        # shielded: a run cancelled while waiting must not cancel the start others wait for
        await asyncio.shield(self._warming)

    async def _warm(self) -> None:
        try:
            executor = await asyncio.to_thread(self._new_pool)
        except OSError as exc:  # no process support here (no /dev/shm, seccomp, ...)
            log.warning("no page worker processes (%s): pages are read in a thread", exc)
            self.workers = 0
            return
        except BrokenProcessPool as exc:  # a worker died as it started (out of memory?)
            log.warning("page workers did not start (%s): pages are read in a thread", exc)
            return  # the next page big enough tries again
        finally:
            self._warming = None
        if self._closed:  # closed since they started: close() could not stop them
            executor.shutdown(wait=False, cancel_futures=True)
        else:
            self._executor = executor

    def _new_pool(self) -> ProcessPoolExecutor:
        """A pool with all its workers running (in a thread: this blocks about a second)."""
        # forkserver: each worker is forked from a small server process that has imported this
        # module once, never from this (threaded, connected) process
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        # Named after this process, so that an operator can tell whose it is, and unguessable
        # (as mkdtemp makes them). Made once the workers run, whose watch removes it if this
        # process is killed: made before, it would outlive a kill during their start.
        spool = self._spool or os.path.join(
            spool_root(), spool_prefix(os.getpid()) + secrets.token_hex(8)
        )
        executor = ProcessPoolExecutor(
            self.workers,
            mp_context=context,
            initializer=_watch,
            initargs=(os.getpid(), spool),
        )
        try:
            # a worker is forked for each task that finds none idle: one task each
            for ready in [executor.submit(os.getpid) for _ in range(self.workers)]:
                ready.result()
            with self._guard:
                if self._closed:
                    # closed while they started: the event loop that would stop them may be
                    # gone already, and no spool folder must be left behind
                    executor.shutdown(wait=False, cancel_futures=True)
                    return executor
                if self._spool is None:
                    os.mkdir(spool, 0o700)
                    self._spool = spool
        except BaseException:
            executor.shutdown(wait=False, cancel_futures=True)
            raise
        return executor

    async def _in_worker(self, executor: ProcessPoolExecutor, page: Page) -> PageContent:
        path = await asyncio.to_thread(self._spool_page, page)
        try:
            try:
                future = self._submit(executor, page, path)
            except BrokenProcessPool as exc:
                raise _BrokenBeforeSent(str(exc)) from exc
            content, summary, items_seen = await asyncio.wrap_future(future)
        finally:
            if path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        page.adopt(summary, items_seen)
        return content

    def _submit(
        self, executor: ProcessPoolExecutor, page: Page, path: str | None
    ) -> Future[tuple[PageContent, PageSummary, int]]:
        if path is None:
            return executor.submit(self.reader, page.url, page.reader.body)
        return executor.submit(read_spooled, self.reader, page.url, path)

    def _spool_page(self, page: Page) -> str | None:
        """Write ``page`` to a new file in the spool folder; None (the page then goes through the
        pipe) when that fails, a full ``/dev/shm`` most likely."""
        if self._spool is None:
            return None
        path = None
        try:
            descriptor, path = tempfile.mkstemp(suffix=".xml", dir=self._spool)
            with os.fdopen(descriptor, "wb") as file:
                file.write(page.reader.body)
        except OSError as exc:
            log.warning("cannot spool a page for a worker (%s): it goes through the pipe", exc)
            if path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            return None
        return path

    def _discard(self, executor: ProcessPoolExecutor) -> None:
        # (other reads on the same broken pool may have replaced it already)
        if self._executor is executor:
            self._executor = None
            executor.shutdown(wait=False, cancel_futures=True)

    @property
    def spool(self) -> str | None:
        """The folder pages are spooled to for the workers, once they started (tests)."""
        return self._spool

    def worker_pids(self) -> list[int]:
        """The worker processes' ids (monitoring, tests)."""
        if self._executor is None:
            return []
        processes = getattr(self._executor, "_processes", None) or {}
        return [process.pid for process in processes.values() if process.pid is not None]

    def close(self) -> None:
        with self._guard:
            self._closed = True
            spool, self._spool = self._spool, None
        if self._executor is not None:
            with contextlib.suppress(Exception):
                self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if spool is not None:
            shutil.rmtree(spool, ignore_errors=True)
