"""``wiscat link test``: ask a link's peer what a harvest would ask it, and store nothing.

A link with a mistyped URL, set or metadataPrefix was found out at its first run, an hour later
perhaps, as a failed run or an empty "ok" one. The probe asks the peer, as the link's harvests
would (the node's proxy, CA file and address checks included), four things in turn:

1. Identify: is it an OAI-PMH 2.0 repository, and is it another node than this one;
2. ListMetadataFormats: does it offer the link's metadataPrefix;
3. ListSets: does it have the link's remote set (a link without one takes the whole catalogue);
4. ListIdentifiers: the first page of the list the link would harvest;
5. GetRecord of that page's first record: would it be stored, quarantined (not ISO 19139, no
   fileIdentifier, another identifier than the OAI one), or refused (``judge``: the harvester's
   own write, rolled back: :func:`wiscat.harvester.writes.would_refuse`)?

Each step gives a :class:`Finding`; a step that cannot be made (the peer unreachable) ends the
probe.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from wiscat.harvester.client import OAIClient
from wiscat.harvester.errors import HarvestError, reason_of
from wiscat.harvester.plan import is_this_node
from wiscat.harvester.transport import global_addresses_only
from wiscat.shared.ingest import incoming
from wiscat.shared.iso19139 import RecordError, record_from_element
from wiscat.shared.linkspec import REGISTRY_LINK_PREFIX
from wiscat.shared.model import IncomingRecord, Link
from wiscat.shared.oaipmh.dates import format_datestamp
from wiscat.shared.oaipmh.errors import NoMetadataFormats, NoRecordsMatch, NoSetHierarchy, OAIError
from wiscat.shared.oaipmh.pages import (
    HeaderItem,
    NotOAIResponse,
    PageReader,
    RecordItem,
    ResponseError,
)
from wiscat.shared.oaipmh.sets import read_metadata_formats
from wiscat.shared.settings import Settings
from wiscat.shared.urls import safe_url

MAX_SET_PAGES = 100  # ListSets pages read to find the set (a guard against endless lists)
Outcome = Literal["ok", "note", "problem"]
_PROBLEMS = (HarvestError, OAIError, ResponseError)
#: Why a harvest would refuse a record, as a finding's outcome and text (None: it would store it).
Judge = Callable[[IncomingRecord], Awaitable[tuple[Outcome, str] | None]]


@dataclass(frozen=True)
class Finding:
    step: str  # Identify, metadataPrefix, set, first page, a record
    outcome: Outcome  # a note is worth knowing but does not stop a harvest
    text: str


async def probe_link(
    client: OAIClient, settings: Settings, link: Link, judge: Judge | None = None
) -> list[Finding]:
    """What the link's peer answers to the requests its harvests would make; ``judge`` says
    whether a harvest would refuse the record fetched."""
    guarded = link.name.startswith(REGISTRY_LINK_PREFIX) and not settings.allow_private_fetch
    with global_addresses_only(guarded):
        return [finding async for finding in _steps(client, settings, link, judge)]


async def _steps(
    client: OAIClient, settings: Settings, link: Link, judge: Judge | None
) -> AsyncIterator[Finding]:
    url = link.base_url
    shown = safe_url(url)  # never a password in what is printed
    try:
        identify = await client.identify(url)
    except _PROBLEMS as exc:
        yield Finding("Identify", "problem", reason_of(exc))
        return
    if is_this_node(settings, url, identify):
        yield Finding("Identify", "problem", f"{shown} is this node's own provider")
        return
    yield Finding(
        "Identify",
        "ok",
        f"{identify.repository_name!r}, granularity {identify.granularity}, deletedRecord "
        f"{identify.deleted_record}, earliest {format_datestamp(identify.earliest_datestamp)}",
    )
    if url in client.moved:
        yield Finding(
            "Identify",
            "note",
            f"{shown} moved permanently to {client.moved[url]}: change the link with "
            f"`wiscat link set {link.name} --url {client.moved[url]}`",
        )
    elif identify.base_url != url:
        yield Finding(
            "Identify",
            "note",
            f"its baseURL is {identify.base_url}, not the link's URL: OAI-PMH §4.2 wants the "
            "URL it is reached at",
        )

    yield await _prefix(client, link)
    if link.remote_set is None:
        yield Finding("set", "ok", "none: the link harvests the whole catalogue")
    else:
        yield await _set(client, link, link.remote_set)
    page, first = await _first_page(client, link)
    yield page
    if first is not None:
        yield await _record(client, link, first, judge)


async def _prefix(client: OAIClient, link: Link) -> Finding:
    try:
        body = await client.fetch(link.base_url, {"verb": "ListMetadataFormats"})
        offered = read_metadata_formats(body)
    except NoMetadataFormats:
        offered = []
    except _PROBLEMS as exc:
        return Finding("metadataPrefix", "problem", f"ListMetadataFormats: {reason_of(exc)}")
    if link.metadata_prefix in offered:
        return Finding("metadataPrefix", "ok", f"{link.metadata_prefix} offered")
    return Finding(
        "metadataPrefix",
        "problem",
        f"{link.metadata_prefix} is not offered (offered: {', '.join(offered) or 'none'}); "
        f"change it with `wiscat link set {link.name} --prefix P`",
    )


async def _set(client: OAIClient, link: Link, wanted: str) -> Finding:
    try:
        found, seen = await client.find_set(link.base_url, wanted, MAX_SET_PAGES)
    except NoSetHierarchy:
        return Finding("set", "problem", f"the peer has no sets (noSetHierarchy), so no {wanted}")
    except _PROBLEMS as exc:
        return Finding("set", "problem", f"ListSets: {reason_of(exc)}")
    if found:
        return Finding("set", "ok", f"{wanted} listed by the peer")
    if found is None:
        return Finding("set", "note", f"{wanted} not found in {MAX_SET_PAGES} pages of ListSets")
    return Finding(
        "set",
        "problem",
        f"{wanted} is not among the peer's {seen} sets; change it with "
        f"`wiscat link set {link.name} --set S`",
    )


async def _first_page(client: OAIClient, link: Link) -> tuple[Finding, str | None]:
    """The finding on the list's first page, and the identifier of its first live record."""
    params = {"verb": "ListIdentifiers", "metadataPrefix": link.metadata_prefix}
    if link.remote_set is not None:
        params["set"] = link.remote_set
    try:
        reader = PageReader(await client.fetch(link.base_url, params))
        items = list(reader.items())
        # whole records where headers belong (OAI-PMH §4.3): a harvest takes them as records
        records = [item.header for item in items if isinstance(item, RecordItem)]
        headers = [item for item in items if isinstance(item, HeaderItem)] + records
        if reader.summary.verb != "ListIdentifiers":
            raise NotOAIResponse(f"the answer is {reader.summary.verb!r}, not ListIdentifiers")
    except NoRecordsMatch:
        return Finding("first page", "note", "the list is empty (noRecordsMatch)"), None
    except _PROBLEMS as exc:
        return Finding("first page", "problem", f"ListIdentifiers: {reason_of(exc)}"), None
    summary = reader.summary
    deleted = sum(header.deleted for header in headers)
    text = f"{len(headers)} headers ({deleted} deleted)"
    if summary.complete_list_size is not None:
        text += f" of {summary.complete_list_size:,} in the whole list"
    elif summary.resumption_token:
        text += ", more to follow"
    if headers:
        newest = max(header.datestamp_parsed for header in headers)
        text += f"; newest datestamp on it {format_datestamp(newest)}"
    live = [header.identifier for header in headers if not header.deleted]
    if records:
        text += f"; {len(records)} of them sent as whole records, where ListIdentifiers has headers"
        return Finding("first page", "note", text), (live[0] if live else None)
    return Finding("first page", "ok", text), (live[0] if live else None)


async def _record(client: OAIClient, link: Link, identifier: str, judge: Judge | None) -> Finding:
    """Whether the record ``identifier`` would be stored as a harvest reads it."""
    try:
        item = await client.get_record(link.base_url, identifier, link.metadata_prefix)
    except _PROBLEMS as exc:
        return Finding("a record", "problem", f"GetRecord of {identifier}: {reason_of(exc)}")
    if item.header.deleted:
        return Finding("a record", "note", f"{identifier} was deleted since it was listed")
    if item.metadata is None:
        return Finding("a record", "problem", f"GetRecord of {identifier} has no metadata")
    try:
        record = record_from_element(item.metadata, safe_parsed=True)
    except RecordError as exc:
        return Finding("a record", "problem", f"{identifier} would be quarantined: {exc}")
    if record.identifier != identifier:
        return Finding(
            "a record",
            "problem",
            f"{identifier} would be quarantined: its gmd:fileIdentifier is {record.identifier!r}",
        )
    if judge is not None:
        refused = await judge(incoming(record))
        if refused is not None:
            outcome, why = refused
            return Finding("a record", outcome, f"{identifier} would be refused: {why}")
    return Finding("a record", "ok", f"{identifier} is ISO 19139 and would be stored")
