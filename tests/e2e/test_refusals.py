"""What the ``wiscat`` command refuses before it stores or serves anything: bad settings, and
links that could not work or would make the node's own answers invalid."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.e2e.nodes import Node, NodeFactory
from wiscat.shared.db.pool import connect
from wiscat.shared.generator import generate_record, identifier_for

PEER = "http://127.0.0.1:9/oai"


@pytest.mark.parametrize(
    ("setting", "value", "reason"),
    [
        ("WISCAT_PROVIDER_PORT", "99999", "Input should be less than or equal to 65535"),
        ("WISCAT_HARVESTER_PORT", "0", "Input should be greater than or equal to 1"),
        ("WISCAT_LOG_LEVEL", "verbose", "one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        # far past any use, and past what a date can hold: every list request was a 500
        ("WISCAT_TOKEN_LIFETIME_HOURS", "100000000", "less than or equal to 8784"),
        ("WISCAT_SETTLE_SECONDS", "1e12", "less than or equal to 3600"),
        # each of these would make Identify or ListSets invalid against OAI-PMH.xsd
        ("WISCAT_GISC_NAME", "Offenbach/DWD", "the name is letters, digits and -_.!~*'()"),
        ("WISCAT_ADMIN_EMAIL", "nobody", "an e-mail address"),
        ("WISCAT_BASE_URL", "gisc.example.org/oai", "the full http(s) URL peers use"),
        ("WISCAT_BASE_URL", "http://gisc.example.org/oai?x=1", "without a query"),
        ("WISCAT_REPOSITORY_NAME", "GISC\x01", "without control characters"),
        ("WISCAT_REGISTRY_NODE_URL", "ftp://gisc.example.org", "http(s) root URL"),
    ],
)
async def test_a_bad_setting_is_named_and_nothing_runs(
    make_node: NodeFactory, setting: str, value: str, reason: str
) -> None:
    node = await make_node("REFUSE")
    node.extra[setting] = value
    code, out, err = await node.wiscat("migrate", check=False)
    assert code == 2 and out == ""
    line = f"wiscat: bad setting {setting}={value!r}: "
    assert err.startswith(line) and reason in err, err
    assert "Traceback" not in err and "pydantic" not in err
    node.extra.pop(setting)
    code, _, _ = await node.wiscat("migrate", check=False)
    assert code == 0


@pytest.mark.parametrize("url", ["mysql://op:secretpw@db/wiscat", "postgres//op:secretpw@db"])
async def test_a_bad_database_url_is_refused_without_showing_it(
    make_node: NodeFactory, url: str
) -> None:
    # it may carry a password: the setting is named, its value not shown
    node = await make_node("REFUSE")
    node.extra["WISCAT_DATABASE_URL"] = url
    code, _, err = await node.wiscat("migrate", check=False)
    assert code == 2
    assert err == (
        "wiscat: bad setting WISCAT_DATABASE_URL: a libpq URL: "
        "postgresql://user@host:port/database\n"
    )


async def links(node: Node) -> list[dict[str, object]]:
    _, out, _ = await node.wiscat("link", "list", "--json")
    found: list[dict[str, object]] = json.loads(out)
    return found


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["", "--url", PEER, "--set", "S"], "link name '': at most 100 letters, digits"),
        (["a/b", "--url", PEER, "--set", "S"], "link name 'a/b': at most 100 letters, digits"),
        # thousands of characters could not be indexed: the insert failed, with a traceback
        (["x" + "7" * 9000, "--url", PEER, "--set", "S"], "link name 'x7777"),
        (["registry-mine", "--url", PEER, "--set", "S"], "kept for the links the registry adds"),
        (["x", "--url", "http://h:99999/oai", "--set", "S"], "is not an http(s) URL"),
        (["x", "--url", "http://h/o ai", "--set", "S"], "is not an http(s) URL"),
        (["x", "--url", PEER, "--set", "a b"], "--set 'a b' is not a set name"),
        (["x", "--url", PEER, "--set", "a:"], "--set 'a:' is not a set name"),
        (["x", "--url", PEER, "--into", "my set"], "--into 'my set' is not a set name"),
        (["x", "--url", PEER, "--into", "S" * 201], "is not a set name: at most 200"),
        (["x", "--url", PEER, "--set", "S", "--prefix", "iso 19139"], "not a metadataPrefix"),
        (["x", "--url", PEER, "--set", "S", "--window-slices", "-1"], "0 (off) to 10000"),
        (["x", "--url", PEER, "--set", "S", "--window-slices", "10001"], "0 (off) to 10000"),
        (["x", "--url", PEER, "--set", "S", "--every", "400d"], "366d at most"),
        (["x", "--url", PEER, "--set", "S", "--overlap", "31d"], "--overlap is 0 to 30d"),
        # a peer's copy of the own set, harvested back into it: a loop (the node is REFUSE)
        (["x", "--url", PEER, "--set", "WIS-GISC-REFUSE"], "harvested back only by a recovery"),
    ],
)
async def test_a_link_that_cannot_work_is_not_added(
    make_node: NodeFactory, argv: list[str], reason: str
) -> None:
    node = await make_node("REFUSE")
    code, _, err = await node.wiscat("link", "add", *argv, check=False)
    assert code == 2 and err.startswith("wiscat: link not added: ") and reason in err, err
    assert "Traceback" not in err
    assert await links(node) == []


async def test_a_link_is_not_changed_into_one_that_cannot_work(make_node: NodeFactory) -> None:
    node = await make_node("REFUSE")
    await node.wiscat("link", "add", "peer", "--url", PEER, "--set", "WIS-GISC-PEER")
    before = await links(node)
    for argv, reason in [
        (["--url", "junk"], "'junk' is not an http(s) URL"),
        (["--url", "http://h/oai?verb=Identify"], "must not carry a query"),
        (["--set", "WIS GISC"], "--set 'WIS GISC' is not a set name"),
        # its records are filed under the name of the set it harvests (a GISC link)
        (["--set", ""], "the peer's whole catalogue would be filed under that name"),
    ]:
        code, _, err = await node.wiscat("link", "set", "peer", *argv, check=False)
        assert code == 2 and err.startswith("wiscat: link not changed: ") and reason in err, err
    assert await links(node) == before
    # a good change still goes through; a set name corrected is the name records are filed under
    await node.wiscat("link", "set", "peer", "--url", "http://127.0.0.1:10/oai")
    await node.wiscat("link", "set", "peer", "--set", "WIS-GISC-OTHER")
    [after] = await links(node)
    assert (after["base_url"], after["remote_set"], after["local_set"]) == (
        "http://127.0.0.1:10/oai",
        "WIS-GISC-OTHER",
        "WIS-GISC-OTHER",
    )
    # an area link, filed under the own set, may take another set, or the whole catalogue
    await node.wiscat("link", "remove", "peer")
    await node.wiscat(
        "link", "add", "area", "--url", PEER, "--set", "DCPC-X", "--into", node.own_set
    )
    await node.wiscat("link", "set", "area", "--url", "http://127.0.0.1:10/oai", "--set", "")
    [after] = await links(node)
    assert (after["base_url"], after["remote_set"], after["local_set"]) == (
        "http://127.0.0.1:10/oai",
        None,
        node.own_set,
    )


async def test_link_set_to_the_same_source_keeps_the_high_water_mark(
    make_node: NodeFactory,
) -> None:
    """Naming the source a link has already is no new source: its high-water mark stays (it was
    reset, so the next run re-read the peer's whole set, a million records for a GISC)."""
    node = await make_node("SAME")
    await node.wiscat("link", "add", "peer", "--url", PEER, "--set", "WIS-GISC-PEER")
    conn = await connect(node.database_url)
    try:
        await conn.execute("update links set high_water_mark = '2026-01-02T03:04:05Z'")
        for argv in (
            ["--url", PEER],
            ["--set", "WIS-GISC-PEER"],
            ["--url", PEER, "--set", "WIS-GISC-PEER"],
        ):
            _, out, _ = await node.wiscat("link", "set", "peer", *argv)
            assert (
                out == f"link peer harvests {PEER} set=WIS-GISC-PEER prefix=iso19139 already; its "
                "source is unchanged\n"
            )
        assert (
            await conn.fetchval("select extract(epoch from high_water_mark) from links")
            == 1767323045
        )
        # a new strategy: the same source, the same records, the same high-water mark
        _, out, _ = await node.wiscat("link", "set", "peer", "--strategy", "ListIdentifiers")
        assert out == (
            "link peer now harvests by ListIdentifiers + GetRecord; its high-water mark stays\n"
        )
        [link] = await links(node)
        assert link["strategy"] == "ListIdentifiers"
        _, listed, _ = await node.wiscat("link", "list")
        assert listed.splitlines()[1].endswith(f"{PEER} by ListIdentifiers + GetRecord")
        assert (
            await conn.fetchval("select extract(epoch from high_water_mark) from links")
            == 1767323045
        )
    finally:
        await conn.close()
    code, _, err = await node.wiscat("link", "set", "peer", "--strategy", "GetRecord", check=False)
    assert code == 2 and "invalid choice: 'GetRecord'" in err
    code, out, err = await node.wiscat("link", "set", "peer", check=False)
    assert (code, out) == (2, "")
    assert err.endswith(
        "wiscat: nothing to change: give --url, --set, --prefix, --strategy, --every, "
        "--full-every, --overlap, --window-slices, --hints, --enable or --disable\n"
    )


async def test_link_set_changes_the_prefix_and_the_schedule(make_node: NodeFactory) -> None:
    """A link's metadataPrefix, intervals, overlap and window slices could be changed only by
    removing it and adding it again: its runs gone, and a full harvest of the peer's set next."""
    node = await make_node("SCHEDULE")
    await node.wiscat(
        "link", "add", "peer", "--url", PEER, "--set", "WIS-GISC-PEER", "--every", "1d"
    )
    conn = await connect(node.database_url)
    try:
        await conn.execute(
            "update links set high_water_mark = '2026-01-02T03:04:05Z', "
            "next_run_at = now() + interval '1 day'"
        )
        _, out, _ = await node.wiscat(
            "link", "set", "peer", "--every", "10m", "--full-every", "1d", "--overlap", "5m",
            "--window-slices", "4",
        )  # fmt: skip
        assert out == (
            "link peer: every 10m, full every 1d, overlap 5m, window slices 4; its high-water "
            "mark stays\n"
        )
        [link] = await links(node)
        assert (link["every"], link["full_every"], link["overlap"], link["window_slices"]) == (
            600, 86400, 300, 4,
        )  # fmt: skip
        assert await conn.fetchval(
            "select next_run_at <= now() + interval '10 minutes' and high_water_mark is not null "
            "from links"
        )  # a shorter interval counts at once; the mark stays
        code, _, err = await node.wiscat("link", "set", "peer", "--prefix", "a b", check=False)
        assert code == 2 and "--prefix 'a b' is not a metadataPrefix" in err
        _, out, _ = await node.wiscat("link", "set", "peer", "--prefix", "iso19139.wmo")
        assert out == (
            f"link peer now harvests {PEER} set=WIS-GISC-PEER prefix=iso19139.wmo; high-water "
            "mark reset: the next run is a full harvest\n"
        )
        [link] = await links(node)
        assert (link["metadata_prefix"], link["high_water_mark"]) == ("iso19139.wmo", None)
        _, listed, _ = await node.wiscat("link", "list")
        header, row = listed.splitlines()
        assert header.split() == [
            "NAME", "ENABLED", "SET", "INTO", "EVERY/FULL", "HWM", "LAST", "OK", "HINTS", "URL",
            "/", "LAST", "ERROR",
        ]  # fmt: skip
        assert row.split()[4] == "10m/1d" and row.endswith(f"{PEER} prefix iso19139.wmo")
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["check", "--source", PEER, PEER], f"peer {PEER} is the source itself"),
        (["check", "--source", PEER, PEER + "2", PEER + "2"], f"peer {PEER}2 is given twice"),
        (["checks", "add", "c", "--source", PEER, PEER], f"peer {PEER} is the source itself"),
    ],
)
async def test_a_check_against_the_source_itself_is_refused(
    make_node: NodeFactory, argv: list[str], reason: str
) -> None:
    """Compared with itself, a set shows every datestamp copied: a report that misleads."""
    node = await make_node("CHECKS")
    code, out, err = await node.wiscat(*argv, "--set", "WIS-GISC-PEER", check=False)
    assert (code, out) == (2, "")
    assert f"wiscat: check refused: {reason}" in err
    _, listed, _ = await node.wiscat("checks", "list")
    assert listed == "no checks\n"


async def test_ingest_of_an_older_copy_says_it_stored_nothing(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    """A file whose record is older than the stored copy is not stored (invariant 5): it is named
    on stderr and the exit status is 1, as for a bad file; it was only counted, with exit 0."""
    node = await make_node("OLDER")
    newer, older = tmp_path / "newer.xml", tmp_path / "older.xml"
    newer.write_bytes(generate_record(1, md_datestamp=datetime(2025, 6, 1, tzinfo=UTC)))
    older.write_bytes(generate_record(1, md_datestamp=datetime(2024, 6, 1, tzinfo=UTC), version=1))
    await node.wiscat("ingest", str(newer))
    code, out, err = await node.wiscat("ingest", str(older), check=False)
    assert code == 1
    assert f"refused: {older}: its gmd:dateStamp is older than the stored copy's\n" in err
    assert out == "WIS-GISC-OLDER: refused_older 1, bad 0\n"
    # a copy with no gmd:dateStamp at all is not shown newer either: it replaced the stored one
    undated = tmp_path / "undated.xml"
    record = generate_record(1, version=2)
    undated.write_bytes(re.sub(rb"<gmd:dateStamp>.*?</gmd:dateStamp>", b"", record, flags=re.S))
    code, out, err = await node.wiscat("ingest", str(undated), check=False)
    assert code == 1
    assert f"refused: {undated}: it has no gmd:dateStamp and the stored copy has one\n" in err
    assert out == "WIS-GISC-OLDER: refused_older 1, bad 0\n"
    conn = await connect(node.database_url)
    try:
        stored = await conn.fetchval("select md_datestamp from records")
    finally:
        await conn.close()
    assert stored == datetime(2025, 6, 1, tzinfo=UTC)


async def test_a_database_migrated_by_a_newer_wiscat_is_refused(make_node: NodeFactory) -> None:
    # an operator rolls the software back after a newer one migrated the database
    node = await make_node("REFUSE")
    conn = await connect(node.database_url)
    try:
        await conn.execute(
            "insert into schema_migrations (version, name) values (9999, '9999_future.sql')"
        )
    finally:
        await conn.close()
    for command in ("migrate", "provider", "harvester", "run"):
        code, _, err = await node.wiscat(command, check=False)
        assert code == 2, (command, err)
        assert err.endswith(
            "wiscat: the database was migrated by a newer wiscat (9999_future.sql unknown "
            "here); run that version or a later one: a schema is never migrated back\n"
        ), err
        assert "Traceback" not in err


async def test_files_and_keys_that_cannot_be_used_are_named(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = await make_node("REFUSE")
    missing = tmp_path / "no-such-folder" / "key.pem"
    code, _, err = await node.wiscat("registry", "keygen", "--out", str(missing), check=False)
    assert (code, err) == (2, f"wiscat: [Errno 2] No such file or directory: '{missing}'\n")
    key = tmp_path / "key.pem"
    await node.wiscat("registry", "keygen", "--out", str(key))
    out = tmp_path / "net.xml"
    for member in ("abc", "é", "A" * 44):
        code, _, err = await node.wiscat(
            "registry", "init-network", "N", "--out", str(out), "--key", str(key),
            "--member", member, check=False,
        )  # fmt: skip
        assert code == 2 and "is not a public key: an Ed25519 key's 32 bytes in base64" in err
        assert "Traceback" not in err and not out.exists()


async def test_a_registry_key_file_that_cannot_be_used_stops_the_start(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    # it failed the provider's start inside the server, with a traceback (exit 3)
    node = await make_node("REFUSE")
    garbage = tmp_path / "network.xml"
    garbage.write_text("not a key file")
    for path, reason in [
        (tmp_path / "missing.xml", "cannot read the key file"),
        (garbage, f"{garbage}: not a key file: not well-formed XML"),
    ]:
        node.extra["WISCAT_REGISTRY_KEY_FILE"] = str(path)
        for command in ("provider", "run"):
            code, out, err = await node.wiscat(command, check=False)
            assert code == 2 and err.startswith(f"wiscat: {reason}"), (command, err)
            assert out == "" and "Traceback" not in err


async def test_a_mistyped_setting_is_named_not_silently_ignored(make_node: NodeFactory) -> None:
    node = await make_node("REFUSE")
    node.extra["WISCAT_PAGESIZE"] = "5"
    code, _, err = await node.wiscat("migrate", check=False)
    assert code == 0
    assert "WISCAT_PAGESIZE is not a setting: ignored (did you mean WISCAT_PAGE_SIZE?)" in err


async def test_a_command_whose_database_fails_under_it_says_so_in_one_line(
    make_node: NodeFactory,
) -> None:
    """A query the server cancels (here, a statement timeout while another session holds the
    table) is the database failing, not a bug of ours: one line, exit 2, no traceback."""
    node = await make_node("FAILS")
    await node.wiscat("link", "add", "peer", "--url", PEER, "--set", "WIS-GISC-PEER")
    conn = await connect(node.database_url)
    try:
        await conn.execute(
            "do $$ begin execute format('alter database %I set statement_timeout = 1500', "
            "current_database()); end $$"
        )
        async with conn.transaction():
            await conn.execute("lock table links in access exclusive mode")
            code, out, err = await node.wiscat("link", "list", check=False)
    finally:
        await conn.close()
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        "wiscat: the database failed: canceling statement due to statement timeout"
    )
    assert "Traceback" not in err


async def test_a_link_to_the_node_itself_fails_its_run_and_says_why(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    # a link to this node's own provider (a copied list of GISCs, say) ran, quietly, for ever
    node = await make_node("SELF")
    (tmp_path / "r.xml").write_bytes(generate_record(1, centre="self"))
    await node.wiscat("ingest", str(tmp_path))
    await node.start("provider", f"http://127.0.0.1:{node.provider_port}/readyz")
    # its own base URL is refused at once, by link add and by link set
    for argv in (
        ["link", "add", "self", "--url", node.oai, "--set", "WIS-GISC-X"],
        ["link", "set", "self", "--url", node.oai],
    ):
        if argv[1] == "set":
            await node.wiscat("link", "add", "self", "--url", PEER, "--set", "WIS-GISC-X")
        code, _, err = await node.wiscat(*argv, check=False)
        assert code == 2 and err.splitlines()[-1].endswith(
            f"{node.oai} is this node's own provider: a link to itself harvests nothing"
        ), err
    # reached by another name, it is known by its Identify, which names the BASE_URL set here
    alias = node.oai.replace("127.0.0.1", "localhost")
    await node.wiscat("link", "add", "alias", "--url", alias, "--set", "WIS-GISC-X")
    code, out, err = await node.wiscat("harvest", "alias", check=False)
    assert code == 1, (out, err)
    reason = (
        f"{alias} is this node's own provider ({node.oai}): a link to itself harvests nothing "
        "new; remove it"
    )
    assert f"LinkToItself: {reason}" in out + err
    _, listed, _ = await node.wiscat("link", "list", "--json")
    assert {link["name"]: link["last_error"] for link in json.loads(listed)}["alias"] == reason


async def test_ingest_reads_a_record_from_standard_input(make_node: NodeFactory) -> None:
    # `curl ... | wiscat ingest -` said "no such file or folder: -"
    node = await make_node("STDIN")
    record = generate_record(3, centre="stdin")
    code, out, err = await node.wiscat("ingest", "-", stdin=record)
    assert (code, out) == (0, "WIS-GISC-STDIN: added 1, bad 0\n"), err
    code, out, err = await node.wiscat("ingest", "-", stdin=record)
    assert (code, out) == (0, "WIS-GISC-STDIN: unchanged 1, bad 0\n"), err
    code, out, err = await node.wiscat("ingest", "-", stdin=b"<not-a-record/>", check=False)
    assert code == 1 and "bad: -: root element is not-a-record, expected gmd:MD_Metadata" in err
    code, _, err = await node.wiscat("ingest", "-", "-", stdin=record, check=False)
    assert (code, err.splitlines()[-1]) == (2, "wiscat: '-' (standard input) may be given once")


async def test_delete_reads_identifiers_from_standard_input(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    # thousands of identifiers do not fit a command line; xargs split them over many processes
    node = await make_node("DELSTDIN")
    for n in range(3):
        (tmp_path / f"r{n}.xml").write_bytes(generate_record(n, centre="del"))
    await node.wiscat("ingest", str(tmp_path))
    ids = [identifier_for(n, "del") for n in range(3)]
    piped = f"{ids[0]}\n\n  {ids[1]}  \n".encode()
    code, out, err = await node.wiscat("delete", ids[2], "-", stdin=piped)
    assert (code, out) == (0, "".join(f"deleted: {i}\n" for i in (ids[2], ids[0], ids[1]))), err
    code, out, err = await node.wiscat("delete", "-", stdin=b"urn:x:none\n", check=False)
    assert code == 1 and "not deleted: urn:x:none: no live record in WIS-GISC-DELSTDIN" in err


async def test_another_gisc_name_on_a_node_s_database_is_refused(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    """A typo in WISCAT_GISC_NAME made a second own set in the database: the node's records,
    in a set now taken for a remote one, lost the own set's protection (invariant 6), and its
    provider announced another GISC."""
    node = await make_node("NAMED")
    (tmp_path / "r.xml").write_bytes(generate_record(1, centre="named"))
    await node.wiscat("ingest", str(tmp_path))
    node.extra["WISCAT_GISC_NAME"] = "NAMEDD"
    for argv in (["link", "list"], ["ingest", str(tmp_path)]):
        code, out, err = await node.wiscat(*argv, check=False)
        assert (code, out) == (2, ""), err
        assert err.splitlines()[-1] == (
            "wiscat: this database belongs to the node whose own set is WIS-GISC-NAMED, and "
            "WISCAT_GISC_NAME=NAMEDD names WIS-GISC-NAMEDD: set WISCAT_GISC_NAME=NAMED, or point "
            "WISCAT_DATABASE_URL (or WISCAT_DATA_DIR) at this node's own database"
        )
    conn = await connect(node.database_url)
    try:
        assert await conn.fetchval("select count(*) from sets where kind = 'own'") == 1
    finally:
        await conn.close()
    node.extra["WISCAT_GISC_NAME"] = "NAMED"
    await node.wiscat("link", "list")
