"""``wiscat link runs`` and ``wiscat link quarantine``: an operator sees from the command line
what a link's runs did and which records it set aside, and gets a quarantined record's bytes, to
show its peer; the admin API gives the same."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import aiohttp
from lxml import etree

from tests.e2e.nodes import NodeFactory
from tests.support.servers import list_records_page, serving
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render

# Not ISO 19139 (no fileIdentifier): quarantined.
GMD = "http://www.isotc211.org/2005/gmd"
BAD = f"<gmd:MD_Metadata xmlns:gmd='{GMD}'><title>Zürich</title>"
BAD += "</gmd:MD_Metadata>"


def page() -> bytes:
    now = datetime.now(UTC)
    pieces = []
    for n in range(2):
        record = parse_record(generate_record(n, centre="hist"))
        pieces.append(render.record(record.identifier, now, [], False, record.xml))
    pieces.append(render.record("urn:x-wmo:md:hist::bad", now, [], False, BAD.encode()))
    return list_records_page(pieces)


async def test_runs_and_quarantine_from_the_command_line(make_node: NodeFactory) -> None:
    node = await make_node("HIST")
    node.extra["WISCAT_HARVEST_MAX_RETRIES"] = "0"
    body = page()
    async with serving(body) as url:
        await node.wiscat("link", "add", "peer", "--url", url, "--into", "WIS-GISC-PEER")
        await node.wiscat("harvest", "peer")
    # the peer is gone: the next run fails, and says why
    code, _, _ = await node.wiscat("harvest", "peer", check=False)
    assert code != 0

    _, out, _ = await node.wiscat("link", "runs", "peer")
    failed, done = out.strip().split("\n#")
    assert " peer incremental: failed (" in failed.split("\n")[0]
    assert failed.split("\n")[1].startswith("    PeerUnreachable: cannot reach ")
    assert " peer full: ok (" in done
    assert done.endswith("; pages 1; added 2, quarantined 1")
    _, out, _ = await node.wiscat("link", "runs", "peer", "--json", "--limit", "1")
    [last] = json.loads(out)
    assert (last["status"], last["error_kind"], last["added"]) == ("failed", "PeerUnreachable", 0)

    _, out, _ = await node.wiscat("link", "quarantine", "peer")
    head, reason, *rest = out.split("\n")
    assert rest == [""]
    assert head.startswith("#") and " peer page 1 urn:x-wmo:md:hist::bad (" in head
    assert reason.startswith("    ") and "fileIdentifier" in reason
    quarantine_id = head[1:].split()[0]
    code, got, _ = await node.wiscat_bytes("link", "quarantine", "--raw", quarantine_id)
    assert code == 0
    stored = etree.fromstring(got)  # the record as read from its page
    assert stored.tag == f"{{{GMD}}}MD_Metadata" and stored.findtext("{*}title") == "Zürich"

    # the admin API: the list of one link, and the bytes
    headers = {"Authorization": f"Bearer token-{node.name}"}
    provider = await node.start("provider", f"http://127.0.0.1:{node.provider_port}/healthz")
    root = f"http://127.0.0.1:{node.provider_port}/admin/quarantine"
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(root, params={"link": "peer"}) as listed:
            [row] = await listed.json()
        assert row["identifier"] == "urn:x-wmo:md:hist::bad" and row["size"] == len(got)
        async with session.get(root, params={"link": "other"}) as listed:
            assert await listed.json() == []
        async with session.get(f"{root}/{row['id']}") as one:
            assert one.status == 200 and await one.read() == got
            assert one.headers["Content-Type"] == "application/octet-stream"
        for missing, status in (("999999", 404), ("0", 400), ("x", 400), ("9" * 20, 400)):
            async with session.get(f"{root}/{missing}") as gone:
                assert gone.status == status, missing
        async with aiohttp.ClientSession() as anonymous, anonymous.get(f"{root}/{row['id']}") as r:
            assert r.status == 401
        # the dashboard names each quarantined record by the id these take
        async with session.get(f"http://127.0.0.1:{node.provider_port}/") as dashboard:
            html = await dashboard.text()
        quarantine = html.split("<h2>Quarantined records</h2>", 1)[1].split("<h2>", 1)[0]
        first = quarantine.split("<tbody><tr>", 1)[1].split("</tr>", 1)[0]
        quarantine_id = row["id"]
        assert first.startswith(
            f'<td class="n"><a href="/quarantine/{quarantine_id}">{quarantine_id}</a></td>'
        )
        assert "<td>peer</td><td>urn:x-wmo:md:hist::bad</td>" in first
        # and its run shows what it set aside (it showed added and updated alone)
        runs = html.split("<h2>Recent harvest runs</h2>", 1)[1].split("<h2>", 1)[0]
        assert '<td class="counts">added 2, quarantined 1</td>' in runs
    assert provider in node.processes

    # an argument that names nothing here is said so, exit 2, as a bad argument is
    code, _, err = await node.wiscat_bytes("link", "quarantine", "--raw", "999999")
    assert (code, err.splitlines()[-1]) == (
        2,
        b"wiscat: no quarantined record 999999 (purged, or never was)",
    )
    code, _, err = await node.wiscat("link", "runs", "nosuch", check=False)
    assert (code, err.splitlines()[-1]) == (2, "wiscat: no link named 'nosuch'")
    code, _, err = await node.wiscat("link", "runs", "--limit", "0", check=False)
    assert code == 2 and "a whole number, 1 to 1000" in err
    await node.wiscat("link", "remove", "peer")
    _, out, _ = await node.wiscat("link", "quarantine")
    assert " (a removed link) page 1 urn:x-wmo:md:hist::bad (" in out
    _, out, _ = await node.wiscat("link", "runs")
    assert out == "no runs\n"  # a link's runs go with it
