"""The harvester's OAI-PMH client over aiohttp: one session per process, explicit timeouts.

Its exceptions are in :mod:`wiscat.harvester.errors`.

Retries happen only on connection errors, timeouts, 408, 429 and 5xx (with full-jitter backoff,
or the peer's ``Retry-After``, capped); any other status is final.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import aiohttp
from aiohttp.abc import AbstractResolver
from isal import isal_zlib

from wiscat.harvester.errors import (
    BadIdentify,
    BadResponse,
    MalformedRecord,
    PeerHTTPError,
    PeerUnreachable,
    ResponseTooLarge,
)
from wiscat.harvester.page_content import Page, answered_otherwise
from wiscat.harvester.pager import Pager
from wiscat.harvester.transport import (
    CLASSIFIED,
    RETRYABLE,
    Failure,
    answered_by,
    classify,
    followed,
    guarded,
    http_error_detail,
    proxy_refused,
    refuse_downgrade,
    retry_after,
    socket_for,
    window_bits,
)
from wiscat.shared.oaipmh.errors import NoRecordsMatch
from wiscat.shared.oaipmh.pages import (
    IdentifyInfo,
    MalformedResponse,
    PageReader,
    RecordItem,
    ResponseError,
    UnreadableItem,
    read_errors,
    read_identify,
)
from wiscat.shared.oaipmh.sets import read_sets_page
from wiscat.shared.proxy import Proxy
from wiscat.shared.tls import client_context
from wiscat.shared.urls import safe_url
from wiscat.shared.version import VERSION

# isal's type stubs declare its error as an instance, not a class
_INFLATE_ERROR: type[Exception] = isal_zlib.error  # type: ignore[assignment]

log = logging.getLogger("wiscat.harvester.client")

T = TypeVar("T")

# Named in the reason, so that an operator can raise the cap for a peer that sends larger pages
# (a page of 10,000 records of 9 KB is about 90 MB).
_CAP_SETTING = " (the cap is WISCAT_HARVEST_MAX_PAGE_BYTES)"


@dataclass(frozen=True)
class ClientSettings:
    """Timeouts and the guards against broken peers, as named settings."""

    connect_timeout: float = 15.0
    read_timeout: float = 120.0
    total_timeout: float = 900.0
    max_retries: int = 5
    backoff_base: float = 1.0
    backoff_cap: float = 60.0
    retry_after_cap: float = 300.0
    max_requests_per_list: int = 100_000
    max_empty_pages: int = 5
    max_decompressed_bytes: int = 64 * 1024 * 1024
    connections_per_host: int = 4
    # RELIABILITY H11 asks a redirect loop be given up within 5 hops; aiohttp's default is 10
    max_redirects: int = 5
    user_agent: str = f"wiscat-harvester/{VERSION} (OAI-PMH 2.0)"
    # the From header (RFC 9110 §10.1.2): who runs this robot, for a peer's operator to write to
    from_address: str | None = None
    ca_file: Path | None = None  # certificates trusted besides the system's (wiscat.shared.tls)
    proxy: Proxy | None = None  # the outbound proxy (wiscat.shared.proxy); None: directly


async def _left_to_caller(page: Page) -> None:
    return None


class OAIClient:
    """Talks OAI-PMH to peers through one shared :class:`aiohttp.ClientSession`."""

    def __init__(self, session: aiohttp.ClientSession, settings: ClientSettings) -> None:
        self.http = session
        self.settings = settings
        # base URL -> where it redirects permanently (301, 308), as seen by this process
        self.moved: dict[str, str] = {}

    def _note_moved(self, base_url: str, shown: str, response: aiohttp.ClientResponse) -> None:
        """Warn, once a process, that ``base_url`` redirects permanently: its links still work,
        one round trip more a request, until the operator points them at the new URL (never
        done here: a redirect is not the peer's operator's word)."""
        hops = followed(response)
        first = hops[0]
        if first.status not in (301, 308) or base_url in self.moved:
            return
        landed = (hops[1] if len(hops) > 1 else response).url
        target = safe_url(str(landed.with_query(None)))
        self.moved[base_url] = target
        log.warning(
            "%s moved permanently to %s (HTTP %d): every request to it is redirected; point "
            "its links at the new URL (wiscat link set NAME --url %s)",
            shown,
            target,
            first.status,
            target,
        )

    @staticmethod
    def session(
        settings: ClientSettings, resolver: AbstractResolver | None = None
    ) -> aiohttp.ClientSession:
        """The process's one session: timeouts, per-host connection limit, no auto-decompression
        (we decompress ourselves, under a cap); ``resolver`` None is the system's."""
        return aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(
                total=settings.total_timeout,
                sock_connect=settings.connect_timeout,
                sock_read=settings.read_timeout,
            ),
            connector=aiohttp.TCPConnector(
                limit=0,
                limit_per_host=settings.connections_per_host,
                socket_factory=socket_for,
                ssl=client_context(settings.ca_file),
                resolver=resolver,
            ),
            auto_decompress=False,
            headers={"User-Agent": settings.user_agent}
            | ({"From": settings.from_address} if settings.from_address else {}),
        )

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        cap = self.settings.max_decompressed_bytes
        encoding = response.headers.get("Content-Encoding", "identity").lower().strip()
        compressed = encoding in ("gzip", "x-gzip", "deflate")
        if not compressed and encoding not in ("identity", ""):
            raise BadResponse(f"unsupported Content-Encoding {encoding!r}")
        decompressor = None
        head = b""
        parts: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(256 * 1024):
            if not compressed:
                data = chunk
            else:
                if decompressor is None:
                    # the stream's framing is told by its first two bytes; ISA-L inflates pages
                    # about twice as fast as zlib
                    head += chunk
                    if len(head) < 2:
                        continue
                    decompressor = isal_zlib.decompressobj(window_bits(head))
                    chunk, head = head, b""
                try:
                    data = decompressor.decompress(chunk, cap - size + 1)
                except _INFLATE_ERROR as exc:
                    raise BadResponse(f"broken {encoding} stream: {exc}") from exc
                if decompressor.unconsumed_tail:
                    raise ResponseTooLarge(
                        f"response from {response.url.host} exceeds {cap} bytes decompressed"
                        f"{_CAP_SETTING}"
                    )
            size += len(data)
            if size > cap:
                raise ResponseTooLarge(
                    f"response from {response.url.host} exceeds {cap} bytes"
                    + (" decompressed" if decompressor else "")
                    + _CAP_SETTING
                )
            parts.append(data)
        if decompressor is None and head:  # one byte: no stream at all
            raise BadResponse(f"broken {encoding} stream: {len(head)} byte")
        if decompressor is not None:
            parts.append(decompressor.flush())
        return b"".join(parts)

    async def fetch(self, base_url: str, params: dict[str, str]) -> bytes:
        """GET ``base_url`` with ``params``, retrying what is worth retrying; return the body."""
        settings = self.settings
        shown = safe_url(base_url)
        # a link the registry added connects directly, where its addresses are checked
        proxy = None if settings.proxy is None or guarded() else settings.proxy
        proxy_url = proxy.for_url(base_url) if proxy else None
        # identity listed too (q > 0), for a peer that cannot compress (RELIABILITY H22)
        headers = {"Accept-Encoding": "gzip, deflate, identity;q=0.5"}
        if proxy and proxy_url and base_url[:5].lower() == "http:":
            # aiohttp sends proxy_headers with a CONNECT (https) only; a plain request to the
            # proxy carries them itself (aiohttp drops them at a redirect to another origin)
            headers.update(proxy.headers)
        attempt = 0
        while True:
            attempt += 1
            try:
                outcome = await self._attempt(base_url, shown, params, headers, proxy, proxy_url)
            except CLASSIFIED as exc:
                failure = classify(exc, shown, proxy_url)
                if failure.final or attempt > settings.max_retries:
                    raise failure.error(attempt) from exc
            else:
                if isinstance(outcome, bytes):
                    return outcome
                failure = outcome
                if failure.final or attempt > settings.max_retries:
                    raise failure.error(attempt)
            delay = failure.delay
            if delay is None:
                # full jitter: uniform in [0, min(cap, base * 2^attempt)]
                delay = random.uniform(
                    0, min(settings.backoff_cap, settings.backoff_base * 2 ** (attempt - 1))
                )
            log.warning(
                "%s from %s (attempt %d of %d): retrying in %.1f s",
                failure.problem,
                shown,
                attempt,
                settings.max_retries + 1,
                delay,
            )
            await asyncio.sleep(delay)

    async def _attempt(
        self,
        base_url: str,
        shown: str,
        params: dict[str, str],
        headers: dict[str, str],
        proxy: Proxy | None,
        proxy_url: str | None,
    ) -> bytes | Failure:
        """One GET: the body of a 200 (or of an OAI-PMH answer sent with another status), or
        the failure a status is; what the connection fails with is raised."""
        async with self.http.get(
            base_url,
            params=params,
            headers=headers,
            allow_redirects=True,
            max_redirects=self.settings.max_redirects,
            proxy=proxy_url,
            proxy_headers=proxy.headers if proxy and proxy_url else None,
        ) as response:
            if followed(response):
                refuse_downgrade(base_url, shown, response)
                self._note_moved(base_url, shown, response)
            if response.status == 200:
                return await self._read(response)
            body = await self._read(response)
        errors = read_errors(body)
        if errors and isinstance(errors[0], NoRecordsMatch):
            # some peers send noRecordsMatch with 404: it is still an empty list
            return body
        if errors:
            # e.g. an OAI-PMH error sent with HTTP 422: the OAI error is the answer
            raise errors[0]
        status = response.status
        if status == 407 and proxy_url:
            reason = proxy_refused(proxy_url, shown, status)
            return Failure(lambda attempts: PeerUnreachable(reason), reason, final=True)
        return Failure(
            lambda attempts: PeerHTTPError(
                status, answered_by(response, shown), http_error_detail(params, response, attempts)
            ),
            f"HTTP {status}",
            final=status not in RETRYABLE,
            delay=retry_after(response.headers.get("Retry-After"), self.settings.retry_after_cap),
        )

    async def identify(self, base_url: str) -> IdentifyInfo:
        """The peer's Identify: granularity, earliestDatestamp, deletedRecord, compression."""
        body = await self.fetch(base_url, {"verb": "Identify"})
        try:
            return read_identify(body)
        except ResponseError as exc:
            raise BadIdentify(f"{exc} (Identify of {safe_url(base_url)})") from exc

    async def list_pages(
        self,
        base_url: str,
        verb: str,
        *,
        metadata_prefix: str,
        set_spec: str | None = None,
        from_: datetime | None = None,
        until: datetime | None = None,
        day_granularity: bool = False,
    ) -> AsyncIterator[Page]:
        """Every page of a list, following resumptionTokens, for the caller to read (the page's
        items, then its summary). noRecordsMatch is an empty, complete list.

        While the caller reads a page, the next one is already asked for (see
        :meth:`read_pages`); read the items off the event loop (in a thread) to let that
        request run meanwhile.
        """
        async for page, _ in self.read_pages(
            base_url,
            verb,
            _left_to_caller,
            metadata_prefix=metadata_prefix,
            set_spec=set_spec,
            from_=from_,
            until=until,
            day_granularity=day_granularity,
        ):
            yield page

    def read_pages(
        self,
        base_url: str,
        verb: str,
        read: Callable[[Page], Awaitable[T]],
        *,
        metadata_prefix: str,
        set_spec: str | None = None,
        from_: datetime | None = None,
        until: datetime | None = None,
        day_granularity: bool = False,
        ahead: int = 1,
    ) -> AsyncIterator[tuple[Page, T]]:
        """Every page of a list with what ``read`` made of it, in list order, up to ``ahead``
        pages asked for and read ahead of the caller (:class:`wiscat.harvester.pager.Pager`)."""
        pager = Pager(
            self.fetch,
            base_url,
            verb,
            read,
            metadata_prefix=metadata_prefix,
            set_spec=set_spec,
            from_=from_,
            until=until,
            day_granularity=day_granularity,
            ahead=ahead,
            max_requests=self.settings.max_requests_per_list,
            max_empty_pages=self.settings.max_empty_pages,
        )
        return pager.pages()

    async def find_set(self, base_url: str, wanted: str, max_pages: int) -> tuple[bool | None, int]:
        """Whether the ListSets of ``base_url`` names ``wanted`` (None: not within ``max_pages``
        pages), and how many sets it listed meanwhile; ``noSetHierarchy`` is raised."""
        params = {"verb": "ListSets"}
        seen = 0
        for _ in range(max_pages):
            page = read_sets_page(await self.fetch(base_url, params))
            seen += len(page.set_specs)
            if wanted in page.set_specs:
                return True, seen
            if page.resumption_token is None:
                return False, seen
            params = {"verb": "ListSets", "resumptionToken": page.resumption_token}
        return None, seen

    async def get_record(self, base_url: str, identifier: str, metadata_prefix: str) -> RecordItem:
        """One record by GetRecord (the ListIdentifiers + GetRecord strategy)."""
        body = await self.fetch(
            base_url,
            {"verb": "GetRecord", "identifier": identifier, "metadataPrefix": metadata_prefix},
        )
        url = safe_url(base_url)
        reader = PageReader(body)
        try:
            for item in reader.items():
                if reader.summary.verb != "GetRecord":
                    raise answered_otherwise("GetRecord", url, reader.summary.verb)
                if isinstance(item, RecordItem):
                    return item
                if isinstance(item, UnreadableItem):  # the record's fault, as a malformed one
                    raise MalformedRecord(f"{item.reason} (from {url})", body)
        except MalformedResponse as exc:
            raise MalformedRecord(f"{exc} (from {url})", body) from exc
        except ResponseError as exc:
            raise BadResponse(f"{exc} (from {url})") from exc
        raise BadResponse(f"GetRecord of {identifier!r} from {url} held no record")
