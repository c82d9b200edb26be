"""S11: a body sent to a route that answers without reading it (a 404, a 405) is not read
either: the answer closes the connection, so a 100 MB chunked upload ends within a few MiB.

Each upload is a real chunked POST over a loopback socket whose send buffer is small, so the
bytes it got off its hands are about what the server took in."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time

from aiohttp import web

from tests.support.harvest_pair import Pair
from tests.support.servers import running_provider
from wiscat.harvester.service import health_runner

UPLOAD = 100 * 1024 * 1024
CHUNK = 64 * 1024
# what loopback buffers on both sides, with the server's read-ahead, is well under this
BOUND = 8 * 1024 * 1024


def chunked_upload(port: int, path: str) -> tuple[bytes, int]:
    """POST up to 100 MB chunked to ``path``; the answer's status line and the bytes sent."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHUNK)
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            "Content-Type: application/octet-stream\r\n\r\n".encode()
        )
        frame = f"{CHUNK:x}\r\n".encode() + b"x" * CHUNK + b"\r\n"
        deadline = time.monotonic() + 60
        try:
            while sent < UPLOAD and time.monotonic() < deadline:
                sock.sendall(frame)
                sent += CHUNK
            sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server closed the connection: the upload is over
            pass
        answer = b""
        try:
            while b"\r\n" not in answer:
                more = sock.recv(4096)
                if not more:
                    break
                answer += more
        except OSError:
            pass
    return answer.split(b"\r\n", 1)[0], sent


async def test_s11_the_provider_reads_no_body_a_route_does_not_read(
    db: object, database_url: str
) -> None:
    async with running_provider(database_url) as node:
        port = int(node.root.rsplit(":", 1)[1])
        for path, status in [("/nonexistent", b" 404 "), ("/healthz", b" 405 ")]:
            line, sent = await asyncio.to_thread(chunked_upload, port, path)
            assert status in line, (path, line)
            assert sent < BOUND, (path, sent)


async def test_s11_the_harvesters_health_port_reads_no_body(pair: Pair) -> None:
    settings = pair.ctx.settings.model_copy(update={"header_timeout_seconds": 30})
    runner = health_runner(dataclasses.replace(pair.ctx, settings=settings))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        for path, status in [("/healthz", b" 405 "), ("/metrics", b" 405 "), ("/x", b" 404 ")]:
            line, sent = await asyncio.to_thread(chunked_upload, port, path)
            assert status in line, (path, line)
            assert sent < BOUND, (path, sent)
    finally:
        await runner.cleanup()
