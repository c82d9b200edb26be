"""Validating a new link the way both the CLI and the admin API accept it (docs/links.md)."""

from __future__ import annotations

import re
from datetime import timedelta

from wiscat.shared.model import Link, NewLink
from wiscat.shared.oaipmh.arguments import METADATA_PREFIX, SET_SPEC
from wiscat.shared.settings import UNION_SET
from wiscat.shared.text import clipped
from wiscat.shared.urls import http_url

#: The name of a link or a scheduled check (the database holds them to its characters as well;
#: a name is at most 100 of them: a key of thousands could not be indexed, and its insert failed).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: What :data:`NAME` asks, in words.
NAME_RULE = "at most 100 letters, digits, '.', '_' and '-', starting with a letter or digit"
#: How the names of the links the registry adds begin (its URLs are chosen by anyone).
REGISTRY_LINK_PREFIX = "registry-"
#: The longest set name a link files records into (the name is indexed with each identifier).
MAX_SET_SPEC = 200
#: Bounds of a link's schedule: a longer interval is a link that should be disabled instead, a
#: longer overlap re-reads a month each run, and a finer window re-reads nothing useful.
MAX_INTERVAL = timedelta(days=366)
MAX_OVERLAP = timedelta(days=30)
MAX_WINDOW_SLICES = 10_000


class LinkSpecError(ValueError):
    """A link definition that cannot work, with the reason."""


def check_base_url(url: str) -> str:
    """``url`` if it can be a peer's OAI-PMH base URL: http(s), a host, no query (§3.1.1)."""
    parts = http_url(url)
    if parts is None:
        raise LinkSpecError(f"{url!r} is not an http(s) URL")
    if parts.query or parts.fragment:
        raise LinkSpecError("the base URL must not carry a query or fragment (OAI-PMH §3.1.1)")
    return url


def check_peer_urls(source: str, peers: list[str] | tuple[str, ...]) -> None:
    """Refuse the peers of a consistency check that could only mislead: the source itself (a
    set compared with itself finds every datestamp copied) or one peer given twice."""
    seen: set[str] = set()
    for peer in peers:
        if peer == source:
            raise LinkSpecError(
                f"peer {peer} is the source itself: a set compared with itself finds every "
                "datestamp copied"
            )
        if peer in seen:
            raise LinkSpecError(f"peer {peer} is given twice")
        seen.add(peer)


def check_set_spec(value: str, option: str) -> str:
    """``value`` if it is a setSpec the protocol allows (OAI-PMH.xsd ``setSpecType``)."""
    if len(value) > MAX_SET_SPEC or not SET_SPEC.fullmatch(value):
        raise LinkSpecError(
            f"{option} {value!r} is not a set name: at most {MAX_SET_SPEC} letters, digits and "
            "-_.!~*'(), levels joined by ':' (OAI-PMH setSpec)"
        )
    return value


def set_kind(local_set: str, own_set: str) -> str:
    """The kind of a link's local set: the node's own, another GISC's, or shared."""
    if local_set == own_set:
        return "own"
    if local_set.startswith("WIS-GISC-"):
        return "remote"
    return "shared"


def build_link(
    *,
    name: str,
    url: str,
    remote_set: str | None,
    into: str | None,
    own_set: str,
    prefix: str = "iso19139",
    strategy: str = "ListRecords",
    every: timedelta = timedelta(hours=1),
    full_every: timedelta = timedelta(days=7),
    overlap: timedelta = timedelta(0),
    window_slices: int = 24,
    enabled: bool = True,
    recovery: bool = False,
    by_registry: bool = False,
    own_base_url: str | None = None,
    hints: bool = True,
) -> NewLink:
    """Check a link definition and fill in its defaults.

    ``into`` defaults to the remote set's own name (set names are kept on arrival,
    docs/links.md); a link without a remote set harvests the peer's whole catalogue and must say
    ``into`` (typically an area link into the own set). Names that begin with
    :data:`REGISTRY_LINK_PREFIX` are for the links the registry adds (``by_registry``) alone.
    A link to ``own_base_url`` (this node's) is refused: a harvest run would fail on it
    (``LinkToItself``), and here it is said at once.
    """
    if not NAME.fullmatch(name):
        raise LinkSpecError(f"link name {clipped(name, 60)!r}: {NAME_RULE}")
    if name.startswith(REGISTRY_LINK_PREFIX) and not by_registry:
        raise LinkSpecError(
            f"link name {name!r}: names beginning {REGISTRY_LINK_PREFIX!r} are kept for the "
            "links the registry adds (harvested from global addresses only)"
        )
    check_base_url(url)
    if url == own_base_url:
        raise LinkSpecError(f"{url} is this node's own provider: a link to itself harvests nothing")
    if remote_set is not None:
        check_set_spec(remote_set, "--set")
    local = into or remote_set
    if local is None:
        raise LinkSpecError("a link without --set harvests the whole catalogue: give --into")
    check_set_spec(local, "--into")
    if not METADATA_PREFIX.fullmatch(prefix):
        raise LinkSpecError(
            f"--prefix {prefix!r} is not a metadataPrefix: letters, digits and -_.!~*'()"
        )
    if local == UNION_SET:
        raise LinkSpecError(f"records cannot be filed into {UNION_SET}: it is every record")
    if recovery and local != own_set:
        raise LinkSpecError(f"a recovery link restores the own set: --into {own_set}")
    if remote_set == own_set and local == own_set and not recovery:
        # the peer's copy of the own set, harvested into it: what was deleted or changed here
        # would come back from the peer's older copy (invariants 4 and 6, docs/design.md: no loops)
        raise LinkSpecError(
            f"{own_set} is this node's own set: its copy at a peer is harvested back only by a "
            "recovery link (--recovery, usually --disabled, run by hand when the set is lost)"
        )
    if strategy not in ("ListRecords", "ListIdentifiers"):
        raise LinkSpecError("strategy is ListRecords or ListIdentifiers")
    if not timedelta(0) < every <= MAX_INTERVAL or not timedelta(0) < full_every <= MAX_INTERVAL:
        raise LinkSpecError(
            f"--every and --full-every must be positive, {MAX_INTERVAL.days}d at most"
        )
    if not timedelta(0) <= overlap <= MAX_OVERLAP:
        raise LinkSpecError(f"--overlap is 0 to {MAX_OVERLAP.days}d")
    if not 0 <= window_slices <= MAX_WINDOW_SLICES:
        raise LinkSpecError(f"--window-slices is 0 (off) to {MAX_WINDOW_SLICES}")
    return NewLink(
        name=name,
        base_url=url,
        remote_set=remote_set,
        local_set=local,
        metadata_prefix=prefix,
        strategy=strategy,
        every=every,
        full_every=full_every,
        overlap=overlap,
        window_slices=window_slices,
        enabled=enabled,
        recovery=recovery,
        hints=hints,
    )


def changed_link(
    link: Link,
    own_set: str,
    *,
    url: str | None = None,
    remote_set: str | None = None,
    prefix: str | None = None,
    strategy: str | None = None,
    every: timedelta | None = None,
    full_every: timedelta | None = None,
    overlap: timedelta | None = None,
    window_slices: int | None = None,
    own_base_url: str | None = None,
    hints: bool | None = None,
) -> NewLink:
    """``link`` with the changes given (None: unchanged; ``remote_set=""``: the peer's whole
    catalogue), checked as :func:`build_link` checks a new one. Its local set, recovery flag
    and enabled state stay, but for this:

    A link that files records under the name of the set it harvests (a GISC link: the set's
    name is kept on arrival, docs/links.md) and is given another remote set (a set name mistyped)
    files them under the new set's name; not the whole catalogue, which needs ``into``.
    (:func:`wiscat.shared.db.links.update_link` refuses it while the link has records in the
    old.)"""
    new_remote = link.remote_set if remote_set is None else (remote_set or None)
    into = link.local_set
    if new_remote != link.remote_set and link.local_set == link.remote_set:
        if new_remote is None:
            raise LinkSpecError(
                f"link {link.name} files its records under the name of the set it harvests "
                f"({link.local_set}); the peer's whole catalogue would be filed under that name: "
                "add a link for it with --into and remove this one"
            )
        into = new_remote
    return build_link(
        name=link.name,
        url=link.base_url if url is None else url,
        remote_set=new_remote,
        into=into,
        own_set=own_set,
        prefix=link.metadata_prefix if prefix is None else prefix,
        strategy=link.strategy if strategy is None else strategy,
        every=link.every if every is None else every,
        full_every=link.full_every if full_every is None else full_every,
        overlap=link.overlap if overlap is None else overlap,
        window_slices=link.window_slices if window_slices is None else window_slices,
        enabled=link.enabled,
        recovery=link.recovery,
        by_registry=link.name.startswith(REGISTRY_LINK_PREFIX),
        own_base_url=own_base_url,
        hints=link.hints if hints is None else hints,
    )
