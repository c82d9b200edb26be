"""``wiscat link test NAME`` against a real node: what the link's peer answers to the requests its
harvests would make, a problem named per step (exit 1), and nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

from aiohttp import ClientSession, web

from tests.e2e.nodes import Node, NodeFactory, free_port
from tests.support.servers import serving_app
from wiscat.shared.db.pool import connect
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record

RECORDS = 7


async def peer_node(make_node: NodeFactory, tmp_path: Path) -> Node:
    """Node B serving RECORDS records of its own set, one of them deleted."""
    b = await make_node("B")
    for n in range(RECORDS):
        (tmp_path / f"r{n}.xml").write_bytes(generate_record(n, centre="bravo"))
    await b.wiscat("ingest", str(tmp_path))
    await b.wiscat("delete", parse_record(generate_record(0, centre="bravo")).identifier)
    await b.start("provider", f"http://127.0.0.1:{b.provider_port}/readyz")
    return b


def redirecting_to(url: str) -> web.Application:
    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently(f"{url}?{request.query_string}")

    app = web.Application()
    app.router.add_get("/oai", moved)
    return app


def lines(out: str) -> dict[str, list[str]]:
    """The findings by step, read from the table's columns: 'Identify' -> ['ok ...', 'note ...']."""
    head, *rows = out.splitlines()[1:]
    result, finding = head.index("RESULT"), head.index("FINDING")
    assert head[:result].rstrip() == "STEP", head
    steps: dict[str, list[str]] = {}
    for line in rows:
        step, mark, text = line[:result].strip(), line[result:finding].strip(), line[finding:]
        steps.setdefault(step, []).append(f"{mark} {text}")
    return steps


async def records_at(node: Node) -> int:
    conn = await connect(node.database_url)
    try:
        return int(await conn.fetchval("select count(*) from records"))
    finally:
        await conn.close()


async def test_a_good_link_is_ok_at_every_step(make_node: NodeFactory, tmp_path: Path) -> None:
    b = await peer_node(make_node, tmp_path)
    a = await make_node("A")
    _, added, _ = await a.wiscat(
        "link", "add", "b", "--url", b.oai, "--set", b.own_set, "--disabled"
    )
    assert added.splitlines()[-1] == "ask the peer what its harvests will: wiscat link test b"
    code, out, err = await a.wiscat("link", "test", "b", check=False)
    assert code == 0, out + err
    steps = lines(out)
    assert steps["Identify"] == [steps["Identify"][0]] and steps["Identify"][0].startswith("ok")
    assert steps["metadataPrefix"] == ["ok iso19139 offered"]
    assert steps["set"] == [f"ok {b.own_set} listed by the peer"]
    assert steps["first page"][0].startswith(f"ok {RECORDS} headers (1 deleted)")
    [record] = steps["a record"]
    assert record.startswith("ok urn:x-wmo:md:") and record.endswith("would be stored")
    assert await records_at(a) == 0  # a probe stores nothing
    # a peer that moved: followed, and the new URL named
    async with serving_app(redirecting_to(b.oai)) as old:
        with_password = old.replace("http://", "http://probe:s3cret@") + "/oai"
        await a.wiscat("link", "add", "old", "--url", with_password, "--set", b.own_set)
        code, out, err = await a.wiscat("link", "test", "old", check=False)
    assert code == 0, out + err
    shown = old.replace("http://", "http://probe:***@")
    assert lines(out)["Identify"][1] == (
        f"note {shown}/oai moved permanently to {b.oai}: change the link with "
        f"`wiscat link set old --url {b.oai}`"
    )
    assert "s3cret" not in out + err
    # a link to the whole catalogue of a peer whose list is empty: a note, not a problem
    empty = await make_node("C")
    await empty.start("provider", f"http://127.0.0.1:{empty.provider_port}/readyz")
    await a.wiscat("link", "add", "c", "--url", empty.oai, "--into", "WIS-GISC-C", "--disabled")
    code, out, err = await a.wiscat("link", "test", "c", check=False)
    assert code == 0, out + err
    assert lines(out)["set"] == ["ok none: the link harvests the whole catalogue"]
    assert lines(out)["first page"] == ["note the list is empty (noRecordsMatch)"]


async def test_a_mistyped_link_is_told_what_the_peer_has(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    b = await peer_node(make_node, tmp_path)
    a = await make_node("A")
    await a.wiscat(
        "link",
        "add",
        "b",
        "--url",
        b.oai,
        "--set",
        "WIS-GISC-BB",
        "--prefix",
        "iso19193",
        "--disabled",
    )
    code, out, err = await a.wiscat("link", "test", "b", check=False)
    assert code == 1, out + err
    steps = lines(out)
    assert steps["metadataPrefix"] == [
        "PROBLEM iso19193 is not offered (offered: iso19139, oai_dc); change it with "
        "`wiscat link set b --prefix P`"
    ]
    assert steps["set"][0].startswith("PROBLEM WIS-GISC-BB is not among the peer's ")
    assert "cannotDisseminateFormat" in steps["first page"][0]
    assert "a record" not in steps  # no page, no record to ask for
    # a format the peer has but that is not ISO 19139: every record would be quarantined
    await a.wiscat("link", "set", "b", "--set", b.own_set, "--prefix", "oai_dc")
    code, out, err = await a.wiscat("link", "test", "b", check=False)
    assert code == 1, out + err
    steps = lines(out)
    assert steps["metadataPrefix"] == ["ok oai_dc offered"]
    assert steps["a record"][0].startswith("PROBLEM urn:x-wmo:md:")
    assert "would be quarantined: root element is" in steps["a record"][0]
    # the same findings for a script
    code, out, err = await a.wiscat("link", "test", "b", "--json", check=False)
    assert code == 1, out + err
    findings = json.loads(out)
    assert [f["step"] for f in findings] == [
        "Identify",
        "metadataPrefix",
        "set",
        "first page",
        "a record",
    ]
    assert findings[-1]["outcome"] == "problem" and "quarantined" in findings[-1]["text"]


async def test_a_peer_that_cannot_be_reached_ends_the_probe(make_node: NodeFactory) -> None:
    a = await make_node("A")  # the default 5 retries of a harvest: a probe makes one at most
    closed = f"http://127.0.0.1:{free_port()}/oai"
    await a.wiscat("link", "add", "gone", "--url", closed, "--set", "S", "--disabled")
    code, out, err = await a.wiscat("link", "test", "gone", check=False)
    assert code == 1, out + err
    assert list(lines(out)) == ["Identify"]
    assert lines(out)["Identify"][0].startswith(f"PROBLEM cannot reach {closed}")
    assert err.count("retrying in") == 1
    code, _, err = await a.wiscat("link", "test", "nothing", check=False)
    assert code == 2 and "no link named 'nothing'" in err


def answering_lists_with_records(url: str, *, as_identifiers: bool = False) -> web.Application:
    """A peer that forwards every request to ``url`` but answers ListIdentifiers with the
    ListRecords of the same arguments; ``as_identifiers``: inside a ListIdentifiers element."""

    async def forward(request: web.Request) -> web.Response:
        query = dict(request.query)
        listing = query.get("verb") == "ListIdentifiers"
        if listing:
            query["verb"] = "ListRecords"
        async with ClientSession() as session, session.get(url, params=query) as answer:
            body = await answer.read()
        if listing and as_identifiers:
            body = body.replace(b"ListRecords", b"ListIdentifiers")
        return web.Response(body=body, content_type="text/xml")

    app = web.Application()
    app.router.add_get("/oai", forward)
    return app


async def test_a_list_answered_with_another_verb_is_a_problem(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    # its headers were all RecordItems, none counted: "0 headers", and the step said ok
    b = await peer_node(make_node, tmp_path)
    a = await make_node("A")
    async with serving_app(answering_lists_with_records(b.oai)) as peer:
        await a.wiscat("link", "add", "b", "--url", peer + "/oai", "--set", b.own_set)
        code, out, err = await a.wiscat("link", "test", "b", check=False)
    assert code == 1, out + err
    assert lines(out)["first page"] == [
        "PROBLEM ListIdentifiers: the answer is 'ListRecords', not ListIdentifiers"
    ]


async def test_a_list_of_identifiers_holding_records_is_told(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    # whole records inside ListIdentifiers: "0 headers", ok, and no record looked at
    b = await peer_node(make_node, tmp_path)
    a = await make_node("A")
    async with serving_app(answering_lists_with_records(b.oai, as_identifiers=True)) as peer:
        await a.wiscat("link", "add", "b", "--url", peer + "/oai", "--set", b.own_set)
        code, out, err = await a.wiscat("link", "test", "b", check=False)
    assert code == 0, out + err
    [first] = lines(out)["first page"]
    assert first.startswith(f"note {RECORDS} headers (1 deleted)"), first
    assert first.endswith(
        f"; {RECORDS} of them sent as whole records, where ListIdentifiers has headers"
    )
    [record] = lines(out)["a record"]
    assert record.startswith("ok urn:x-wmo:md:") and record.endswith("would be stored")
