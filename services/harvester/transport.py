"""How the harvester's client meets HTTP: which addresses a guarded run may connect to, how
a body is inflated, how long a peer asks to wait, where redirects led, and the words of a
failed request's reason. Plain functions of aiohttp's objects; the client
(:mod:`wiscat.harvester.client`) decides what to do with them.
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
from aiohappyeyeballs import AddrInfoType

from wiscat.harvester.errors import BadResponse, HarvestError, PeerTimeout, PeerUnreachable
from wiscat.shared.registry.addresses import address_allowed
from wiscat.shared.registry.safe_fetch import parser_message
from wiscat.shared.text import clipped
from wiscat.shared.tls import refusal
from wiscat.shared.urls import safe_url

#: Statuses retried (with backoff, or the peer's Retry-After); any other is final.
RETRYABLE = frozenset({408, 429, *range(500, 600)})

# On for the requests of a run whose peer URL someone else chose (a link the registry added):
# their connections, redirects' included, are refused to non-global addresses, as the
# registry's own fetches are (wiscat.shared.registry.safe_fetch), so that a registered URL cannot
# turn
# the harvester against the node's own network.
GUARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("wiscat_guarded", default=False)


def guarded() -> bool:
    """Whether the running task is in a :func:`global_addresses_only` block."""
    return GUARDED.get()


@contextlib.contextmanager
def global_addresses_only(on: bool) -> Iterator[None]:
    """While the block runs (and in the tasks it starts), connect only to global addresses."""
    token = GUARDED.set(on)
    try:
        yield
    finally:
        GUARDED.reset(token)


class RefusedAddress(OSError):
    pass


def socket_for(addr_info: AddrInfoType) -> socket.socket:
    family, type_, proto, _, sockaddr = addr_info
    if GUARDED.get() and not address_allowed(str(sockaddr[0])):
        raise RefusedAddress(
            f"{sockaddr[0]} is not a global address, and this link came from the registry "
            "(WISCAT_ALLOW_PRIVATE_FETCH allows it)"
        )
    return socket.socket(family=family, type=type_, proto=proto)


def window_bits(head: bytes) -> int:
    """How to inflate a compressed body that begins with ``head`` (two bytes at least): gzip,
    zlib (what "deflate" means, RFC 9110 §8.4.1.2), or raw deflate, which some servers send as
    "deflate" all the same."""
    if head[:2] == b"\x1f\x8b":
        return 31
    if head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return 15
    return -15


def retry_after(value: str | None, cap: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), cap)
    with contextlib.suppress(TypeError, ValueError, IndexError):
        when = parsedate_to_datetime(value)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return min(max((when - datetime.now(UTC)).total_seconds(), 0.0), cap)
    return None


def proxy_refused(proxy_url: str | None, shown: str, status: int) -> str:
    why = "proxy authentication required: check WISCAT_PROXY_URL's user and password"
    if status != 407:
        why = f"HTTP {status}"
    return f"the proxy {proxy_url} refused the request for {shown}: {why}"


def followed(response: aiohttp.ClientResponse) -> tuple[aiohttp.ClientResponse, ...]:
    """The redirects followed to ``response``. aiohttp lists a 3xx without Location in its own
    history (aiohttp issue 2022), though nothing was followed: it is left out."""
    return tuple(hop for hop in response.history if hop is not response)


def answered_by(response: aiohttp.ClientResponse, shown: str) -> str:
    """Who answered: the URL asked (``shown``), or where its redirects led."""
    if not followed(response):
        return shown
    return f"{safe_url(str(response.url.with_query(None)))} (redirected from {shown})"


def http_error_detail(
    params: dict[str, str], response: aiohttp.ClientResponse, attempts: int
) -> str:
    """What a failed request's reason adds to its status: the verb asked, and for a status
    retried, how often and what the peer last asked to wait."""
    detail = f", answering {params['verb']}" if "verb" in params else ""
    if response.status in RETRYABLE:
        detail += f", after {attempts} attempts"
        wait = response.headers.get("Retry-After")
        if wait:
            detail += f" (the last with Retry-After: {clipped(wait.strip(), 40)})"
    return detail


def refuse_downgrade(base_url: str, shown: str, response: aiohttp.ClientResponse) -> None:
    """A peer asked over https is not followed to plain http: what came back there would not
    surely be the peer's (anyone on the way could have written it). From http to https, as
    peers that moved to https redirect, is followed."""
    if base_url[:6].lower() != "https:":
        return
    for hop in (*followed(response), response):
        if hop.url.scheme == "http":
            target = safe_url(str(hop.url.with_query(None)))
            raise BadResponse(
                f"{shown} redirected to {target}: from https to plain http, which a harvest "
                "does not follow"
            )


def with_token(shown: str, token: str) -> str:
    return f"{shown}, resumptionToken {clipped(token, 200)!r}"


@dataclass(frozen=True)
class Failure:
    """One failed attempt of a request, classified. ``error(attempts)`` is what the request
    fails with: at once when it is ``final`` (no retry can change it), else once no attempt is
    left; until then ``problem`` is logged and the request made again, after ``delay`` seconds
    when the peer asked for a wait (Retry-After), else after the client's backoff."""

    error: Callable[[int], HarvestError]
    problem: str
    final: bool = False
    delay: float | None = None


def _timeout(exc: TimeoutError, shown: str, proxy_url: str | None) -> Failure:
    return Failure(
        lambda attempts: PeerTimeout(f"no answer from {shown} in time (after {attempts} attempts)"),
        "timeout",
    )


def _payload(exc: aiohttp.ClientPayloadError, shown: str, proxy_url: str | None) -> Failure:
    return Failure(
        lambda attempts: BadResponse(f"broken response from {shown}: {exc}"),
        f"broken payload: {exc}",
    )


def _redirects(exc: aiohttp.TooManyRedirects, shown: str, proxy_url: str | None) -> Failure:
    reason = f"{shown} redirected {len(exc.history)} times without an answer"
    return Failure(lambda attempts: BadResponse(reason), reason, final=True)


def _bad_redirect(exc: aiohttp.ClientError, shown: str, proxy_url: str | None) -> Failure:
    target = safe_url(str(getattr(exc, "url", exc)))
    reason = f"{shown} redirected to {target!r}, which is not a valid http(s) URL"
    return Failure(lambda attempts: BadResponse(reason), reason, final=True)


def _proxy_status(exc: aiohttp.ClientHttpProxyError, shown: str, proxy_url: str | None) -> Failure:
    # CONNECT (https) not answered 200
    return Failure(
        lambda attempts: PeerUnreachable(proxy_refused(proxy_url, shown, exc.status)),
        f"the proxy {proxy_url} answered CONNECT with HTTP {exc.status}",
        final=exc.status not in RETRYABLE,
    )


def _not_http(exc: aiohttp.ClientResponseError, shown: str, proxy_url: str | None) -> Failure:
    # not HTTP (a bad status line, Content-Length or chunk, headers past 8 KB)
    broken = parser_message(exc.message)
    return Failure(
        lambda attempts: BadResponse(f"broken HTTP response from {shown}: {broken}"),
        f"broken HTTP response: {broken}",
    )


def _tls(exc: aiohttp.ClientSSLError, shown: str, proxy_url: str | None) -> Failure:
    # no retry will change a certificate
    reason = f"cannot reach {shown}: {refusal(exc)}"
    return Failure(lambda attempts: PeerUnreachable(reason), reason, final=True)


def _proxy_down(
    exc: aiohttp.ClientProxyConnectionError, shown: str, proxy_url: str | None
) -> Failure:
    why = f"cannot connect to the proxy {proxy_url}: {exc.os_error}"
    return Failure(lambda attempts: PeerUnreachable(f"cannot reach {shown}: {why}"), why)


def _connection(exc: aiohttp.ClientConnectionError, shown: str, proxy_url: str | None) -> Failure:
    refused = getattr(exc, "os_error", None)
    if isinstance(refused, RefusedAddress):  # no retry will change that
        reason = f"cannot reach {shown}: {refused}"
        return Failure(lambda attempts: PeerUnreachable(reason), reason, final=True)
    return Failure(
        lambda attempts: PeerUnreachable(f"cannot reach {shown}: {exc}"), f"connection: {exc}"
    )


# How each way an attempt can fail is taken, the first match in this order (subclasses before
# their bases: aiohttp's proxy and TLS errors are connection errors too).
_CLASSIFIED: tuple[tuple[type[Exception], Callable[[Any, str, str | None], Failure]], ...] = (
    (TimeoutError, _timeout),
    (aiohttp.ClientPayloadError, _payload),
    (aiohttp.TooManyRedirects, _redirects),
    (aiohttp.RedirectClientError, _bad_redirect),
    (aiohttp.InvalidURL, _bad_redirect),
    (aiohttp.ClientHttpProxyError, _proxy_status),
    (aiohttp.ClientResponseError, _not_http),
    (aiohttp.ClientSSLError, _tls),
    (aiohttp.ClientProxyConnectionError, _proxy_down),
    (aiohttp.ClientConnectionError, _connection),
)

#: What an attempt may fail with that :func:`classify` takes; anything else is raised as it is.
CLASSIFIED: tuple[type[Exception], ...] = tuple(kind for kind, _ in _CLASSIFIED)


def classify(exc: Exception, shown: str, proxy_url: str | None) -> Failure:
    """``exc``, raised by an attempt at ``shown``, as a :class:`Failure`."""
    for kind, failure in _CLASSIFIED:
        if isinstance(exc, kind):
            return failure(exc, shown, proxy_url)
    raise TypeError(f"{type(exc).__name__} is not one of the failures classified") from exc
