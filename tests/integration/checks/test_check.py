"""The consistency checker against real nodes built to show each category (docs/checks.md)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from tests.integration.checks.nodes import T0, T_OLD, Mesh, check, generated_id
from tests.support import factories
from tests.support.harvest_pair import SOURCE_SET, Pair, add_link, run
from tests.support.servers import loopback_socket, running_provider, serving

FIXTURES = Path(__file__).parents[2] / "data" / "oai"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def found(peer: dict[str, object], category: str) -> set[str]:
    items = peer["items"][category]  # type: ignore[index]
    return {item["identifier"] for item in items}  # type: ignore[union-attr]


async def test_each_category_with_its_exact_identifiers(mesh: Mesh) -> None:
    """D11: the check reports each kind of difference with its identifiers."""
    ids = mesh.ids
    peers = [
        mesh.good.oai,
        mesh.bad.oai,
        mesh.duplicating,
        mesh.failing,
        mesh.unreachable,
    ]
    report = await check(peers, mesh.source.oai, sample=100)
    assert report["outcome"] == "inconsistent"
    source = report["source"]
    assert (source["status"], source["live"], source["deleted"]) == ("ok", 28, 2)  # type: ignore[index]
    good, bad, duplicating, failing, unreachable = report["peers"]  # type: ignore[misc]

    assert good["status"] == "ok"
    # record 6 was bumped at the source, and the good peer took it again later (T_LATE)
    assert good["counts"] == {
        "missing": 0,
        "extra": 0,
        "outdated": 0,
        "copied_datestamp": 0,
        "duplicates": 0,
        "altered": 0,
        "datestamp_only": 0,
    }
    assert good["sampled"] == 28

    assert bad["status"] == "ok"
    assert found(bad, "missing") == {ids[0], ids[1], ids[2]}
    assert found(bad, "extra") == {ids[28], generated_id(99)}
    assert found(bad, "outdated") == {ids[3], ids[6]}
    assert found(bad, "copied_datestamp") == {ids[4]}
    assert found(bad, "duplicates") == set()
    assert found(bad, "altered") == {ids[5]}
    assert found(bad, "datestamp_only") == {ids[6]}
    assert bad["sampled"] == 25  # live on both sides: 3..27
    outdated = {i["identifier"]: i for i in bad["items"]["outdated"]}
    assert outdated[ids[3]]["source_datestamp"] == T0
    assert outdated[ids[3]]["peer_datestamp"] == T_OLD

    assert duplicating["status"] == "ok"
    assert found(duplicating, "duplicates") == {ids[7]}
    assert duplicating["counts"]["duplicates"] == 1
    # the newer of the two headers counts: record 7 is in step, nothing else is wrong
    assert sum(duplicating["counts"].values()) == 1

    assert failing["status"] == "failed"
    assert "HTTP 500" in failing["reason"]
    assert failing["counts"] == {}
    assert unreachable["status"] == "failed"
    assert "cannot reach" in unreachable["reason"]


async def test_consistent_and_unchecked_outcomes(mesh: Mesh) -> None:
    consistent = await check([mesh.good.oai], mesh.source.oai)
    assert consistent["outcome"] == "consistent"
    # the source itself cannot be listed: nothing could be checked
    unchecked = await check([mesh.good.oai], mesh.failing)
    assert unchecked["outcome"] == "unchecked"
    assert unchecked["source"]["status"] == "failed"  # type: ignore[index]
    # every peer failing is "could not check" too
    none_listed = await check([mesh.failing, mesh.unreachable], mesh.source.oai)
    assert none_listed["outcome"] == "unchecked"
    # one peer failing, the other in step: not consistent (exit 1), and the other is compared
    partly = await check([mesh.good.oai, mesh.failing], mesh.source.oai)
    assert partly["outcome"] == "inconsistent"
    good, failing = partly["peers"]  # type: ignore[misc]
    assert (good["status"], sum(good["counts"].values())) == ("ok", 0)
    assert failing["status"] == "failed"


def headers_of(list_records: bytes) -> bytes:
    """A ListRecords fixture as the ListIdentifiers page that lists its headers (the checker
    asks for ListIdentifiers, and a page that answers another verb fails for that reason)."""
    body = re.sub(rb"<metadata>.*?</metadata>", b"", list_records, flags=re.DOTALL)
    body = re.sub(rb"</?record>", b"", body)
    return body.replace(b"ListRecords>", b"ListIdentifiers>")


@contextlib.asynccontextmanager
async def silent_peer() -> AsyncIterator[str]:
    """A peer that accepts connections and never answers."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes
        writer.close()

    sock = loopback_socket()
    server = await asyncio.start_server(hold, sock=sock)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/oai"
    finally:
        server.close()
        await server.wait_closed()


async def test_each_peer_that_cannot_be_checked_says_why(mesh: Mesh) -> None:
    async with (
        serving(fixture("error-cannotDisseminateFormat.xml")) as oai_error,
        serving(fixture("not-oai-html-error.html"), content_type="text/html") as html,
        serving(headers_of(fixture("malformed-truncated.xml"))) as truncated,
        serving(headers_of(fixture("ListRecords-unreadable-headers.xml"))) as undated,
        serving(fixture("ListRecords-page1.xml")) as records,
        silent_peer() as silent,
    ):
        report = await check(
            [oai_error, mesh.good.oai, html, truncated, undated, records, silent],
            mesh.source.oai,
            timeout=1,
        )
    assert report["outcome"] == "inconsistent"
    reasons = {peer["url"]: peer["reason"] for peer in report["peers"]}  # type: ignore[attr-defined]
    assert reasons == {
        oai_error: "OAI-PMH error cannotDisseminateFormat: iso19115 is not supported",
        mesh.good.oai: None,
        html: f"the peer answered with an HTML page, not OAI-PMH XML (from {html})",
        truncated: reasons[truncated],  # libxml2's words, below
        # a list with a header that cannot be read is not a list the checker can call complete
        undated: f"a header whose datestamp '2024-02-30T08:00:00Z' is no date (from {undated})",
        # its records' headers were compared as if listed
        records: f"a ListIdentifiers request to {records} was answered with 'ListRecords'",
        silent: f"no answer from {silent} in time (after 1 attempts)",
    }
    assert reasons[truncated].startswith("not well-formed XML: Premature end of data")
    assert reasons[truncated].endswith(f"(from {truncated})")
    assert "<string>" not in reasons[truncated]  # lxml's own suffix, which names no real place
    good = report["peers"][1]  # type: ignore[index]
    assert (good["status"], sum(good["counts"].values())) == ("ok", 0)


async def test_a_set_the_source_does_not_have_cannot_be_checked(mesh: Mesh) -> None:
    # a mistyped set name: the source and the peer list nothing, which is no proof of anything
    report = await check([mesh.good.oai], mesh.source.oai, set_spec="WIS-GISC-TSET")
    assert report["outcome"] == "unchecked"
    source = report["source"]
    assert (source["status"], source["reason"]) == (  # type: ignore[index]
        "failed",
        "the source has no set 'WIS-GISC-TSET' (it lists no identifier in it, and its ListSets "
        "does not name it)",
    )

    # a source whose set exists (named on the second page of its ListSets) and is empty
    async def empty_set(request: web.Request) -> bytes:
        if request.query.get("resumptionToken") == "sets-2":
            return fixture("ListSets-page2.xml")
        if request.query.get("verb") == "ListSets":
            return fixture("ListSets-page1.xml")
        return fixture("error-noRecordsMatch.xml")

    async with serving(b"", pages=empty_set) as source_url:
        report = await check([mesh.good.oai], source_url)
    assert report["outcome"] == "inconsistent"
    assert report["source"]["status"] == "ok"  # type: ignore[index]
    (good,) = report["peers"]  # type: ignore[misc]
    assert found(good, "extra") == set(mesh.ids[:28])  # every record the source no longer has


async def test_d11_drift_is_reported_exactly_and_a_full_reharvest_repairs_what_its_list_shows(
    pair: Pair,
) -> None:
    """D11: a sink that lost 1 % of its records (2 of 200), holds 0.5 % stale identifiers the
    source never had (1) and missed a deletion whose tombstone the source still lists: the
    check names exactly these. A full re-harvest under the mass-deletion breaker's thresholds
    (H19) brings back the lost records and applies the missed deletion; the stale identifiers
    stay and the check still names them, and only them. Rule: wiscat deletes a harvested record
    only on a deleted header of its source, never because a list did not name it (docs/
    checks.md)."""
    ids = await factories.load_records(pair.source, SOURCE_SET, range(200), centre="dr")
    for table in ("records", "set_members"):  # written an hour ago: no datestamp is "copied"
        await factories.backdate(
            pair.source, f"update {table} set datestamp = datestamp - interval '1 hour'"
        )
    await add_link(pair)
    assert (await run(pair)).status == "ok"
    lost, missed_deletion = ids[50:200:75], ids[7]
    await pair.sink.execute("delete from records where identifier = any($1)", lost)
    stale = await factories.load_records(pair.sink, SOURCE_SET, [900], centre="st")
    await factories.delete(pair.source, SOURCE_SET, [missed_deletion])

    database_url = str(pair.ctx.settings.database_url)
    async with running_provider(database_url, gisc_name="SINK") as sink:
        report = await check([sink.oai], pair.provider.oai, set_spec=SOURCE_SET)
        [before] = report["peers"]  # type: ignore[misc]
        repair = await run(pair, full=True)
        assert (repair.mode, repair.status) == ("full", "ok"), repair.summary()
        assert (repair.counts["added"], repair.counts["deleted"]) == (len(lost), 1)
        report = await check([sink.oai], pair.provider.oai, set_spec=SOURCE_SET)
        [after] = report["peers"]  # type: ignore[misc]
    assert before["status"] == "ok"
    assert {c: found(before, c) for c in before["counts"]} == {
        "missing": set(lost),
        "extra": {*stale, missed_deletion},
        "outdated": set(),
        "copied_datestamp": set(),
        "duplicates": set(),
    }
    assert {c: found(after, c) for c in after["counts"]} == {
        "missing": set(),
        "extra": set(stale),
        "outdated": set(),
        "copied_datestamp": set(),
        "duplicates": set(),
    }
