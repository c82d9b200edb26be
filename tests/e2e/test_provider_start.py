"""A starting provider lets no client in before it serves (docs/links.md, "Harvest on a
hint"): a client that comes while the provider starts is refused and tries again on its own
backoff. A socket listening from the first moment kept such clients waiting in its queue and let
them all in at the same instant once the provider was ready, whatever their jittered backoffs
said: the peers' streams after a provider's restart came back together."""

from __future__ import annotations

import asyncio
import os
import socket
import time

from tests.e2e.test_harvester_killed import WISCAT
from tests.support.faultproxy import Latency, postgres_url, proxy_to_postgres

# each database round trip of the provider's start takes this long: a start of about 2 s (the
# round trips after the socket is bound), a client let in at once waiting as long
LATENCY = 0.1


async def test_no_client_is_let_in_before_the_provider_serves(database_url: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with proxy_to_postgres(database_url) as proxy:
        proxy.set(Latency("downstream", LATENCY))
        env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
        env.update(
            WISCAT_DATABASE_URL=postgres_url(proxy, database_url),
            WISCAT_GISC_NAME="START",
            WISCAT_PROVIDER_PORT=str(port),
        )
        provider = await asyncio.create_subprocess_exec(
            WISCAT, "provider", env=env, stderr=asyncio.subprocess.DEVNULL
        )
        try:
            started = time.monotonic()
            while True:  # a client trying every 10 ms
                assert provider.returncode is None, "the provider ended"
                assert time.monotonic() - started < 60, "the provider never let a client in"
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    break
                except OSError:
                    await asyncio.sleep(0.01)
            let_in = time.monotonic()
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status = await asyncio.wait_for(reader.readline(), 30)
            answered = time.monotonic() - let_in
            writer.close()
        finally:
            provider.terminate()
            await provider.wait()
    assert status.startswith(b"HTTP/1.1 200"), status
    # let in at the moment it serves, it is answered at once: not after the start's round trips
    assert answered < 1.0, f"let in {answered:.2f} s before the provider answered"
