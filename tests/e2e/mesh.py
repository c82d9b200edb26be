"""A mesh of real nodes on one machine, for the convergence scenarios (issue: a GISC mesh).

Each node is one ``wiscat run`` process (provider and harvester) over its own database in one
PostgreSQL server, with its provider on its own loopback port. The harness drives the nodes only
through HTTP (records through the admin API, links through the admin API, runs through "harvest
now") and the ``wiscat`` command; it reads each node's database only to compare catalogues.

A *round* asks every link of every node (or the ones given, in the order given) to run once and
waits until each has finished. With a settle window, a round first waits until the last write (a
record put or deleted, or stored by a harvest) is listable, as rounds spaced by the nodes'
schedules would.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp

from tests.e2e.nodes import Node
from tests.support.pg import clone_template, drop_database
from wiscat.shared.db.pool import connect
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record

# catalogue entry: identifier -> (content hash or None for a tombstone, live sets, deleted)
Entry = tuple[bytes | None, frozenset[str], bool]


def record(n: int, centre: str, version: int = 0, md: datetime | None = None) -> tuple[str, bytes]:
    """A generated record: its identifier and bytes."""
    data = generate_record(n, centre=centre, version=version, md_datestamp=md)
    return parse_record(data).identifier, data


def expected(
    n: int, centre: str, set_spec: str, version: int = 0, md: datetime | None = None
) -> tuple[str, Entry]:
    """The catalogue entry of a generated record held live in ``set_spec``: its identifier and
    (content hash, sets, deleted), to compare with :meth:`Mesh.catalogue`."""
    parsed = parse_record(generate_record(n, centre=centre, version=version, md_datestamp=md))
    return parsed.identifier, (parsed.content_hash, frozenset({set_spec}), False)


TOMBSTONE: Entry = (None, frozenset(), True)  # a deletion, as catalogue() shows it


@dataclass
class MeshNode(Node):
    links: list[str] = field(default_factory=list)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.provider_port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer token-{self.name}"}


class Mesh:
    def __init__(
        self, template_url: str, http: aiohttp.ClientSession, *, settle: float = 0.0
    ) -> None:
        """``settle``: the nodes' settle window (0, the default, shows writes at once; with a
        window, rounds wait until the last write is listable)."""
        self.template_url = template_url
        self.http = http
        self.settle = settle
        self.last_write = 0.0
        self.nodes: dict[str, MeshNode] = {}

    async def add_node(self, name: str, **env: str) -> MeshNode:
        url = await clone_template(self.template_url)
        node = MeshNode(name, url)
        node.extra["WISCAT_SETTLE_SECONDS"] = str(self.settle)
        node.extra.update(env)
        self.nodes[name] = node
        return node

    async def start(self, *names: str) -> None:
        chosen = [self.nodes[n] for n in names] if names else list(self.nodes.values())
        await asyncio.gather(*(n.start("run", f"{n.root}/readyz") for n in chosen))

    async def stop(self, *names: str) -> None:
        chosen = [self.nodes[n] for n in names] if names else list(self.nodes.values())
        codes = await asyncio.gather(*(n.stop() for n in chosen))
        for node, node_codes in zip(chosen, codes, strict=True):
            assert all(code == 0 for code in node_codes), f"{node.name} stopped with {node_codes}"

    async def close(self) -> None:
        for node in self.nodes.values():
            await node.stop()
        for node in self.nodes.values():
            await drop_database(self.template_url, node.database_url)

    # -- driving the nodes over HTTP ------------------------------------------------------------

    async def _call(self, node: MeshNode, method: str, path: str, **kwargs: Any) -> Any:
        headers = {**node.headers, **kwargs.pop("headers", {})}
        async with self.http.request(
            method, node.root + path, headers=headers, **kwargs
        ) as response:
            body = await response.json()
            if response.status >= 400:
                raise AssertionError(f"{method} {path} at {node.name}: {response.status} {body}")
            return body

    async def link(
        self,
        node: str,
        name: str,
        peer: str,
        set_spec: str | None,
        *,
        into: str | None = None,
        wait: bool = True,
        url: str | None = None,
        window_slices: int | None = 0,
        **options: Any,
    ) -> dict[str, Any] | None:
        """A link of ``node`` to ``peer``'s provider (no rolling window, hourly: the harness runs
        the rounds; ``window_slices=None``, the node's default window), or to ``url`` (a proxy
        in front of it, say); ``options``, the admin API's other fields of a link. A new link
        is due at once: with ``wait`` this returns that first run, once finished, so that no
        run of the node's own schedule overlaps the harness's rounds."""
        body: dict[str, Any] = {
            "name": name,
            "url": url or self.nodes[peer].oai,
            "set": set_spec,
            "into": into,
        }
        if window_slices is not None:
            body["window_slices"] = window_slices
        body.update(options)
        await self._call(self.nodes[node], "POST", "/admin/links", json=body)
        if not options.get("enabled", True):
            return None  # never scheduled, and never part of a round
        self.nodes[node].links.append(name)
        return await self.first_run(node, name) if wait else None

    async def first_run(self, node: str, link: str) -> dict[str, Any]:
        """The link's first run (the one a new link gets at once), once finished."""
        return await self._next_run(node, link, 0)

    async def move_link(self, node: str, name: str, peer: str, set_spec: str) -> dict[str, Any]:
        """Point a link at another peer with ``wiscat link set``: its HWM is reset and it falls
        due at once; returns the (full) run the node's harvester then makes."""
        last = await self._last_run(node, name)
        await self.nodes[node].wiscat(
            "link", "set", name, "--url", self.nodes[peer].oai, "--set", set_spec
        )
        return await self._next_run(node, name, last)

    async def _last_run(self, node: str, link: str) -> int:
        runs = await self._call(
            self.nodes[node], "GET", "/admin/runs", params={"link": link, "limit": 1}
        )
        return int(runs[0]["id"]) if runs else 0

    async def _next_run(self, node: str, link: str, after: int) -> dict[str, Any]:
        for _ in range(600):
            runs = await self._call(
                self.nodes[node], "GET", "/admin/runs", params={"link": link, "limit": 1}
            )
            if runs and runs[0]["id"] > after and runs[0]["status"] != "running":
                run = dict(runs[0])
                if run["added"] or run["updated"] or run["deleted"]:
                    # a harvest wrote: what it wrote is listable once past the settle window
                    self.last_write = time.monotonic()
                return run
            await asyncio.sleep(0.05)
        raise AssertionError(f"the run of {link} at {node} did not finish")

    async def put(
        self, node: str, n: int, centre: str, version: int = 0, md: datetime | None = None
    ) -> str:
        identifier, data = record(n, centre, version, md)
        self.last_write = time.monotonic()
        await self._call(
            self.nodes[node],
            "PUT",
            f"/admin/records/{identifier}",
            data=data,
            headers={"Content-Type": "application/xml"},
        )
        return identifier

    async def delete(self, node: str, identifier: str) -> None:
        self.last_write = time.monotonic()
        await self._call(self.nodes[node], "DELETE", f"/admin/records/{identifier}")

    async def harvest(self, node: str, link: str) -> dict[str, Any]:
        """Run one link now (the admin "harvest now") and wait for its run to finish."""
        last = await self._last_run(node, link)
        await self._call(self.nodes[node], "POST", f"/admin/links/{link}/harvest")
        return await self._next_run(node, link, last)

    async def round(
        self,
        order: Iterable[tuple[str, str]] | None = None,
        *,
        concurrent: bool = False,
        shuffle: random.Random | None = None,
    ) -> list[dict[str, Any]]:
        """Run every link once (``order``: (node, link) pairs; default all, node by node)."""
        await self.settled()
        pairs = list(order) if order is not None else self.all_links()
        if shuffle is not None:
            shuffle.shuffle(pairs)
        if concurrent:
            runs = list(await asyncio.gather(*(self.harvest(n, link) for n, link in pairs)))
        else:
            runs = [await self.harvest(n, link) for n, link in pairs]
        for (node, link), run in zip(pairs, runs, strict=True):
            assert run["status"] == "ok", f"{node}/{link}: {run}"
        return runs

    async def settled(self) -> None:
        """Wait until the last write (put, delete, or a harvest that stored something) is
        listable: past the settle window and its whole second."""
        if self.settle:
            wait = self.last_write + self.settle + 1.05 - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)

    def all_links(self) -> list[tuple[str, str]]:
        return [(node.name, link) for node in self.nodes.values() for link in node.links]

    # -- reading the outcome ----------------------------------------------------------------------

    async def catalogue(self, node: str) -> dict[str, Entry]:
        conn = await connect(self.nodes[node].database_url)
        try:
            rows = await conn.fetch(
                "select r.identifier, r.content_hash, r.deleted, "
                "coalesce(array_agg(m.set_spec) filter (where not m.deleted), '{}') as sets "
                "from records r left join set_members m using (identifier) "
                "group by r.identifier, r.content_hash, r.deleted"
            )
        finally:
            await conn.close()
        return {
            row["identifier"]: (
                None if row["deleted"] else row["content_hash"],
                frozenset(row["sets"]),
                row["deleted"],
            )
            for row in rows
        }

    async def datestamps(self, node: str) -> dict[tuple[str, str], datetime]:
        conn = await connect(self.nodes[node].database_url)
        try:
            rows = await conn.fetch("select set_spec, identifier, datestamp from set_members")
        finally:
            await conn.close()
        return {(row["set_spec"], row["identifier"]): row["datestamp"] for row in rows}

    async def high_water_marks(self, node: str) -> dict[str, datetime | None]:
        """Each link of ``node``: its high-water mark."""
        conn = await connect(self.nodes[node].database_url)
        try:
            rows = await conn.fetch("select name, high_water_mark from links")
        finally:
            await conn.close()
        return {row["name"]: row["high_water_mark"] for row in rows}

    async def catalogues(self) -> dict[str, dict[str, Entry]]:
        return {name: await self.catalogue(name) for name in self.nodes}

    async def assert_converged(self, *names: str) -> dict[str, Entry]:
        """Every node (or those named) holds exactly the same catalogue; returns it."""
        chosen = list(names) or list(self.nodes)
        found = {name: await self.catalogue(name) for name in chosen}
        first = found[chosen[0]]
        for name in chosen[1:]:
            assert found[name] == first, _difference(chosen[0], first, name, found[name])
        return first


class Writers:
    """Writers at nodes, each adding, revising and deleting records of its node's centre through
    the admin API at random, until :attr:`stop` is set; they keep what they wrote, so that
    :meth:`wanted` says what every node must end with."""

    def __init__(self, mesh: Mesh, rng: random.Random, pause: float = 0.05) -> None:
        """``pause``: the longest wait between two writes of one writer."""
        self.mesh, self.rng, self.pause = mesh, rng, pause
        self.versions: dict[str, dict[int, int]] = {}  # record number -> its latest version
        self.live: dict[str, list[str]] = {}  # identifiers not deleted
        self.stop = asyncio.Event()

    async def write(self, name: str) -> None:
        versions = self.versions.setdefault(name, {})
        live = self.live.setdefault(name, [])
        while not self.stop.is_set():
            choice = self.rng.random()
            if choice < 0.5 or not versions:
                n = 100 + len(versions)
                versions[n] = 0
                live.append(await self.mesh.put(name, n, name.lower()))
            elif choice < 0.8 or not live:
                n = self.rng.choice(list(versions))
                versions[n] += 1
                identifier = await self.mesh.put(name, n, name.lower(), version=versions[n])
                if identifier not in live:
                    live.append(identifier)  # a revision brings a deleted record back
            else:
                await self.mesh.delete(name, live.pop(self.rng.randrange(len(live))))
            await asyncio.sleep(self.rng.uniform(0, self.pause))

    def wanted(self, name: str, set_spec: str) -> dict[str, Entry]:
        """The catalogue entries of what the writer at ``name`` wrote, in ``set_spec``."""
        entries = {}
        for n, version in self.versions.get(name, {}).items():
            identifier, entry = expected(n, name.lower(), set_spec, version=version)
            entries[identifier] = entry if identifier in self.live[name] else TOMBSTONE
        return entries


@dataclass(frozen=True)
class Drift:
    """How a node's catalogue differs from the one wanted, by identifier."""

    missing: list[str]  # wanted, absent
    extra: list[str]  # present, not wanted
    outdated: list[str]  # present with another content hash, deleted flag or sets

    def __str__(self) -> str:
        kinds = vars(self).items()
        counts = ", ".join(f"{len(ids)} {kind}" for kind, ids in kinds)
        named = [f"{kind} {ids[0]}" for kind, ids in kinds if ids]
        return counts + (f" (first {', '.join(named)})" if named else "")


def drift(wanted: dict[str, Entry], found: dict[str, Entry]) -> Drift:
    """What ``found`` misses, has over and holds otherwise than ``wanted``."""
    return Drift(
        missing=sorted(set(wanted) - set(found)),
        extra=sorted(set(found) - set(wanted)),
        outdated=sorted(i for i in set(wanted) & set(found) if wanted[i] != found[i]),
    )


def _difference(a: str, left: dict[str, Entry], b: str, right: dict[str, Entry]) -> str:
    lines = [f"{a} and {b} differ:"]
    for identifier in sorted(set(left) | set(right)):
        if left.get(identifier) != right.get(identifier):
            mine, theirs = _show(left.get(identifier)), _show(right.get(identifier))
            lines.append(f"  {identifier}: {a}={mine} {b}={theirs}")
    return "\n".join(lines[:40])


def _show(entry: Entry | None) -> str:
    if entry is None:
        return "absent"
    content, sets, deleted = entry
    return f"({'deleted' if deleted else content.hex()[:8] if content else '-'}, {sorted(sets)})"
