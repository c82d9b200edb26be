"""Where a harvester process reads its pages: worker processes shared by all its runs, or a
thread (:class:`PageReaders`).

Pages are read on every core while the harvest's event loop receives the next page and writes
the previous one; small pages, and every page when no worker is configured, are read in a thread
instead. What a worker does to a page is :mod:`wiscat.harvester.page_content`'s, pure.

A page goes to its worker as a file in a spool folder in memory (``/dev/shm`` where there is
one), not through the pool's pipe. A pipe carries it in 64 KiB pieces, each a system call and a
wake-up on both sides: several times the CPU of writing and reading the file
(docs/benchmarks.md, "Measurements behind the code").

The workers' fork server preloads this module: like the page content's, what it imports stays
clear of aiohttp, asyncpg and the settings.
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
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import resource_tracker

from wiscat.harvester.errors import BadResponse
from wiscat.harvester.page_content import (
    Page,
    PageContent,
    Reader,
    read_copy,
    read_page,
    read_spooled,
)
from wiscat.shared.oaipmh.pages import (
    PageSummary,
)

log = logging.getLogger("wiscat.harvester.pages")


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


def _read_here(page: Page, spooled: str | None) -> PageContent:
    """Read ``page`` in this process, from its spool file if it has one (its body is there)."""
    if spooled is None:
        return read_page(page)
    content, summary, items_seen = read_spooled(read_copy, page.url, spooled)
    page.adopt(summary, items_seen)
    return content


class PageReaders:
    """Where a harvester process reads its pages: ``workers`` processes shared by all its runs,
    or a thread when ``workers`` is 0.

    The workers start on the first page big enough to need them. Starting them takes about a
    second (a fork server that imports this module, then the forks): it runs in a thread, so
    that the event loop, and every other run, go on meanwhile; the runs that have a page for
    them wait. (Reading those pages in a thread meanwhile saved that wait but raised the peak
    memory of a harvest for the whole life of the process: docs/benchmarks.md.)

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
        if self.workers == 0 or page.bytes < self.min_bytes:
            return await asyncio.to_thread(read_page, page)
        await self.warm()
        # written once, kept until the page is read (read again, if its reader died)
        spooled = await asyncio.to_thread(self._spool_page, page)
        try:
            return await self._in_workers(page, spooled)
        finally:
            if spooled is not None:
                with contextlib.suppress(OSError):
                    os.unlink(spooled)

    async def _in_workers(self, page: Page, spooled: str | None) -> PageContent:
        died = False
        while True:
            await self.warm()
            executor = self._executor
            if executor is None:  # no worker processes could start
                return await asyncio.to_thread(_read_here, page, spooled)
            try:
                return await self._in_worker(executor, page, spooled)
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

    async def _in_worker(
        self, executor: ProcessPoolExecutor, page: Page, path: str | None
    ) -> PageContent:
        try:
            future = self._submit(executor, page, path)
        except BrokenProcessPool as exc:
            raise _BrokenBeforeSent(str(exc)) from exc
        content, summary, items_seen = await asyncio.wrap_future(future)
        page.adopt(summary, items_seen)
        return content

    def _submit(
        self, executor: ProcessPoolExecutor, page: Page, path: str | None
    ) -> Future[tuple[PageContent, PageSummary, int]]:
        if path is None:
            return executor.submit(self.reader, page.url, page.reader.body)
        return executor.submit(read_spooled, self.reader, page.url, path)

    def _spool_page(self, page: Page) -> str | None:
        """Write ``page`` to a new file in the spool folder, and let go of its body (a page is
        megabytes, and a harvest holds several while they are read); None (the page then goes
        through the pipe) when that fails, a full ``/dev/shm`` most likely."""
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
        page.reader.body = b""
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
