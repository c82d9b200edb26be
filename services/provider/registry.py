"""The registry's HTTP interface (docs/registry.md).

- ``GET /urls``: the accepted base URLs in order of appearance, friends-container style.
- ``POST /urls`` (form field ``baseURL``): 200 accepted, 400 malformed or not a conforming
  OAI-PMH 2.0 repository, 409 present already, 413 a form over 64 KiB, 429 too many
  submissions from this client, 500 internal error, 503 this node cannot make blocks.
- ``GET /urls/form``: a small HTML form that posts to ``/urls``.
- ``GET /registry/status``, ``GET /registry/blocks?after=HASH...``, ``POST /registry/blocks``:
  block exchange between the network's nodes.
- ``GET /registry/announce?info_hash=...&peer_id=...&port=...``: any node is a BitTorrent
  tracker (BEP 3, answers compact as BEP 23 has it) for any network; bencoded answers.
- ``POST /registry/announce`` (form ``network``, ``url``, ``public_key``) and
  ``GET /registry/announce?network=NAME``: the XML tracker of wiscat's first versions, kept for
  their nodes. Both announce forms: 429 too many from this client.
"""

from __future__ import annotations

import html
import logging
import math
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from lxml import etree

from wiscat.provider.limits import RateLimiter
from wiscat.provider.openapi import NO_REGISTRY, XMLResponse, body, form, text
from wiscat.provider.state import ProviderState
from wiscat.shared.db import registry as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.registry.chain import (
    ChainError,
    InvalidBlock,
    NotAMember,
    UnknownParent,
    url_problem,
)
from wiscat.shared.registry.discovery import peers_xml, status_xml
from wiscat.shared.registry.keyfile import NETWORK_NAME, Network, load_network, load_private_key
from wiscat.shared.registry.safe_fetch import SafeFetcher
from wiscat.shared.registry.tracker import (
    TrackerError,
    failure_body,
    parse_announce_query,
    peer_root,
    reply_body,
)
from wiscat.shared.registry_node import (
    TRACKER_MEMBER_TTL,
    NodeConfig,
    RegistryNode,
    SubmitError,
)
from wiscat.shared.settings import Settings
from wiscat.shared.urls import node_root

log = logging.getLogger("wiscat.registry")

XML = "application/xml"
# the bodies' caps, kept by app.BodyLimit whatever the transfer encoding (RELIABILITY S11)
MAX_BLOCKS_BODY = 16 * 1024 * 1024
MAX_FORM_BODY = 64 * 1024


@dataclass
class RegistryState:
    """The registry's part of a provider: its pool and settings, the rate limits of its POST
    routes, and the node with its fetcher when a network key file is configured."""

    pool: Pool
    settings: Settings
    submissions: RateLimiter  # POST /urls
    announcements: RateLimiter  # POST /registry/announce
    node: RegistryNode | None = None
    fetcher: SafeFetcher | None = field(default=None, repr=False)


def load_key_files(settings: Settings) -> tuple[Network | None, Ed25519PrivateKey | None]:
    """The network's key file and this node's private key, as configured (None when not);
    :class:`KeyFileError` with the reason when one cannot be used."""
    if settings.registry_key_file is None:
        return None, None
    network = load_network(settings.registry_key_file)
    key = (
        load_private_key(settings.registry_private_key_file)
        if settings.registry_private_key_file
        else None
    )
    return network, key


async def start(app: FastAPI, provider: ProviderState) -> None:
    """Join the network of ``WISCAT_REGISTRY_KEY_FILE`` (if set) and start syncing; a node
    without one still serves as a tracker."""
    settings = provider.settings
    state = RegistryState(
        provider.pool,
        settings,
        submissions=RateLimiter(settings.registry_rate_limit_per_minute),
        announcements=RateLimiter(settings.registry_announce_rate_limit_per_minute),
    )
    network, key = load_key_files(settings)
    if network is not None:
        state.fetcher = SafeFetcher(
            allow_private=settings.allow_private_fetch,
            timeout=settings.registry_fetch_timeout_seconds,
            ports=settings.registry_fetch_ports,
            ca_file=settings.ca_file,
        )
        await state.fetcher.__aenter__()
        config = NodeConfig(
            node_url=settings.registry_node_url or node_root(settings.base_url),
            own_base_url=settings.base_url,
            own_set=settings.own_set,
            sync_seconds=settings.registry_sync_seconds,
            auto_enable_links=settings.registry_auto_enable_links,
            allow_private_peers=settings.registry_allow_private_peers,
            register_self=settings.registry_register_self,
        )
        state.node = RegistryNode(provider.pool, network, key, state.fetcher, config)
        try:
            await state.node.start()
        except BaseException:  # the provider does not start (another network's chain, say)
            await state.fetcher.close()
            raise
        log.info("registry node of network %s at %s", network.name, config.node_url)
    app.state.registry = state


async def stop(app: FastAPI) -> None:
    """Stop the registry node and close its fetcher, if it was started."""
    state: RegistryState | None = getattr(app.state, "registry", None)
    if state is None:
        return
    if state.node is not None:
        await state.node.stop()
    if state.fetcher is not None:
        await state.fetcher.close()


def _state(request: Request) -> RegistryState:
    state: RegistryState = request.app.state.registry
    return state


def _node(request: Request) -> RegistryNode:
    node = _state(request).node
    if node is None:
        raise _Refusal(404, "this node is not in a registry network (no WISCAT_REGISTRY_KEY_FILE)")
    return node


class _Refusal(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def _text(status: int, reason: str, headers: dict[str, str] | None = None) -> PlainTextResponse:
    return PlainTextResponse(reason.rstrip("\n") + "\n", status_code=status, headers=headers)


def _over_limit(request: Request, limiter: RateLimiter, what: str) -> Response | None:
    """429 with Retry-After for a client over ``limiter``'s rate (RELIABILITY S11), asked
    before the form is read; None when the request may go on."""
    wait = limiter.admit(request.client.host if request.client else "unknown")
    if wait is None:
        return None
    return _text(
        429,
        f"at most {limiter.per_minute} {what} a minute from one client",
        {"Retry-After": str(wait)},
    )


router = APIRouter(tags=["registry"])


@router.get(
    "/urls",
    summary="The registry's accepted base URLs",
    response_class=XMLResponse,
    responses={404: NO_REGISTRY},
)
async def get_urls(request: Request) -> Response:
    """Every accepted base URL in order of appearance; ``id`` is the transaction's tx-hash."""
    try:
        node = _node(request)
    except _Refusal as exc:
        return _text(exc.status, str(exc))
    root = etree.Element("BaseURLs")
    for tx in await store.accepted_urls(node.pool):
        etree.SubElement(root, "baseURL", id=tx.tx_hash).text = tx.base_url
    body = etree.tostring(root, encoding="utf-8", xml_declaration=True)
    return Response(body, media_type=XML)


@router.post(
    "/urls",
    summary="Submit a base URL to the registry",
    response_class=PlainTextResponse,
    responses={
        400: text("malformed, or not a conforming OAI-PMH 2.0 repository"),
        404: NO_REGISTRY,
        409: text("present already"),
        413: text("a form over 64 KiB"),
        429: text("too many submissions from this client"),
        500: text("internal error"),
        503: text("this node cannot make blocks"),
    },
    openapi_extra=form({"baseURL": "the repository's base URL"}, ["baseURL"]),
)
async def post_urls(request: Request) -> Response:
    """Submit a base URL (form field ``baseURL``), kept exactly as given."""
    state = _state(request)
    if refusal := _over_limit(request, state.submissions, "submissions"):
        return refusal
    try:
        node = _node(request)
        try:
            form = await request.form()
        except Exception as exc:  # python-multipart's errors have no common base class
            raise _Refusal(400, f"the form cannot be read: {exc}") from exc
        value = form.get("baseURL")
        if not isinstance(value, str):
            raise _Refusal(400, "the form field baseURL is required")
        tx = await node.submit(value)
    except _Refusal as exc:
        return _text(exc.status, str(exc))
    except SubmitError as exc:
        return _text(exc.status, str(exc))
    except Exception:
        log.exception("POST /urls failed")
        return _text(500, "internal error")
    in_chain = await node.wait_in_chain(tx, state.settings.registry_submit_wait_seconds)
    where = "in the chain" if in_chain else "waiting for its block"
    return _text(200, f"accepted {tx.base_url} (id {tx.tx_hash}; {where})")


_FORM = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Register an OAI-PMH repository</title></head>
<body>
<h1>Register an OAI-PMH repository</h1>
<p>Registry network <b>{network}</b>. The base URL is checked by calling its Identify: it must be
an OAI-PMH 2.0 repository whose Identify gives exactly this base URL. Accepted URLs are shared
with every node of the network (<a href="{root}/urls">the list</a>).</p>
<form method="post" action="{root}/urls">
<label>Base URL <input type="url" name="baseURL" size="60" required
 placeholder="https://repository.example.org/oai"></label>
<button type="submit">Register</button>
</form>
</body></html>
"""


@router.get(
    "/urls/form",
    summary="The form that submits a base URL",
    response_class=HTMLResponse,
    responses={404: NO_REGISTRY},
)
async def url_form(request: Request) -> Response:
    """The registry's simple HTML form for submitting a base URL."""
    try:
        node = _node(request)
    except _Refusal as exc:
        return _text(exc.status, str(exc))
    root = html.escape(request.scope.get("root_path", ""), quote=True)
    return HTMLResponse(
        _FORM.format(network=html.escape(node.network.name), root=root),
        # no script, style or frame: a form that posts to the registry, and nothing else
        headers={
            "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
            "X-Frame-Options": "DENY",
            "X-Content-Type-Options": "nosniff",
        },
    )


@router.get(
    "/registry/status",
    summary="The network and this node's chain tip",
    response_class=XMLResponse,
    responses={404: NO_REGISTRY},
)
async def status(request: Request) -> Response:
    """The network, its genesis block and this node's tip."""
    try:
        node = _node(request)
    except _Refusal as exc:
        return _text(exc.status, str(exc))
    tip = await store.chain_tip(node.pool)
    assert tip is not None
    return Response(
        status_xml(node.network, tip, node.public_key, node.discovery.peer_id), media_type=XML
    )


@router.get(
    "/registry/blocks",
    summary="The main chain's blocks after a known one",
    response_class=XMLResponse,
    responses={404: text("none of these blocks is on this node's chain, or no registry")},
)
async def get_blocks(
    request: Request,
    after: list[str] = Query(default=[]),
    limit: int = 500,
) -> Response:
    """The main chain after the highest of the ``after`` hashes this node holds (a locator);
    404 when it holds none of them."""
    try:
        node = _node(request)
    except _Refusal as exc:
        return _text(exc.status, str(exc))
    if not after:
        after = [node.network.genesis.hash]
    body = await node.blocks_after(after[:64], limit)
    if body is None:
        return _text(404, "none of these blocks is on this node's chain")
    return Response(body, media_type=XML)


@router.post(
    "/registry/blocks",
    summary="Take blocks pushed by a peer",
    response_class=PlainTextResponse,
    responses={
        400: text("an invalid block"),
        403: text("a block not signed by a member"),
        404: NO_REGISTRY,
        409: text("its previous block is unknown here"),
    },
    openapi_extra=body("application/xml", "blocks, as GET /registry/blocks gives them"),
)
async def post_blocks(request: Request) -> Response:
    """Blocks pushed by a peer: 200 accepted (or known), 400 invalid, 403 not signed by a member,
    409 its previous block is unknown here (this node then pulls from its peers)."""
    try:
        node = _node(request)
    except _Refusal as exc:
        return _text(exc.status, str(exc))
    body = await request.body()  # at most MAX_BLOCKS_BODY
    try:
        results = await node.receive(body)
    except NotAMember as exc:
        return _text(403, f"block refused: {exc}")
    except UnknownParent as exc:
        return _text(409, f"block not accepted yet: {exc}; pulling from the peers")
    except InvalidBlock as exc:
        return _text(400, f"block refused: {exc}")
    except ChainError as exc:  # pragma: no cover - every ChainError is one of the above
        return _text(400, f"block refused: {exc}")
    added = sum(not r.known for r in results)
    return _text(200, f"{added} block(s) added, {len(results) - added} known already")


async def _members(request: Request, network: str) -> Response:
    urls = await store.network_members(_state(request).pool, network, TRACKER_MEMBER_TTL)
    return Response(peers_xml(network, urls), media_type=XML)


@router.post(
    "/registry/announce",
    summary="Tracker: announce a node of a network",
    response_class=XMLResponse,
    responses={
        400: text("no network name, or no root URL"),
        429: text("too many announcements from this client"),
    },
    openapi_extra=form(
        {
            "network": "the network's name",
            "url": "the node's root URL",
            "public_key": "the node's public key",
        },
        ["network", "url"],
    ),
)
async def announce(request: Request) -> Response:
    """Tracker: register ``url`` as a node of ``network``; answers the network's members."""
    if refusal := _over_limit(request, _state(request).announcements, "announcements"):
        return refusal
    try:
        form = await request.form()
    except Exception as exc:  # python-multipart's errors have no common base class
        return _text(400, f"the form cannot be read: {exc}")
    network, url, key = form.get("network"), form.get("url"), form.get("public_key")
    if not isinstance(network, str) or not NETWORK_NAME.fullmatch(network):
        return _text(400, "network: a network name is required")
    if not isinstance(url, str) or url_problem(url):
        return _text(400, "url: this node's root URL (http or https) is required")
    public_key = key if isinstance(key, str) and len(key) <= 100 else None
    await store.announce(_state(request).pool, network, url, public_key, TRACKER_MEMBER_TTL)
    return await _members(request, network)


BENCODED = "text/plain"  # BEP 3 names no media type; trackers (opentracker) send text/plain


@router.get(
    "/registry/announce",
    summary="Tracker: the nodes of a network",
    response_class=XMLResponse,
    responses={
        200: {
            "description": "with info_hash: the tracker's bencoded answer (BEP 3, BEP 23), a "
            "failure reason included; with network: the XML member list of old",
            "content": {BENCODED: {"schema": {"type": "string"}}, XML: {}},
        },
        400: text("neither info_hash nor a network name"),
        429: text("too many announcements from this client"),
    },
)
async def members(request: Request, network: str | None = None) -> Response:
    """Tracker: with ``info_hash``, BitTorrent's HTTP announce (BEP 3): this node remembers
    ``http://<client address>:<port>`` for the info_hash (``event=stopped`` forgets it) and
    answers the others in the compact form (BEP 23). With ``network``: the nodes that announced
    themselves for it within the last hour, as XML (wiscat's first tracker protocol)."""
    if "info_hash" in request.query_params:
        if refusal := _over_limit(request, _state(request).announcements, "announcements"):
            return refusal
        return await _bittorrent_announce(request)
    if network is None or not NETWORK_NAME.fullmatch(network):
        return _text(400, "network: a network name is required")
    return await _members(request, network)


async def _bittorrent_announce(request: Request) -> Response:
    # BEP 3: a refusal is a 200 answer with a "failure reason"; clients read no other status
    try:
        announce = parse_announce_query(request.url.query)
    except TrackerError as exc:
        return Response(failure_body(str(exc)), media_type=BENCODED)
    pool = _state(request).pool
    name = announce.info_hash.hex()
    host = request.client.host if request.client else ""
    own = peer_root(host, announce.port)
    if announce.event == "stopped":
        await store.forget_member(pool, name, own)
        peers: list[tuple[str, int]] = []
    else:
        await store.announce(pool, name, own, None, TRACKER_MEMBER_TTL)
        urls = await store.network_members(pool, name, TRACKER_MEMBER_TTL, announce.numwant + 1)
        peers = [address for url in urls if url != own and (address := _address(url))]
    # asked to come back within the members' lifetime, or the node would be forgotten meanwhile
    ttl = int(TRACKER_MEMBER_TTL.total_seconds()) // 2
    interval = min(max(1, math.ceil(_state(request).settings.registry_sync_seconds)), ttl)
    return Response(reply_body(interval, peers[: announce.numwant]), media_type=BENCODED)


def _address(url: str) -> tuple[str, int] | None:
    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        return None
    return parts.hostname, parts.port


@router.get(
    "/registry/peers",
    summary="The registry peers this node knows",
    response_class=XMLResponse,
    responses={404: NO_REGISTRY},
)
async def peers(request: Request) -> Response:
    """The peers this node knows, with their health."""
    try:
        node = _node(request)
    except _Refusal as exc:
        return _text(exc.status, str(exc))
    return Response(
        peers_xml(node.network.name, [p.url for p in await store.all_peers(node.pool)]),
        media_type=XML,
    )
