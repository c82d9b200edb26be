"""Outbound HTTP for the registry that cannot be turned against the node's own network (SSRF).

A submitted URL, a peer learnt from a tracker and a redirect's target are all chosen by someone
else, so every connection the registry makes goes through :class:`SafeFetcher`:

- the address is checked **when the socket is made**, for the very address being connected to
  (aiohttp's ``socket_factory``): IP literals, every address a name resolves to, and a name that
  resolves differently the second time (DNS rebinding) are all covered; a refused address is never
  connected to;
- an address that is not global unicast (:mod:`wiscat.shared.registry.addresses`: the IANA
  special-purpose ranges that are not globally reachable, NAT64, 6to4, site-local, multicast) is
  refused unless the node is configured for a closed network (``WISCAT_ALLOW_PRIVATE_FETCH``);
- a port off the configured list (``WISCAT_REGISTRY_FETCH_PORTS``) is refused before any
  connection, so that the registry cannot be made to knock on a mail or database port;
- redirects are followed by hand, at most ``max_redirects``, each target's scheme checked and its
  connection checked again like the first;
- a total timeout and a connect timeout, and a cap on the (decompressed) body size.

Exception tree::

    FetchError              the fetch did not give a usable response
     +-- ForbiddenAddress   the target is (or resolves to) a non-global address
     +-- ForbiddenPort      the URL's port (or a redirect's) is not on the list
     +-- FetchFailed        unreachable, timed out, too many redirects, too large
"""

from __future__ import annotations

import contextvars
import socket
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
import yarl
from aiohappyeyeballs import AddrInfoType
from aiohttp.abc import AbstractResolver

from wiscat.shared.registry.addresses import address_allowed, address_refusal
from wiscat.shared.text import clipped
from wiscat.shared.tls import client_context, refusal
from wiscat.shared.version import VERSION

Params = Mapping[str, str] | Sequence[tuple[str, str]]
_REDIRECTS = {301, 302, 303, 307, 308}
DEFAULT_PORTS = (80, 443, 8080, 8443)
_SCHEME_PORTS = {"http": 80, "https": 443}
# The addresses refused during the current request (one list per request, seen by the factory).
_refused: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "wiscat_registry_refused", default=None
)


class FetchError(Exception):
    """The fetch did not give a usable response."""


class ForbiddenAddress(FetchError):
    """The target is, or resolves to, a private, loopback, link-local or other non-global
    address."""


class ForbiddenPort(FetchError):
    """The URL's port, or a redirect target's, is not one the registry fetches from."""


class FetchFailed(FetchError):
    """Unreachable, timed out, too many redirects, or a body over the size cap."""


class _RefusedSocket(OSError):
    pass


@dataclass(frozen=True)
class FetchResponse:
    """A response read whole: the final URL, its status, content type and body."""

    url: str  # the final URL, after redirects
    status: int
    content_type: str
    body: bytes


class SafeFetcher:
    """One aiohttp session for the registry's outbound requests (use as ``async with``)."""

    def __init__(
        self,
        *,
        allow_private: bool = False,
        timeout: float = 10.0,
        max_bytes: int = 1024 * 1024,
        max_redirects: int = 5,
        user_agent: str = f"wiscat-registry/{VERSION}",
        address_policy: Callable[[str], bool] = address_allowed,
        ports: Collection[int] = DEFAULT_PORTS,
        ca_file: Path | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.allow_private = allow_private
        self.address_policy = address_policy
        self.ports = frozenset(ports)
        self.resolver = resolver  # None: the system's (a test gives one that knows its names)
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.user_agent = user_agent
        self.ca_file = ca_file
        self._session: aiohttp.ClientSession | None = None

    def _socket(self, addr_info: AddrInfoType) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        address = str(sockaddr[0])
        if not self.allow_private and not self.address_policy(address):
            reason = address_refusal(address) or f"{address} is refused"
            refused = _refused.get()
            if refused is not None:
                refused.append(reason)
            raise _RefusedSocket(reason)
        return socket.socket(family=family, type=type_, proto=proto)

    async def __aenter__(self) -> SafeFetcher:
        connector = aiohttp.TCPConnector(
            limit=64,
            limit_per_host=4,
            socket_factory=self._socket,
            ttl_dns_cache=10,
            ssl=client_context(self.ca_file),
            resolver=self.resolver,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self.timeout, sock_connect=self.timeout / 2),
            headers={"User-Agent": self.user_agent},
            trust_env=False,  # a proxy would connect on our behalf, past the address check
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session; the fetcher can no longer be used."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get(
        self,
        url: str,
        params: Params | None = None,
        *,
        max_bytes: int | None = None,
        encoded: bool = False,
    ) -> FetchResponse:
        """GET ``url`` (with ``params``), following redirects safely; ``encoded``: the URL is
        sent as it is, its %-escapes untouched (a tracker's binary info_hash)."""
        return await self.request("GET", url, params=params, max_bytes=max_bytes, encoded=encoded)

    async def post(
        self,
        url: str,
        *,
        data: dict[str, str] | bytes,
        content_type: str | None = None,
        max_bytes: int | None = None,
    ) -> FetchResponse:
        """POST to ``url``; redirects are not followed (a POST is not replayed elsewhere)."""
        headers = {"Content-Type": content_type} if content_type else None
        return await self.request(
            "POST", url, data=data, headers=headers, max_bytes=max_bytes, follow=False
        )

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: Params | None = None,
        data: Any = None,
        headers: dict[str, str] | None = None,
        max_bytes: int | None = None,
        follow: bool = True,
        encoded: bool = False,
    ) -> FetchResponse:
        """Send one request, following redirects, each address checked, the body capped."""
        if self._session is None:
            raise RuntimeError("SafeFetcher is used outside its `async with` block")
        cap = max_bytes or self.max_bytes
        current = url
        for _ in range(self.max_redirects + 1):
            parts = urlsplit(current)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise FetchFailed(f"{current!r} is not an http(s) URL")
            self._check_port(current)
            refused: list[str] = []
            token = _refused.set(refused)
            try:
                async with self._session.request(
                    method,
                    yarl.URL(current, encoded=True) if encoded else current,
                    params=params,
                    data=data,
                    headers=headers,
                    allow_redirects=False,
                ) as response:
                    if follow and response.status in _REDIRECTS and "Location" in response.headers:
                        current = urljoin(current, response.headers["Location"])
                        params = None  # the Location is the whole next URL
                        encoded = False
                        continue
                    body = await _read_capped(response, cap)
                    return FetchResponse(
                        str(response.url), response.status, response.content_type, body
                    )
            except TimeoutError as exc:  # before OSError, of which it is a subclass
                raise FetchFailed(f"no answer from {current} within {self.timeout:g} s") from exc
            except aiohttp.ClientResponseError as exc:
                # not HTTP (a bad status line, Content-Length or chunk, headers past 8 KB); its
                # status is made up by aiohttp
                raise FetchFailed(
                    f"broken HTTP response from {current}: {parser_message(exc.message)}"
                ) from exc
            except aiohttp.ClientSSLError as exc:
                raise FetchFailed(f"cannot fetch {current}: {refusal(exc)}") from exc
            except (aiohttp.ClientError, OSError) as exc:
                if refused:
                    raise ForbiddenAddress(
                        f"{parts.hostname} is a non-global address: {'; '.join(refused)}"
                    ) from exc
                raise FetchFailed(f"cannot fetch {current}: {exc or type(exc).__name__}") from exc
            finally:
                _refused.reset(token)
        raise FetchFailed(f"more than {self.max_redirects} redirects from {url}")

    def _check_port(self, url: str) -> None:
        parts = urlsplit(url)
        try:
            port = parts.port or _SCHEME_PORTS[parts.scheme]
        except ValueError as exc:
            raise FetchFailed(f"{url!r} has no valid port") from exc
        if port not in self.ports:
            raise ForbiddenPort(
                f"this registry node fetches from ports {_listed(sorted(self.ports))} only, "
                f"not {port}"
            )


def _listed(ports: Sequence[int]) -> str:
    if len(ports) == 1:
        return str(ports[0])
    return ", ".join(map(str, ports[:-1])) + f" and {ports[-1]}"


def parser_message(message: str, limit: int = 200) -> str:
    """aiohttp's message for an answer that is not HTTP, on one line: its lines but the caret
    under the fault (``Invalid character in chunk size: b'ZZ'``), at most ``limit`` characters."""
    lines = (line.strip() for line in message.splitlines())
    return clipped(" ".join(line for line in lines if line.strip("^")), limit)


async def _read_capped(response: aiohttp.ClientResponse, cap: int) -> bytes:
    length = response.content_length
    if length is not None and length > cap:
        raise FetchFailed(f"the response is larger than {cap} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(65536):
        size += len(chunk)
        if size > cap:
            raise FetchFailed(f"the response is larger than {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
