"""The tests' fault-injecting proxy (tests/support/faultproxy.py): each toxic does what it says,
against
a small echo server on loopback, set while the connection is open where the toxic allows.

Times are asserted as lower bounds only: a toxic that delays makes a thing take at least so long.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from tests.support.faultproxy import (
    Bandwidth,
    Down,
    FaultProxy,
    Freeze,
    Latency,
    LimitData,
    Reset,
    Slicer,
    SlowClose,
    Timeout,
)


@dataclass
class Echo:
    """An echo server on 127.0.0.1 that counts what it receives; at the end of its input it
    closes the connection."""

    port: int = 0
    received: bytearray = field(default_factory=bytearray)
    connections: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                self.received += data
                writer.write(data)
                await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def echo_behind_proxy() -> AsyncIterator[tuple[Echo, FaultProxy]]:
    echo = Echo()
    server = await asyncio.start_server(echo.serve, "127.0.0.1", 0)
    echo.port = server.sockets[0].getsockname()[1]
    try:
        async with FaultProxy("127.0.0.1", echo.port) as proxy:
            yield echo, proxy
    finally:
        server.close()


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@contextlib.asynccontextmanager
async def client(proxy: FaultProxy) -> AsyncIterator[Streams]:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        yield reader, writer
    finally:
        writer.close()


async def echoed(streams: Streams, data: bytes) -> bytes:
    reader, writer = streams
    writer.write(data)
    await writer.drain()
    return await reader.readexactly(len(data))


async def test_without_toxics_it_passes_everything_on_and_counts_it() -> None:
    async with echo_behind_proxy() as (echo, proxy), client(proxy) as streams:
        assert await echoed(streams, b"hello") == b"hello"
        assert await echoed(streams, b"x" * 200_000) == b"x" * 200_000
        assert (proxy.connections, proxy.active) == (1, 1)
        assert proxy.forwarded == {"upstream": 200_005, "downstream": 200_005}
        assert bytes(echo.received) == b"hello" + b"x" * 200_000


async def test_latency_set_on_an_open_connection_delays_each_chunk() -> None:
    async with echo_behind_proxy() as (_, proxy), client(proxy) as streams:
        assert await echoed(streams, b"before") == b"before"
        proxy.set(Latency("downstream", 0.3, jitter=0.1))
        started = time.monotonic()
        assert await echoed(streams, b"after") == b"after"
        assert time.monotonic() - started >= 0.3
        proxy.remove(Latency, "downstream")
        assert await echoed(streams, b"again") == b"again"


async def test_down_cuts_open_connections_refuses_new_ones_and_comes_back_on_its_port() -> None:
    async with echo_behind_proxy() as (echo, proxy):
        async with client(proxy) as (reader, writer):
            assert await echoed((reader, writer), b"up") == b"up"
            proxy.set(Down())
            assert await reader.read(100) == b""  # cut: the proxy closed it
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", proxy.port)
        proxy.set(Down(accept=True))  # listens, and closes what it accepts
        async with client(proxy) as (reader, _):
            assert await reader.read(100) == b""
        proxy.clear()
        async with client(proxy) as streams:
            assert await echoed(streams, b"back") == b"back"
        assert echo.connections == 2  # the refused and the accepted-and-closed never got there


async def test_bandwidth_limits_bytes_per_second() -> None:
    async with echo_behind_proxy() as (_, proxy), client(proxy) as streams:
        proxy.set(Bandwidth("upstream", 4000))
        started = time.monotonic()
        assert await echoed(streams, b"b" * 4000) == b"b" * 4000
        # ten pieces of 400 bytes, each followed by a tenth of a second
        assert time.monotonic() - started >= 0.9


async def test_slow_close_passes_the_end_of_stream_on_late() -> None:
    async with echo_behind_proxy() as (echo, proxy), client(proxy) as (reader, writer):
        proxy.set(SlowClose("upstream", 0.5))
        writer.write(b"last words")
        writer.write_eof()
        started = time.monotonic()
        assert await reader.read() == b"last words"  # to the end: the server closes once told
        assert time.monotonic() - started >= 0.5
        assert bytes(echo.received) == b"last words"


async def test_timeout_drops_data_keeps_the_connection_then_closes_it_after_n_seconds() -> None:
    async with echo_behind_proxy() as (echo, proxy), client(proxy) as (reader, writer):
        assert await echoed((reader, writer), b"one") == b"one"
        proxy.set(Timeout("upstream"))
        writer.write(b"lost")
        await writer.drain()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await reader.read(100)
        assert bytes(echo.received) == b"one"
        assert proxy.forwarded["upstream"] == 3
        proxy.remove(Timeout, "upstream")
        assert await echoed((reader, writer), b"two") == b"two"  # open all along

        started = time.monotonic()
        proxy.set(Timeout("upstream", close_after=0.5))
        assert await reader.read(100) == b""
        assert time.monotonic() - started >= 0.5
        assert bytes(echo.received) == b"onetwo"


async def read_until_reset(reader: asyncio.StreamReader) -> bytes:
    got = b""
    with pytest.raises(ConnectionResetError):
        async with asyncio.timeout(10):
            while data := await reader.read(100):
                got += data
    return got


async def received(echo: Echo, size: int) -> None:
    """Wait (5 s at most) for the server to have read ``size`` bytes: it reads what was sent
    before a reset in its own time."""
    for _ in range(500):
        if len(echo.received) >= size:
            return
        await asyncio.sleep(0.01)


async def test_reset_after_n_bytes_sends_n_bytes_then_a_rst() -> None:
    async with echo_behind_proxy() as (echo, proxy), client(proxy) as (reader, writer):
        proxy.set(Reset("upstream", after_bytes=5))
        writer.write(b"0123456789")
        await writer.drain()
        got = await read_until_reset(reader)
        assert b"01234".startswith(got)
        await received(echo, 5)
        assert bytes(echo.received) == b"01234"
        assert proxy.forwarded["upstream"] == 5


@pytest.mark.parametrize("deliver", [False, True])
async def test_reset_on_matching_bytes_delivers_them_or_not(deliver: bool) -> None:
    async with echo_behind_proxy() as (echo, proxy), client(proxy) as (reader, writer):
        proxy.set(Reset("upstream", match=b"STOP", deliver=deliver, armed_by=b"ARM"))
        assert await echoed((reader, writer), b"STOP before ARM passes") == (
            b"STOP before ARM passes"
        )
        writer.write(b"xxSTOPyy")
        await writer.drain()
        await read_until_reset(reader)
        expected = b"STOP before ARM passes" + (b"xxSTOPyy" if deliver else b"")
        assert proxy.forwarded["upstream"] == len(expected)
        await received(echo, len(expected))
        assert bytes(echo.received) == expected
        # a new connection passes until it too is armed
        async with client(proxy) as streams:
            assert await echoed(streams, b"STOP") == b"STOP"


async def test_reset_connections_resets_every_open_connection() -> None:
    async with echo_behind_proxy() as (_, proxy), client(proxy) as (reader, writer):
        assert await echoed((reader, writer), b"hi") == b"hi"
        proxy.reset_connections()
        await read_until_reset(reader)
        assert proxy.active == 0


async def test_slicer_writes_small_pieces_with_delays() -> None:
    async with echo_behind_proxy() as (_, proxy), client(proxy) as streams:
        proxy.set(Slicer("downstream", size=3, delay=0.05))
        started = time.monotonic()
        assert await echoed(streams, b"abcdefghijklmnopqrstuvwxyz0123") == (
            b"abcdefghijklmnopqrstuvwxyz0123"
        )
        assert time.monotonic() - started >= 9 * 0.05  # ten pieces: nine pauses before the last


async def test_limit_data_closes_after_n_bytes() -> None:
    async with echo_behind_proxy() as (_, proxy), client(proxy) as (reader, writer):
        proxy.set(LimitData("downstream", 10))
        writer.write(b"y" * 25)
        await writer.drain()
        assert await reader.read() == b"y" * 10  # then the end of the stream
        assert proxy.forwarded["downstream"] == 10


async def test_freeze_holds_data_until_thawed_then_passes_it_in_order() -> None:
    async with echo_behind_proxy() as (echo, proxy), client(proxy) as (reader, writer):
        assert await echoed((reader, writer), b"a") == b"a"
        proxy.set(Freeze("upstream"))
        writer.write(b"b")
        await writer.drain()
        writer.write(b"c")
        await writer.drain()
        await asyncio.sleep(0.3)
        assert bytes(echo.received) == b"a"
        proxy.remove(Freeze, "upstream")
        assert await reader.readexactly(2) == b"bc"
        assert bytes(echo.received) == b"abc"
