"""``wiscat wis2 render ID``: a stored record as WCMP2 on stdout, its conversion report on
stderr; exit 1 when it cannot be made valid (with the reasons), 2 when no live record has the
identifier. The record printed passes WMO's schema and pywcmp's test suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.nodes import Node, NodeFactory
from tests.support.wcmp2_suite import SCHEMA, Suite, failures, session_suite
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.wcmp2.identifiers import from_wcmp2_id

CENTRES = "de-dwd=prefix:urn:x-wmo:md:int.wmo.wis::;de-dwd=licence:https://www.dwd.de/terms"
ELSEWHERE = "urn:x-wmo:md:fr.meteofrance::elsewhere"


@pytest.fixture
async def node(make_node: NodeFactory, tmp_path: Path) -> Node:
    made = await make_node("WISTWO")
    # no WMO schema in this HOME: the default --schema is absent
    made.extra.update({"WISCAT_WIS2_CENTRES": CENTRES, "HOME": str(tmp_path)})
    folder = tmp_path / "records"
    folder.mkdir()
    for n in (1, 2):
        (folder / f"{n}.xml").write_bytes(generate_record(n))
    other = generate_record(3).replace(identifier_for(3).encode(), ELSEWHERE.encode())
    (folder / "elsewhere.xml").write_bytes(other)
    await made.wiscat("ingest", str(folder))
    return made


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    return session_suite(tmp_path_factory)


async def test_a_record_rendered_and_valid(node: Node, suite: Suite) -> None:
    code, out, err = await node.wiscat(
        "wis2", "render", identifier_for(1), "--schema", str(SCHEMA), check=False
    )
    assert code == 0, err
    record = json.loads(out)
    assert from_wcmp2_id(record["id"]) == ("de-dwd", identifier_for(1))
    assert failures(suite.run(record)) == []
    assert [link["href"] for link in record["links"]][-1].startswith(
        f"{node.oai}?verb=GetRecord&metadataPrefix=iso19139&identifier=urn%3Ax-wmo"
    )
    lines = err.splitlines()
    assert lines[0] == f"{identifier_for(1)} as {record['id']}"
    assert (
        "  guessed: centre-id de-dwd, by the rule de-dwd=prefix:urn:x-wmo:md:int.wmo.wis::" in lines
    )
    assert "  dropped: GTSPriority4 (GTS priority: WIS2 has no GTS)" in lines
    assert lines[-1] == "  valid WCMP2"


async def test_the_json_form_and_an_unchecked_schema(node: Node) -> None:
    _, out, err = await node.wiscat("wis2", "render", identifier_for(2), "--json")
    both = json.loads(out)
    assert set(both) == {"record", "report"}
    report = both["report"]
    assert report["valid"] is True and report["schema"] is None
    assert report["fileIdentifier"] == identifier_for(2)
    assert report["id"] == both["record"]["id"]
    assert any(line.startswith("centre-id de-dwd") for line in report["guessed"])
    assert (
        "  schema: not checked (no WMO schema at ~/.pywcmp/wcmp-2/wcmp2-bundled.json; give one "
        "with --schema)" in err.splitlines()
    )


async def test_a_record_that_cannot_be_made_valid_exits_1(node: Node) -> None:
    code, out, err = await node.wiscat("wis2", "render", ELSEWHERE, check=False)
    assert code == 1
    assert json.loads(out)["id"] is None
    lines = err.splitlines()
    assert lines[0] == f"{ELSEWHERE} as (no WCMP2 id)"
    assert (
        "  cannot be announced: no centre-id: no rule of WISCAT_WIS2_CENTRES matches the "
        "fileIdentifier or an organisation (National Meteorological Service of XX)"
    ) in lines
    assert lines[-1] == "  NOT a valid WCMP2 record"


async def test_no_such_record_exits_2(node: Node) -> None:
    code, out, err = await node.wiscat("wis2", "render", "urn:x-wmo:md:nosuch", check=False)
    assert (code, out, err) == (2, "", "wiscat: 'urn:x-wmo:md:nosuch' names no record here\n")
    await node.wiscat("delete", identifier_for(2))
    code, out, err = await node.wiscat("wis2", "render", identifier_for(2), check=False)
    assert (code, out) == (2, "")
    assert err == f"wiscat: {identifier_for(2)!r} is deleted: nothing to render\n"


async def test_an_unreadable_schema_exits_2(node: Node, tmp_path: Path) -> None:
    (tmp_path / "schema.json").write_text("{not json")
    for schema in (tmp_path / "schema.json", tmp_path / "absent.json"):
        code, out, err = await node.wiscat(
            "wis2", "render", identifier_for(1), "--schema", str(schema), check=False
        )
        assert (code, out) == (2, "")
        assert err.startswith(f"wiscat: cannot read the WCMP2 schema {schema}: ")


async def test_a_record_the_schema_refuses_exits_1(node: Node, tmp_path: Path) -> None:
    stricter = json.loads(SCHEMA.read_text())
    stricter["required"].append("nosuch")
    (tmp_path / "stricter.json").write_text(json.dumps(stricter))
    code, _, err = await node.wiscat(
        "wis2",
        "render",
        identifier_for(1),
        "--schema",
        str(tmp_path / "stricter.json"),
        check=False,
    )
    assert code == 1
    assert "  cannot be announced: schema: $: 'nosuch' is a required property" in err.splitlines()
