"""Whether the node's harvester answers, seen from this provider: the status strip's
"harvester" cell."""

from __future__ import annotations

import ipaddress

import aiohttp

from wiscat.shared.settings import Settings
from wiscat.shared.urls import url_host

# how long the page waits for the harvester's /healthz
PROBE_SECONDS = 2.0


def harvester_address(settings: Settings) -> str:
    """Where the harvester's health port is, seen from this provider: ``WISCAT_HARVESTER_URL``,
    or else the address both bind to (``WISCAT_PROVIDER_HOST``; loopback when that is every
    address) and ``WISCAT_HARVESTER_PORT``."""
    if settings.harvester_url:
        return settings.harvester_url
    host = settings.provider_host
    try:
        everywhere = not host or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        everywhere = False
    return f"http://{url_host('127.0.0.1' if everywhere else host)}:{settings.harvester_port}"


async def probe_harvester(address: str, seconds: float = PROBE_SECONDS) -> str | None:
    """Why the harvester at ``address`` is not alive (its ``/healthz`` does not answer ``ok``
    within ``seconds``), or None when it is."""
    timeout = aiohttp.ClientTimeout(total=seconds)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(address + "/healthz", allow_redirects=False) as response,
        ):
            body = await response.content.read(64)
            if response.status == 200 and body.strip() == b"ok":
                return None
            return f"/healthz answered {response.status}, not ok"
    except TimeoutError:
        return f"/healthz did not answer within {seconds:g} s"
    except aiohttp.ClientConnectionError as exc:
        return f"/healthz cannot be reached: {type(exc).__name__}"
