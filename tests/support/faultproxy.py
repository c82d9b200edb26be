"""A fault-injecting TCP proxy for the tests (RELIABILITY.md's "small asyncio TCP proxy").

It listens on 127.0.0.1 (an ephemeral port) and forwards every connection to an upstream
host and port, or to a Unix socket (the embedded PostgreSQL listens on one only). Faults,
"toxics", act on one direction of the traffic: ``"upstream"`` (client to server) or
``"downstream"`` (server to client). A toxic can be set or removed at any moment, traffic
flowing: it acts on the connections already open as on new ones::

    async with FaultProxy("127.0.0.1", port) as proxy:
        client_connects_to(proxy.port)
        proxy.set(Latency("downstream", 0.2))
        proxy.set(Reset("upstream", match=b"COMMIT"))
        proxy.clear()

One toxic of each kind and direction at a time: setting one replaces the one it matches.
:class:`Down` stands for the whole proxy and has no direction. Per chunk read, a direction
applies its toxics in this order: freeze (hold), timeout (drop), reset, limit_data, latency,
then it writes through slicer and bandwidth. Counters: :attr:`FaultProxy.connections` (accepted),
:attr:`FaultProxy.active`, and :attr:`FaultProxy.forwarded`, bytes passed on per direction.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections import Counter
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, TypeVar
from urllib.parse import parse_qs, urlsplit

Direction = Literal["upstream", "downstream"]
DIRECTIONS: tuple[Direction, Direction] = ("upstream", "downstream")
CHUNK = 65536
T = TypeVar("T")


@dataclass(frozen=True)
class Latency:
    """Hold each chunk ``seconds``, plus up to ``jitter`` seconds more (uniform, never less)."""

    direction: Direction
    seconds: float
    jitter: float = 0.0


@dataclass(frozen=True)
class Bandwidth:
    """Pass on at most ``bytes_per_second``."""

    direction: Direction
    bytes_per_second: int


@dataclass(frozen=True)
class SlowClose:
    """Pass on an end of stream (the sender closed) ``seconds`` late."""

    direction: Direction
    seconds: float


@dataclass(frozen=True)
class Timeout:
    """Pass nothing on (the data is dropped), the connection kept open; with ``close_after``,
    close it that many seconds after the toxic began to act on it."""

    direction: Direction
    close_after: float | None = None


@dataclass(frozen=True)
class Reset:
    """Reset the connection as data comes: both its sockets closed with SO_LINGER 0, so that
    a TCP peer gets a RST, not a FIN (a Unix socket has no RST: it is just closed).

    Without ``match``: once more than ``after_bytes`` bytes have passed this way on the
    connection (the first ``after_bytes`` are passed on). With ``match``: at the first chunk
    holding those bytes, passed on first if ``deliver``; with ``armed_by`` too, only once the
    connection has carried ``armed_by`` this way (a statement's parameters, say, then its
    transaction's COMMIT). A match spanning two chunks is found, but the first chunk's part
    has gone already.
    """

    direction: Direction
    after_bytes: int = 0
    match: bytes | None = None
    deliver: bool = False
    armed_by: bytes | None = None


@dataclass(frozen=True)
class Slicer:
    """Write each chunk in pieces of ``size`` bytes, ``delay`` seconds apart."""

    direction: Direction
    size: int
    delay: float = 0.0


@dataclass(frozen=True)
class LimitData:
    """Close the connection once ``limit`` bytes have passed this way (those are passed on)."""

    direction: Direction
    limit: int


@dataclass(frozen=True)
class Freeze:
    """Hold every chunk until the toxic is removed (then pass them on, in order)."""

    direction: Direction


@dataclass(frozen=True)
class Down:
    """The proxy is down: cut every open connection, and refuse new ones (nothing listens on
    the port) or, with ``accept``, accept and close them at once. Removed: it listens again on
    the same port."""

    accept: bool = False


Toxic = Latency | Bandwidth | SlowClose | Timeout | Reset | Slicer | LimitData | Freeze | Down
ToxicKey = tuple[type, Direction | None]


def _key(toxic: Toxic) -> ToxicKey:
    return (type(toxic), None if isinstance(toxic, Down) else toxic.direction)


class _Closed(Exception):
    """This connection was reset or closed by a toxic: its pumps stop."""


class _Connection:
    """One client connection and its upstream connection."""

    def __init__(
        self,
        proxy: FaultProxy,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.proxy = proxy
        self.readers = {"upstream": client[0], "downstream": upstream[0]}
        self.writers = {"upstream": upstream[1], "downstream": client[1]}
        self.passed: Counter[str] = Counter()  # bytes passed on this connection, per direction
        self.armed: set[Direction] = set()
        self.tails = {d: b"" for d in DIRECTIONS}
        self.closed = asyncio.Event()

    async def run(self) -> None:
        """Pass data both ways until both ends have closed, or a toxic or the proxy closes it."""
        pumps = [asyncio.create_task(self._pump(d)) for d in DIRECTIONS]

        def ended(_: asyncio.Task[None]) -> None:
            if all(pump.done() for pump in pumps):
                self.closed.set()

        for pump in pumps:
            pump.add_done_callback(ended)
        try:
            await self.closed.wait()
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self.close()

    def close(self) -> None:
        self.closed.set()
        for writer in self.writers.values():
            writer.close()

    def reset(self) -> None:
        """Close both sockets with SO_LINGER 0: the peers get a RST, not a FIN."""
        self.closed.set()
        for writer in self.writers.values():
            sock = writer.get_extra_info("socket")
            if sock is not None and sock.family != socket.AF_UNIX:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

    async def _pump(self, direction: Direction) -> None:
        reader = self.readers[direction]
        try:
            while not self.closed.is_set():
                try:
                    data = await reader.read(CHUNK)
                except OSError:
                    data = b""
                if not data:
                    await self._end(direction)
                    return
                await self._pass(direction, data)
        except (_Closed, OSError):
            return

    async def _end(self, direction: Direction) -> None:
        slow = self.proxy.toxic(SlowClose, direction)
        if slow is not None:
            await asyncio.sleep(slow.seconds)
        writer = self.writers[direction]
        if writer.can_write_eof() and not writer.is_closing():
            with contextlib.suppress(OSError):
                writer.write_eof()
        else:
            writer.close()

    async def _pass(self, direction: Direction, data: bytes) -> None:
        proxy = self.proxy
        arrived = asyncio.get_running_loop().time()
        while proxy.toxic(Freeze, direction) is not None:
            await proxy.changed()
        if self.closed.is_set():
            raise _Closed
        if proxy.toxic(Timeout, direction) is not None:
            return  # dropped
        reset = proxy.toxic(Reset, direction)
        if reset is not None:
            data = await self._maybe_reset(reset, direction, data)
        limit = proxy.toxic(LimitData, direction)
        if limit is not None:
            room = max(limit.limit - self.passed[direction], 0)
            if len(data) >= room:
                await self._write(direction, data[:room])
                self.close()
                raise _Closed
        latency = proxy.toxic(Latency, direction)
        if latency is not None:
            due = arrived + latency.seconds + random.uniform(0, latency.jitter)
            await asyncio.sleep(max(due - asyncio.get_running_loop().time(), 0))
        await self._write(direction, data)

    async def _maybe_reset(self, reset: Reset, direction: Direction, data: bytes) -> bytes:
        if reset.match is None:
            room = reset.after_bytes - self.passed[direction]
            if len(data) <= room:
                return data
            await self._write(direction, data[: max(room, 0)])
            self.reset()
            raise _Closed
        seen = self.tails[direction] + data
        self.tails[direction] = seen[-max(len(reset.match), len(reset.armed_by or b"")) :]
        if reset.armed_by is not None and direction not in self.armed:
            at = seen.find(reset.armed_by)
            if at < 0:
                return data
            self.armed.add(direction)
            seen = seen[at + len(reset.armed_by) :]
        if reset.match not in seen:
            return data
        if reset.deliver:
            await self._write(direction, data)
        self.reset()
        raise _Closed

    async def _write(self, direction: Direction, data: bytes) -> None:
        writer = self.writers[direction]
        for piece, pause in self._pieces(direction, data):
            if self.closed.is_set():
                raise _Closed
            writer.write(piece)
            await writer.drain()
            self.passed[direction] += len(piece)
            self.proxy.forwarded[direction] += len(piece)
            if pause:
                await asyncio.sleep(pause)

    def _pieces(self, direction: Direction, data: bytes) -> list[tuple[bytes, float]]:
        slicer = self.proxy.toxic(Slicer, direction)
        bandwidth = self.proxy.toxic(Bandwidth, direction)
        size = len(data) or 1
        if slicer is not None:
            size = max(slicer.size, 1)
        if bandwidth is not None:  # pieces of a tenth of a second at most
            size = min(size, max(bandwidth.bytes_per_second // 10, 1))
        pieces = []
        for start in range(0, len(data), size):
            piece = data[start : start + size]
            pause = slicer.delay if slicer is not None else 0.0
            if bandwidth is not None:
                pause = max(pause, len(piece) / bandwidth.bytes_per_second)
            pieces.append((piece, pause))
        return pieces


class FaultProxy:
    """A TCP proxy on 127.0.0.1 to ``host``:``port``, or to the Unix socket ``unix_path``,
    whose faults the test switches (module docstring)."""

    def __init__(
        self, host: str | None = None, port: int | None = None, *, unix_path: str | None = None
    ) -> None:
        if (unix_path is None) == (host is None or port is None):
            raise ValueError("give either host and port or unix_path")
        self.host, self.upstream_port, self.unix_path = host, port, unix_path
        self.port = 0
        self.connections = 0  # accepted, in all
        self.forwarded: Counter[str] = Counter()  # bytes passed on, per direction
        self._toxics: dict[ToxicKey, Toxic] = {}
        self._open: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: list[asyncio.TimerHandle] = []
        self._server: asyncio.Server | None = None
        self._listening: socket.socket | None = None  # bound, its server about to start
        self._running = False
        self._change = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def active(self) -> int:
        """Connections open now."""
        return len(self._open)

    def toxic(self, kind: type[T], direction: Direction | None = None) -> T | None:
        """The toxic of ``kind`` set for ``direction``, if any."""
        found = self._toxics.get((kind, direction))
        return found if isinstance(found, kind) else None

    def set(self, toxic: Toxic) -> None:
        """Set ``toxic`` (replacing the one of its kind and direction), now."""
        self._toxics[_key(toxic)] = toxic
        if isinstance(toxic, Down):
            for conn in list(self._open):
                conn.close()
        if isinstance(toxic, Timeout) and toxic.close_after is not None:
            for conn in self._open:
                self._close_later(conn, toxic.close_after)
        self._changed()

    def remove(self, kind: type, direction: Direction | None = None) -> None:
        """Remove the toxic of ``kind`` for ``direction``."""
        removed = self._toxics.pop((kind, direction), None)
        if isinstance(removed, Timeout):
            self._cancel_timers()
        self._changed()

    def clear(self) -> None:
        """Remove every toxic: traffic flows again, and the proxy listens if it was down."""
        self._toxics.clear()
        self._cancel_timers()
        self._changed()

    def reset_connections(self) -> None:
        """Reset every open connection now (RST)."""
        for conn in list(self._open):
            conn.reset()

    async def changed(self) -> None:
        """Wait for the next change of the toxics."""
        await self._change.wait()

    async def start(self) -> None:
        await self._listen(self._bind())
        self._running = True

    def _bind(self) -> socket.socket:
        # bound and listening at once, so that a client may connect as soon as a Down is
        # removed: the kernel queues it until the server accepts
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(100)
        self.port = sock.getsockname()[1]
        return sock

    async def _listen(self, sock: socket.socket) -> None:
        self._server = await asyncio.start_server(self._serve, sock=sock)

    async def stop(self) -> None:
        self._running = False
        self._cancel_timers()
        self._stop_listening()
        for conn in list(self._open):
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    def _changed(self) -> None:
        # wake whoever waits on the toxics, with a fresh event for the next change
        self._change.set()
        self._change = asyncio.Event()
        down = self._toxics.get((Down, None))
        if isinstance(down, Down) and not down.accept:
            self._stop_listening()
        elif self._running and self._server is None and self._listening is None:
            self._listening = self._bind()
            task = asyncio.get_running_loop().create_task(self._relisten())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _relisten(self) -> None:
        assert self._listening is not None
        try:
            await self._listen(self._listening)
        finally:
            self._listening = None

    def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    def _close_later(self, conn: _Connection, seconds: float) -> None:
        self._timers.append(asyncio.get_running_loop().call_later(seconds, conn.close))

    def _cancel_timers(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.unix_path is not None:
            return await asyncio.open_unix_connection(self.unix_path)
        return await asyncio.open_connection(self.host, self.upstream_port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn: _Connection | None = None
        try:
            self.connections += 1
            if (Down, None) in self._toxics:  # Down(accept=True)
                return
            try:
                upstream = await self._open_upstream()
            except OSError:
                return
            conn = _Connection(self, (reader, writer), upstream)
            self._open.add(conn)
            timeout = self._toxics.get((Timeout, "upstream")) or self._toxics.get(
                (Timeout, "downstream")
            )
            if isinstance(timeout, Timeout) and timeout.close_after is not None:
                self._close_later(conn, timeout.close_after)
            await conn.run()
        except asyncio.CancelledError:
            # the proxy stopped: the connection's end, not an error of asyncio's server (which
            # would log a cancelled handler as one)
            return
        finally:
            if conn is None:  # refused, or stopped while its upstream was being opened
                writer.close()
            else:
                self._open.discard(conn)
            self._tasks.discard(task)


def proxy_to_postgres(url: str) -> FaultProxy:
    """A proxy (to start) to the PostgreSQL server of ``url``: its Unix socket where the URL
    names a socket folder (``?host=/folder``, as the embedded server's does), else its host
    and port."""
    parts = urlsplit(url)
    socket_dir = parse_qs(parts.query).get("host", [""])[0]
    if socket_dir.startswith("/"):
        return FaultProxy(unix_path=f"{socket_dir}/.s.PGSQL.{parts.port or 5432}")
    return FaultProxy(parts.hostname or "127.0.0.1", parts.port or 5432)


def postgres_url(proxy: FaultProxy, url: str) -> str:
    """``url`` (its user, password and database) through ``proxy``, over TCP without TLS."""
    parts = urlsplit(url)
    user = f"{parts.username or 'postgres'}:{parts.password or ''}"
    return f"postgresql://{user}@127.0.0.1:{proxy.port}{parts.path}?sslmode=disable"
