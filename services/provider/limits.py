"""What a client can make the provider read or do (RELIABILITY S11).

- :class:`BodyLimit`, around the whole app: every request body is counted as it comes in and
  refused with 413 once it passes its route's cap, whatever its transfer encoding.
- :class:`RateLimiter`, kept on the app's state: the unauthenticated forms that make the node
  work for a stranger (``POST /urls`` fetches the URL, ``POST /registry/announce`` hands it to
  the network) are limited per client address, in memory of bounded size.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("wiscat.provider")

MINUTE = 60.0


@dataclass(frozen=True)
class BodyCap:
    """At most ``max_bytes`` of body for a request of ``method`` (None: any) to ``path`` (every
    path under it when it ends with ``/``); ``what`` names such a body in the refusal."""

    method: str | None
    path: str
    max_bytes: int
    what: str

    def covers(self, method: str, path: str) -> bool:
        if self.method is not None and method != self.method:
            return False
        return path.startswith(self.path) if self.path.endswith("/") else path == self.path


class BodyLimit:
    """Every request body capped, by the first of ``caps`` that covers the request (else by
    ``default``), before any route reads it whole: Starlette's ``Request.form()`` and
    ``body()``, and FastAPI's body parameters, read everything first, and a chunked body
    declares no length (a 180 MB form to ``/registry/announce`` was read and parsed whole).

    A Content-Length over the cap is refused before any of the body is read; otherwise the
    bytes are counted as the route receives them, and the one that passes the cap is answered
    413 at once, while the route is told the client has gone (what it answers then goes
    nowhere). The 413 closes the connection (RFC 9110 §15.5.14), which ends the upload. So
    does the answer of a route that did not read the body to its end (a 404, a 405): the
    server would otherwise read the rest, whatever its size, to keep the connection."""

    def __init__(
        self, app: ASGIApp, caps: Sequence[BodyCap], default: int, what: str = "a request body"
    ) -> None:
        self.app = app
        self.caps = tuple(caps)
        self.default = BodyCap(None, "/", default, what)

    def cap_for(self, method: str, path: str) -> BodyCap:
        return next((cap for cap in self.caps if cap.covers(method, path)), self.default)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = self.cap_for(scope["method"], scope["path"])
        if _declared_length(scope) > cap.max_bytes:
            await self._refuse(cap, scope, receive, send)
            return
        received = 0
        began = refused = False
        unread = _has_body(scope)  # True until the route received the body's end

        async def receiving() -> Message:
            nonlocal received, refused, unread
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                unread = unread and message.get("more_body", False)
                received += len(message.get("body", b""))
                if received > cap.max_bytes:
                    refused = True
                    if not began:  # a route that answers before it reads gets no 413
                        await self._refuse(cap, scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def sending(message: Message) -> None:
            nonlocal began
            if refused and not began:
                return  # the 413 was the answer
            if message["type"] == "http.response.start" and unread:
                # the route answers without reading the whole body: the connection closes
                # after the answer, else the server would read the rest (100 MB, say) and
                # throw it away to keep the connection
                message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
            began = True
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        except Exception:
            if not refused:
                raise
            # the route failed on the body cut short (ClientDisconnect, a form it could not
            # read): the 413 was the answer, and the body's end nothing worth a traceback

    async def _refuse(self, cap: BodyCap, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client") or ("unknown", 0)
        log.info(
            "refused %s %s from %s: a body over %d bytes",
            scope["method"],
            scope["path"],
            client[0],
            cap.max_bytes,
        )
        response = JSONResponse(
            {"detail": f"{cap.what} may be at most {cap.max_bytes} bytes"},
            status_code=413,
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)


_CLOSE = (b"connection", b"close")


def _has_body(scope: Scope) -> bool:
    """Whether the request has a body (RFC 9112 §6.3): a Transfer-Encoding, or a Content-Length
    other than 0."""
    return any(
        name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0")
        for name, value in scope["headers"]
    )


def _declared_length(scope: Scope) -> int:
    """The request's Content-Length, or 0 without one (chunked: the bytes are counted)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:  # the server's parser refuses such a head before it gets here
                return 0
    return 0


def client_key(host: str) -> str:
    """Whom a request counts against: its address, or for IPv6 its /64 (one host commonly
    holds a whole /64, and would otherwise have a fresh allowance per address)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host  # no address ("unknown", a Unix socket's path): one client
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class RateLimiter:
    """At most ``per_minute`` requests from one client (:func:`client_key`) in any sliding
    minute. It is kept in the process: a node of several provider processes allows that many
    per process. Its memory is bounded: at most ``max_clients`` clients are remembered, the
    least recently seen forgotten first, each with at most ``per_minute`` times."""

    def __init__(
        self,
        per_minute: int,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_minute = per_minute
        self.max_clients = max_clients
        self._clock = clock
        self._times: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        """The number of clients remembered."""
        return len(self._times)

    def admit(self, host: str) -> int | None:
        """None when a request from ``host`` is admitted (and counted); else the whole seconds
        until it would be, for Retry-After."""
        now = self._clock()
        key = client_key(host)
        times = self._times.get(key)
        if times is None:
            if len(self._times) >= self.max_clients:
                self._times.popitem(last=False)
            times = self._times[key] = deque(maxlen=self.per_minute)
        else:
            self._times.move_to_end(key)
        while times and now - times[0] >= MINUTE:
            times.popleft()
        if len(times) >= self.per_minute:
            return max(1, math.ceil(times[0] + MINUTE - now))
        times.append(now)
        return None
