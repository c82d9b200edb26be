"""A small real forward proxy on loopback, as an institution's outbound proxy is: plain http
requests in absolute form (``GET http://host:port/path``) are forwarded, ``CONNECT host:port``
opens a tunnel (https), and, when it is given credentials, a request without the matching
``Proxy-Authorization`` gets 407. It records what it was asked."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class ForwardProxy:
    url: str = ""  # http://127.0.0.1:PORT
    credentials: tuple[str, str] | None = None
    asked: list[str] = field(default_factory=list)  # request lines, in order

    def _authorized(self, head: list[str]) -> bool:
        if self.credentials is None:
            return True
        expected = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "proxy-authorization" and value.strip() == expected:
                return True
        return False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
            head = raw.decode("latin-1").split("\r\n")[:-2]
            self.asked.append(head[0])
            method, target, _ = head[0].split(" ", 2)
            if not self._authorized(head):
                writer.write(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                    b'Proxy-Authenticate: Basic realm="test"\r\nContent-Length: 0\r\n'
                    b"Connection: close\r\n\r\n"
                )
                await writer.drain()
                return
            if method == "CONNECT":
                host, port = target.rsplit(":", 1)
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await _pipe_both(reader, writer, up_reader, up_writer)
                return
            parts = urlsplit(target)
            up_reader, up_writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
            path = parts.path + ("?" + parts.query if parts.query else "")
            kept = [
                line
                for line in head[1:]
                if line.split(":", 1)[0].strip().lower()
                not in ("proxy-authorization", "proxy-connection", "connection")
            ]
            request = [f"{method} {path} HTTP/1.1", *kept, "Connection: close", "", ""]
            up_writer.write("\r\n".join(request).encode("latin-1"))
            await up_writer.drain()
            # the answer goes back as it comes, and the connection ends with it
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
            up_writer.close()
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


@contextlib.asynccontextmanager
async def forward_proxy(credentials: tuple[str, str] | None = None) -> AsyncIterator[ForwardProxy]:
    """A forward proxy on 127.0.0.1 (an ephemeral port) until the block ends."""
    proxy = ForwardProxy(credentials=credentials)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    proxy.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield proxy
    finally:
        server.close()
        await server.wait_closed()
