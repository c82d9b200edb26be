"""Connections that never send a whole request: the provider closes them, and serves others."""

from __future__ import annotations

import asyncio

from tests.support.servers import running_provider
from wiscat.shared.db.pool import Pool


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), within) == b""
    except TimeoutError:
        return False


async def test_a_connection_without_a_whole_request_head_is_closed(
    db: Pool, database_url: str
) -> None:
    """A client that sends nothing, or its headers a piece at a time, held its connection (and
    a file descriptor) for the life of the provider: the keep-alive timeout starts only after a
    response."""
    async with running_provider(database_url, header_timeout_seconds=0.5) as provider:
        port = int(provider.root.rsplit(":", 1)[1])
        silent = await asyncio.open_connection("127.0.0.1", port)
        slow = await asyncio.open_connection("127.0.0.1", port)
        slow[1].write(b"GET /oai?verb=Identify HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):  # a header now and then, never the blank line that ends them
            await asyncio.sleep(0.2)
            slow[1].write(b"X-Slow: 1\r\n")
        assert await closed_by_server(silent[0], 2)
        assert await closed_by_server(slow[0], 2)
        # a client that sends its request in time is answered, again on the same connection
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):
            await asyncio.sleep(0.3)  # within the keep-alive timeout, and under the deadline
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        for w in (silent[1], slow[1], writer):
            w.close()
