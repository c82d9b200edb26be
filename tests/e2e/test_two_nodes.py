"""Two real nodes as processes: records ingested at A reach B through B's harvester."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.nodes import Node, NodeFactory
from wiscat.shared.generator import generate_record


@pytest.fixture
async def nodes(make_node: NodeFactory) -> tuple[Node, Node]:
    return await make_node("ALPHA"), await make_node("BETA")


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_records_flow_from_a_to_b_and_services_stop_cleanly(
    nodes: tuple[Node, Node], tmp_path: Path
) -> None:
    a, b = nodes
    for n in range(40):
        (tmp_path / f"r{n}.xml").write_bytes(generate_record(n, centre="alpha"))
    (tmp_path / "bad.xml").write_bytes(b"<not-iso/>")
    code, out, err = await a.wiscat("ingest", str(tmp_path), check=False)
    assert code == 1  # one bad file: reported, the good ones stored
    assert "WIS-GISC-ALPHA: added 40, bad 1" in out
    assert "bad.xml" in err

    await a.start("provider", f"http://127.0.0.1:{a.provider_port}/readyz")
    await b.wiscat("link", "add", "alpha", "--url", a.oai, "--set", a.own_set, "--every", "1h")
    _, listed, _ = await b.wiscat("link", "list", "--json")
    [link] = json.loads(listed)
    assert (link["name"], link["local_set"], link["remote_set"]) == ("alpha", a.own_set, a.own_set)
    code, _, err = await b.wiscat(
        "link", "add", "alpha", "--url", a.oai, "--set", a.own_set, check=False
    )
    assert code == 1 and "exists already" in err

    await b.start("harvester", f"http://127.0.0.1:{b.harvester_port}/readyz")
    for _ in range(100):
        _, listed, _ = await b.wiscat("link", "list", "--json")
        if json.loads(listed)[0]["last_success_at"]:
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("B's harvester never harvested A")
    status, metrics = await get(f"http://127.0.0.1:{b.harvester_port}/metrics")
    assert status == 200
    assert 'wiscat_harvest_records_total{link="alpha",outcome="added"} 40.0' in metrics
    assert 'wiscat_harvest_runs_total{link="alpha",mode="full",status="ok"} 1.0' in metrics

    # a deletion at A, then an explicit harvest run of B's link
    # B's harvester stopped first: it would harvest the deletion at A's hint, before the run
    # by hand that this test watches
    assert (await b.stop()) == [0]  # SIGTERM: the harvester stops cleanly
    _, out, _ = await a.wiscat("delete", "urn:x-wmo:md:int.wmo.wis::alpha.synop.0")
    assert "deleted: urn:x-wmo:md:int.wmo.wis::alpha.synop.0" in out
    code, out, _ = await b.wiscat("harvest", "alpha")
    assert code == 0 and "incremental" in out and "deleted 1" in out

    await b.start("provider", f"http://127.0.0.1:{b.provider_port}/readyz")
    status, body = await get(
        f"{b.oai}?verb=GetRecord&metadataPrefix=iso19139&identifier=urn:x-wmo:md:int.wmo.wis::alpha.synop.0"
    )
    assert status == 200 and 'status="deleted"' in body
    status, body = await get(
        f"{b.oai}?verb=ListIdentifiers&metadataPrefix=iso19139&set={a.own_set}"
    )
    assert body.count("<header>") == 39 and body.count('<header status="deleted">') == 1

    code, _, err = await b.wiscat("harvest", "nope", check=False)
    assert code == 2 and "no link named" in err
    code, _, err = await b.wiscat("link", "add", "x", "--url", "ftp://nowhere", check=False)
    assert code == 2 and "not an http(s) URL" in err
    assert (await a.stop()) == [0]
    assert (await b.stop()) == [0]


async def test_a_failing_link_exits_non_zero_with_its_reason(nodes: tuple[Node, Node]) -> None:
    _, b = nodes
    await b.wiscat(
        "link", "add", "ghost", "--url", "http://127.0.0.1:9/oai", "--set", "WIS-GISC-GHOST"
    )
    b.extra["WISCAT_HARVEST_MAX_RETRIES"] = "0"
    code, out, _ = await b.wiscat("harvest", "ghost", check=False)
    assert code == 1
    assert "failed" in out and "PeerUnreachable" in out
    _, listed, _ = await b.wiscat("link", "list")
    assert "cannot reach" in listed
