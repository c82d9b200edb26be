"""A client that opens the stream of change hints and never reads it, while the provider's
database takes a write transaction after another: the provider process's memory stays flat,
for what the client has not read is coalesced into one pending hint (docs/links.md, "Change
hints"; :class:`wiscat.provider.hints.Stream`).

``make test`` writes for WISCAT_SILENT_READER_SECONDS (8 s by default); ``make soak`` for 300 s.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
from datetime import datetime

from tests.e2e.nodes import Node, NodeFactory, hint_streams_open
from tests.support import factories
from tests.support.metrics import sample_value
from tests.support.proc import status_kib
from wiscat.shared.db.pool import Pool, create_pool

WRITE_SECONDS = float(os.environ.get("WISCAT_SILENT_READER_SECONDS", "8"))
# what the provider process may grow by while the client reads nothing: measured +200 kB in
# 300 s of writes (+130 kB in 8 s); a queue of every event the client has not read grew by
# +19.5 MB in those 300 s (about 65 kB/s, too little for the 8 s of make test to tell: there the
# events read at last tell)
RSS_BOUND_KB = 5 * 1024
# the client's receive buffer and segment size, the least the kernel allows: the provider's
# kernel sizes its send buffer by them, so that its writes to the client stop early (after some
# 40 kB, and the 64 kB its event loop buffers)
CLIENT_BUFFER = 1
SEGMENT = 88
# a set whose name makes each event about 500 bytes (of 512 at most): the buffers on the way to
# the client fill in a few hundred events
LONG_SET = "WIS-GISC-ALPHA:" + "x" * 380


async def change_events_sent(node: Node) -> int:
    root = f"http://127.0.0.1:{node.provider_port}"
    return int(await sample_value(root, "wiscat_hints_sent_total", kind="change"))


async def write_until(pool: Pool, set_spec: str, end: float) -> int:
    """Rewrite records of ``set_spec`` in a new version, one transaction each (each notifies
    the provider), until ``end``; how many transactions."""
    written = 0
    while time.monotonic() < end:
        await factories.load_records(
            pool, set_spec, [written % 50], version=written // 50 + 1, kind="remote"
        )
        written += 1
    return written


def silent_client(port: int) -> socket.socket:
    """A connection that has asked for every set's stream, and will never read."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_BUFFER)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, SEGMENT)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET /oai/changes HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    return sock


async def drain(sock: socket.socket, quiet: float, most: float) -> bytes:
    """What the connection holds and is still sent, until nothing came for ``quiet`` s, or
    for ``most`` s in all (a provider that queued every event would send for long)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    received = bytearray()
    end = time.monotonic() + most
    while time.monotonic() < end:
        try:
            async with asyncio.timeout(quiet):
                chunk = await loop.sock_recv(sock, 65536)
        except TimeoutError:
            break
        if not chunk:
            break
        received += chunk
    return bytes(received)


async def test_a_client_that_never_reads_costs_the_provider_no_memory(
    make_node: NodeFactory,
) -> None:
    a = await make_node("ALPHA")
    a.extra["WISCAT_HINTS"] = "true"
    pool = await create_pool(a.database_url, max_size=2)
    sock: socket.socket | None = None
    try:
        await factories.load_records(pool, LONG_SET, range(50), kind="remote")
        provider = await a.start("provider", f"http://127.0.0.1:{a.provider_port}/readyz")
        sock = silent_client(a.provider_port)
        for _ in range(50):
            await asyncio.sleep(0.1)
            if await hint_streams_open(a) == 1:
                break
        else:
            raise AssertionError("the silent client's stream was never opened")
        before = status_kib(provider.pid, "VmRSS")
        sent_before = await change_events_sent(a)
        start = time.monotonic()
        writing = asyncio.create_task(write_until(pool, LONG_SET, start + WRITE_SECONDS))
        most = before
        samples: list[tuple[float, int, int]] = []  # seconds, RSS and events sent
        while not writing.done():
            await asyncio.sleep(0.5)
            rss = status_kib(provider.pid, "VmRSS")
            most = max(most, rss)
            sent = await change_events_sent(a) - sent_before
            samples.append((time.monotonic() - start, rss - before, sent))
        written = writing.result()
        await asyncio.sleep(0.5)  # the provider's last look for changes
        most = max(most, status_kib(provider.pid, "VmRSS"))
        stalled = await change_events_sent(a)
        last_write: datetime = await pool.fetchval("select max(datestamp) from records")
        shown = ", ".join(f"{t:.1f} s +{kb} kB {n} sent" for t, kb, n in samples[::10])
        print(
            f"{written} write transactions in {WRITE_SECONDS:g} s; {stalled - sent_before} "
            f"change events sent to the silent client; provider RSS {before} kB, at most "
            f"{most} kB (+{most - before} kB); {shown}"
        )
        assert written > 20 * WRITE_SECONDS, "too few writes to tell"
        assert most - before <= RSS_BOUND_KB, f"the provider grew by {most - before} kB"

        # reading at last: what the provider could not send was coalesced into at most the
        # event it was sending and one more, whose bound covers the last write
        received = await drain(sock, quiet=1.0, most=5.0)
        events = re.findall(rb"^event: change\ndata: (.*)$", received, re.MULTILINE)
        assert 1 <= len(events) - (stalled - sent_before) <= 2, (
            f"{len(events)} change events received, {stalled - sent_before} sent before the "
            "client read: the provider never stopped sending, or queued what it could not"
        )
        assert len(events) == await change_events_sent(a) - sent_before
        until = re.search(rb'"until": "([^"]+)"', events[-1])
        assert until, events[-1]
        assert datetime.fromisoformat(until[1].decode()) >= last_write.replace(microsecond=0)
    finally:
        if sock is not None:
            sock.close()
        await pool.close()
