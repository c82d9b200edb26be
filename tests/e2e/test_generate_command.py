"""``wiscat generate N DIR``: sample records a newcomer can ingest, written whole, and never over
a file that is there."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.nodes import NodeFactory
from wiscat.shared.db.pool import connect
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.iso19139 import parse_record


async def test_generated_records_are_valid_and_ingest_stores_them(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = await make_node("GEN")
    folder = tmp_path / "samples" / "new"  # made, parents and all

    code, out, err = await node.wiscat("generate", "5", str(folder))

    first, last = identifier_for(0), identifier_for(4)
    assert (code, err) == (0, "")
    assert out == (
        f"wrote 5 record(s) to {folder} ({first} .. {last})\n"
        f"load them into the own set: wiscat ingest {folder}\n"
    )
    names = sorted(path.name for path in folder.iterdir())
    assert names == [f"xx-{n:07d}.xml" for n in range(5)]  # no part file left behind
    for n in range(5):
        written = (folder / f"xx-{n:07d}.xml").read_bytes()
        assert written == generate_record(n)
        assert parse_record(written).identifier == identifier_for(n)

    code, out, err = await node.wiscat("ingest", str(folder))
    assert (code, out) == (0, "WIS-GISC-GEN: added 5, bad 0\n"), err

    conn = await connect(node.database_url)
    try:
        stored = await conn.fetch(
            "select identifier, xml from records where $1 = any(set_specs) order by identifier",
            node.own_set,
        )
    finally:
        await conn.close()
    assert {row["identifier"] for row in stored} == {identifier_for(n) for n in range(5)}


async def test_generate_writes_nothing_over_a_file_that_is_there(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = await make_node("GENTWICE")
    (tmp_path / "xx-0000003.xml").write_bytes(b"mine")

    code, out, err = await node.wiscat("generate", "5", str(tmp_path), check=False)

    assert (code, out) == (1, "")
    assert err == (
        f"wiscat: {tmp_path / 'xx-0000003.xml'} exist(s); nothing written (choose another "
        "folder, or --start past them)\n"
    )
    assert [path.name for path in tmp_path.iterdir()] == ["xx-0000003.xml"]
    assert (tmp_path / "xx-0000003.xml").read_bytes() == b"mine"

    # numbered past it, with another centre: written
    code, out, _ = await node.wiscat(
        "generate", "2", str(tmp_path), "--start", "4", "--centre", "JP"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "jp-0000004.xml",
        "jp-0000005.xml",
        "xx-0000003.xml",
    ]
    assert (tmp_path / "jp-0000005.xml").read_bytes() == generate_record(5, centre="jp")


async def test_generate_refuses_a_count_that_is_not_one(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = await make_node("GENBAD")
    code, out, err = await node.wiscat("generate", "lots", str(tmp_path), check=False)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        "wiscat generate: error: argument N: 'lots': a whole number, 0 to 1000000"
    )
    assert list(tmp_path.iterdir()) == []
