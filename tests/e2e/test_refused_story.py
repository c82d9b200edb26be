"""Operator review 3's refusal story, end to end: two nodes made with the same identifiers, so
that a third of one node's set belongs to the other's own set. The refusals are predicted by
``link test``, counted by reason in the run's summary, kept and listed (``link refused``, the
admin API), and ``check --details`` says why the identifiers are missing."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.e2e.nodes import Node, NodeFactory
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record

OWN_SET_TEXT = "it belongs to the own set WIS-GISC-LOCAL, which no link may change"


async def ingest(node: Node, folder: Path, numbers: range) -> None:
    folder.mkdir()
    for n in numbers:
        (folder / f"r{n}.xml").write_bytes(generate_record(n, centre="xx"))
    await node.wiscat("ingest", str(folder))


async def test_refused_records_are_predicted_counted_kept_and_explained(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    tokyo = await make_node("TOKYO")
    # listed first: the records whose identifiers the other node also made
    await ingest(tokyo, tmp_path / "tokyo-shared", range(50))
    await ingest(tokyo, tmp_path / "tokyo-own", range(50, 150))
    local = await make_node("LOCAL")
    await ingest(local, tmp_path / "local", range(50))
    shared = sorted(parse_record(generate_record(n, centre="xx")).identifier for n in range(50))
    await tokyo.start("provider", f"http://127.0.0.1:{tokyo.provider_port}/readyz")
    await local.wiscat(
        "link", "add", "tokyo", "--url", tokyo.oai, "--set", tokyo.own_set, "--disabled"
    )

    # link test applies the harvester's own rules to the record it fetches
    code, out, err = await local.wiscat("link", "test", "tokyo", check=False)
    assert code == 1, out + err
    [record] = [line for line in out.splitlines() if line.startswith("a record")]
    assert record.split()[2] == "PROBLEM"
    assert record.endswith(f"would be refused: {OWN_SET_TEXT}"), record
    assert record.split()[3] in shared

    # the run's summary counts the refusals by reason
    _, out, err = await local.wiscat("harvest", "tokyo")
    assert "added 100" in out and "refused 50: own set 50" in out, out + err
    _, runs, _ = await local.wiscat("link", "runs", "tokyo")
    assert "added 100, refused 50: own set 50" in runs, runs

    # each refusal is kept, with its run and reason
    _, listed, _ = await local.wiscat("link", "refused", "tokyo")
    header, *rows = listed.splitlines()
    assert header.split() == ["IDENTIFIER", "RUN", "WHEN", "REASON"]
    assert sorted(row.split()[0] for row in rows) == shared
    assert all(row.split()[1] == "1" and row.endswith(OWN_SET_TEXT) for row in rows), rows
    code, out, err = await local.wiscat("link", "refused", "osaka", check=False)
    assert (code, out, err) == (2, "", "wiscat: no link named 'osaka'\n")

    # the admin API gives the same
    await local.start("provider", f"http://127.0.0.1:{local.provider_port}/readyz")
    admin = f"http://127.0.0.1:{local.provider_port}/admin"
    headers = {"Authorization": f"Bearer token-{local.name}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(f"{admin}/links/tokyo/refused") as answer:
            assert answer.status == 200
            refused = await answer.json()
        assert sorted(row["identifier"] for row in refused) == shared
        assert {(row["reason"], row["text"], row["run_id"]) for row in refused} == {
            ("own_set", OWN_SET_TEXT, 1)
        }
        async with session.get(f"{admin}/links/osaka/refused") as answer:
            assert answer.status == 404
        async with session.get(f"{admin}/runs", params={"link": "tokyo"}) as answer:
            [run] = await answer.json()
        assert (run["refused"], run["refusals"]) == (50, {"own_set": 50})
        # the dashboard shows them in amber, in the links table and in the runs table
        async with session.get(f"http://127.0.0.1:{local.provider_port}/") as answer:
            html = await answer.text()
    amber = '<span class="refused">refused 50: own set 50</span>'
    for section in ("<h2>Links</h2>", "<h2>Recent harvest runs</h2>"):
        shown = html.split(section, 1)[1].split("<h2>", 1)[0]
        assert f'<td class="counts">added 100, {amber}</td>' in shown, shown
    assert ".refused{color:#b86e00;" in html
    async with (
        aiohttp.ClientSession() as anonymous,
        anonymous.get(f"{admin}/links/tokyo/refused") as answer,
    ):
        assert answer.status == 401

    # check --details says why the identifiers are missing here
    code, out, err = await local.wiscat(
        "check", "--set", tokyo.own_set, "--source", tokyo.oai, local.oai, "--details",
        check=False,
    )  # fmt: skip
    assert code == 1, out + err
    details = out.split(f"{local.oai}: missing (50)\n", 1)[1].splitlines()
    explained = {details[i].split()[0]: details[i + 1].strip() for i in range(0, 100, 2)}
    assert sorted(explained) == shared
    for reason in explained.values():
        assert reason.startswith("refused here by link tokyo (run 1, "), reason
        assert reason.endswith(f"): {OWN_SET_TEXT}"), reason
