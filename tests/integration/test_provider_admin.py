"""Admin API, ingest of folders with bad files, and the health and metrics endpoints."""

from __future__ import annotations

import asyncio
import io
import os
import re
import secrets
import string
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from tests.support import factories
from tests.support.servers import RunningProvider, running_provider
from wiscat.shared.db import links as link_store
from wiscat.shared.db import records as store
from wiscat.shared.db.pool import Pool
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.ingest import ingest_paths

OWN = "WIS-GISC-TEST"
AUTH = {"Authorization": "Bearer test-admin-token"}


@pytest.fixture
async def provider(db: Pool, database_url: str) -> AsyncIterator[RunningProvider]:
    async with running_provider(database_url) as running:
        yield running


async def request(method: str, url: str, **kwargs: object) -> tuple[int, object]:
    async with aiohttp.ClientSession() as session, session.request(method, url, **kwargs) as r:  # type: ignore[arg-type]
        body = await r.json() if r.content_type == "application/json" else await r.text()
        return r.status, body


async def test_put_and_delete_records(provider: RunningProvider, db: Pool) -> None:
    identifier = identifier_for(7)
    url = f"{provider.root}/admin/records/{identifier}"
    record = generate_record(7)
    status, _ = await request("PUT", url, data=record)
    assert status == 401
    status, _ = await request("PUT", url, data=record, headers={"Authorization": "Bearer wrong"})
    assert status == 401
    status, body = await request("PUT", url, data=record, headers=AUTH)
    assert (status, body) == (201, {"identifier": identifier, "outcome": "added"})
    status, body = await request("PUT", url, data=record, headers=AUTH)
    assert (status, body) == (200, {"identifier": identifier, "outcome": "unchanged"})
    status, body = await request("DELETE", url, headers=AUTH)
    assert (status, body) == (200, {"identifier": identifier, "outcome": "deleted"})
    assert await db.fetchval("select deleted from records where identifier = $1", identifier)
    status, _ = await request("DELETE", url, headers=AUTH)
    assert status == 404
    # an identifier no record can have (the database's text cannot hold U+0000)
    status, _ = await request("DELETE", f"{provider.root}/admin/records/a%00b", headers=AUTH)
    assert status == 404


async def test_a_record_sent_slowly_is_not_cut_off_by_the_database_deadline(
    db: Pool, database_url: str
) -> None:
    """The deadline on the database (1 s here) counts from the body's last piece: a record
    PUT over a slow line, 2 s in all, is stored, not answered 503."""
    identifier = identifier_for(8)
    record = generate_record(8)

    async def slowly() -> AsyncIterator[bytes]:
        for start in range(0, len(record), len(record) // 8 + 1):
            await asyncio.sleep(0.25)
            yield record[start : start + len(record) // 8 + 1]

    async with running_provider(database_url, database_timeout_seconds=1) as provider:
        url = f"{provider.root}/admin/records/{identifier}"
        status, body = await request("PUT", url, data=slowly(), headers=AUTH)
    assert (status, body) == (201, {"identifier": identifier, "outcome": "added"})


async def test_a_put_older_than_the_stored_copy_is_a_conflict(
    provider: RunningProvider, db: Pool
) -> None:
    identifier = identifier_for(8)
    url = f"{provider.root}/admin/records/{identifier}"
    newer = generate_record(8, md_datestamp=datetime(2025, 6, 1, tzinfo=UTC))
    older = generate_record(8, version=1, md_datestamp=datetime(2024, 6, 1, tzinfo=UTC))
    undated = re.sub(rb"<gmd:dateStamp>.*?</gmd:dateStamp>", b"", generate_record(8, version=2))
    assert (await request("PUT", url, data=newer, headers=AUTH))[0] == 201
    status, body = await request("PUT", url, data=older, headers=AUTH)
    assert (status, body) == (
        409,
        {"detail": "record refused: its gmd:dateStamp is older than the stored copy's"},
    )
    status, body = await request("PUT", url, data=undated, headers=AUTH)
    assert (status, body) == (
        409,
        {"detail": "record refused: it has no gmd:dateStamp and the stored copy has one"},
    )
    assert await db.fetchval("select md_datestamp from records") == datetime(2025, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'>", "well-formed"),
        (b"<html><body>hello</body></html>", "MD_Metadata"),
        (
            b"<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'/>",
            "fileIdentifier",
        ),
    ],
)
async def test_bad_records_are_refused_and_nothing_is_stored(
    provider: RunningProvider, db: Pool, body: bytes, reason: str
) -> None:
    status, detail = await request(
        "PUT", f"{provider.root}/admin/records/some-id", data=body, headers=AUTH
    )
    assert status == 400
    assert reason in str(detail)
    assert await db.fetchval("select count(*) from records") == 0


async def test_a_body_larger_than_a_record_is_refused(provider: RunningProvider, db: Pool) -> None:
    url = f"{provider.root}/admin/records/{identifier_for(1)}"
    too_big = io.BytesIO(b" " * (20 * 1024 * 1024 + 1))
    status, body = await request("PUT", url, data=too_big, headers=AUTH)
    assert (status, body) == (413, {"detail": "a record may be at most 20971520 bytes"})
    assert await db.fetchval("select count(*) from records") == 0


async def test_identifier_must_match_the_url(provider: RunningProvider, db: Pool) -> None:
    status, detail = await request(
        "PUT", f"{provider.root}/admin/records/other-id", data=generate_record(1), headers=AUTH
    )
    assert status == 400 and "fileIdentifier" in str(detail)
    assert await db.fetchval("select count(*) from records") == 0


# What OAI-PMH.xsd refuses as an identifier (xs:anyURI), and why, as the refusal says it
NO_URI = "urn:x-wmo:md:int.wmo.wis::grid[1]"
NO_URI_REASON = (
    f"gmd:fileIdentifier {NO_URI!r} is not a URI, as an OAI-PMH identifier must be "
    "(xs:anyURI): '[' or ']' outside the fragment and a host in brackets"
)


def _with_identifier(record: bytes, identifier: str) -> bytes:
    return re.sub(
        rb"(<gmd:fileIdentifier><gco:CharacterString>)[^<]*",
        rb"\g<1>" + identifier.encode(),
        record,
    )


async def test_a_record_whose_identifier_no_oai_answer_can_carry_is_refused(
    provider: RunningProvider, db: Pool
) -> None:
    """P01: every answer that listed it failed OAI-PMH.xsd, for every harvester that validates;
    it is refused with the reason and nothing is stored."""
    record = _with_identifier(generate_record(1), NO_URI)
    url = f"{provider.root}/admin/records/{NO_URI.replace('[', '%5B').replace(']', '%5D')}"
    status, body = await request("PUT", url, data=record, headers=AUTH)
    assert (status, body) == (400, {"detail": f"record refused: {NO_URI_REASON}"})
    assert await db.fetchval("select count(*) from records") == 0


async def test_ingest_refuses_a_record_whose_identifier_is_no_uri(tmp_path: Path, db: Pool) -> None:
    """P01: as the admin API does; the folder's other records are stored."""
    (tmp_path / "good.xml").write_bytes(generate_record(1))
    (tmp_path / "grid.xml").write_bytes(_with_identifier(generate_record(2), NO_URI))
    (tmp_path / "hash.xml").write_bytes(_with_identifier(generate_record(3), "urn:x#a#b"))
    report = await ingest_paths(db, OWN, [tmp_path])
    assert report.counts == {"added": 1}
    assert report.refused == [
        (str(tmp_path / "grid.xml"), NO_URI_REASON),
        (
            str(tmp_path / "hash.xml"),
            "gmd:fileIdentifier 'urn:x#a#b' is not a URI, as an OAI-PMH identifier must be "
            "(xs:anyURI): more than one '#'",
        ),
    ]
    stored = await db.fetch("select identifier from records")
    assert [r["identifier"] for r in stored] == [identifier_for(1)]


@pytest.mark.parametrize(
    ("method", "path", "json"),
    [
        ("DELETE", "/admin/links/a%00b", None),
        ("POST", "/admin/links/a%00b/harvest", None),
        ("DELETE", "/admin/checks/a%00b", None),
        ("POST", "/admin/checks/a%00b/run", None),
        ("GET", "/admin/runs?link=a%00b", None),
        ("GET", "/admin/quarantine?link=a%00b", None),
        ("GET", "/admin/check-reports?check=a%00b", None),
    ],
)
async def test_text_no_database_can_hold_is_a_bad_request(
    provider: RunningProvider, db: Pool, method: str, path: str, json: object
) -> None:
    # U+0000 (%00 in a URL, \u0000 in JSON): PostgreSQL's text cannot hold it
    status, body = await request(method, provider.root + path, headers=AUTH, json=json)
    assert status == 400, body
    assert body == {"detail": "bad request: the request holds U+0000, which no text here can hold"}
    # nothing was written, and the provider goes on answering
    assert await db.fetchval("select count(*) from links") == 0
    status, _ = await request("GET", provider.root + "/admin/links", headers=AUTH)
    assert status == 200


PEER = "http://x.example/oai"
# random letters: a run of one letter would compress small enough to be indexed
LONG = "".join(secrets.choice(string.ascii_letters) for _ in range(9000))


@pytest.mark.parametrize(
    ("method", "path", "json", "reason"),
    [
        ("POST", "/admin/links", {"name": "a b", "url": PEER, "set": "S"}, "link name 'a b'"),
        ("POST", "/admin/links", {"name": "a\u0000b", "url": PEER, "set": "S"}, "link name"),
        ("POST", "/admin/links", {"name": "registry-1", "url": PEER, "set": "S"}, "registry adds"),
        # a name of thousands of characters could not be indexed: it was a 500
        ("POST", "/admin/links", {"name": LONG, "url": PEER, "set": "S"}, "at most 100 letters"),
        (
            "PUT",
            f"/admin/checks/{LONG}",
            {"set": "S", "source": PEER, "peers": [PEER + "2"]},
            "at most 100",
        ),
        ("POST", "/admin/links", {"name": "x", "url": PEER, "set": "S", "window_slices": -1}, ""),
        # numbers past what the database or a date can hold: they were 500s
        (
            "POST",
            "/admin/links",
            {"name": "x", "url": PEER, "set": "S", "window_slices": 10**11},
            "",
        ),
        (
            "POST",
            "/admin/links",
            {"name": "x", "url": PEER, "set": "S", "every": "9999999999d"},
            "",
        ),
        (
            "PUT",
            "/admin/checks/c",
            {"set": "S", "source": PEER, "peers": [PEER], "sample": 10**11},
            "",
        ),
        ("POST", "/admin/links", {"name": "x", "url": PEER, "into": "my set"}, "--into 'my set'"),
        ("POST", "/admin/links", {"name": "x", "url": "http://x:0/oai", "set": "S"}, "http(s)"),
        ("PUT", "/admin/checks/c", {"set": "a b", "source": PEER, "peers": [PEER]}, "'a b'"),
        ("PUT", "/admin/checks/c", {"set": "S", "source": PEER, "peers": [PEER + "?x"]}, "query"),
        # a set compared with itself, or twice with one peer: a report that can only mislead
        ("PUT", "/admin/checks/c", {"set": "S", "source": PEER, "peers": [PEER]}, "source itself"),
        (
            "PUT",
            "/admin/checks/c",
            {"set": "S", "source": PEER, "peers": [PEER + "2", PEER + "2"]},
            "given twice",
        ),
    ],
)
async def test_a_link_or_check_that_cannot_work_is_refused(
    provider: RunningProvider, db: Pool, method: str, path: str, json: object, reason: str
) -> None:
    status, body = await request(method, provider.root + path, headers=AUTH, json=json)
    assert status == 400, body
    assert isinstance(body, dict) and reason in body["detail"]
    assert body["detail"].startswith(("link refused: ", "check refused: "))
    assert await db.fetchval("select count(*) from links") == 0
    assert await db.fetchval("select count(*) from checks") == 0


async def test_a_link_is_changed_by_patch(provider: RunningProvider, db: Pool) -> None:
    """The admin API could add and remove links, not change one: a new interval or prefix
    meant removing the link (its runs with it) and a full harvest of the peer's set again."""
    url = f"{provider.root}/admin/links/peer"
    status, _ = await request(
        "POST", f"{provider.root}/admin/links", json={"name": "peer", "url": PEER, "set": "S"},
        headers=AUTH,
    )  # fmt: skip
    assert status == 201
    await db.execute("update links set high_water_mark = '2026-01-02T03:04:05Z'")
    assert (await request("PATCH", url, json={"every": "10m"}))[0] == 401
    status, body = await request(
        "PATCH", url, json={"every": "10m", "window_slices": 4, "enabled": False}, headers=AUTH
    )
    assert status == 200, body
    assert isinstance(body, dict) and body["changed"] == ["schedule", "enabled"]
    assert (body["every"], body["window_slices"], body["enabled"]) == (600, 4, False)
    assert body["high_water_mark"] is not None  # a new schedule keeps the mark
    status, body = await request("PATCH", url, json={"prefix": "iso19139.wmo"}, headers=AUTH)
    assert isinstance(body, dict) and body["changed"] == ["source"]
    assert (body["metadata_prefix"], body["high_water_mark"]) == ("iso19139.wmo", None)
    status, body = await request("PATCH", url, json={"prefix": "iso19139.wmo"}, headers=AUTH)
    assert (status, isinstance(body, dict) and body["changed"]) == (200, [])
    for change, reason in [
        ({"every": "soon"}, "'soon'"),
        ({"url": "ftp://x/oai"}, "not an http(s) URL"),
        ({"strategy": "GetRecord"}, "strategy is ListRecords or ListIdentifiers"),
        ({"window_slices": -1}, "--window-slices is 0 (off)"),
    ]:
        status, body = await request("PATCH", url, json=change, headers=AUTH)
        assert status == 400 and isinstance(body, dict), body
        assert body["detail"].startswith("link not changed: ") and reason in body["detail"]
    status, _ = await request("PATCH", url.replace("peer", "nope"), json={}, headers=AUTH)
    assert status == 404
    # a misspelt field is refused: it was dropped, and nothing changed, with 200
    for method, path, body in [
        ("PATCH", url, {"evrey": "1m"}),
        ("POST", f"{provider.root}/admin/links", {"name": "b", "url": PEER, "evrey": "1m"}),
    ]:
        status, answer = await request(method, path, json=body, headers=AUTH)
        assert status == 400 and isinstance(answer, dict), answer
        assert {"loc": ["body", "evrey"], "msg": "Extra inputs are not permitted"} in answer[
            "errors"
        ]
    # a value of another JSON type, or null, is refused: "yes" was taken as true, "4" as 4, and
    # null as a field left out (200, nothing changed)
    for change, where, message in [
        ({"enabled": "yes"}, ["body", "enabled"], "Input should be a valid boolean"),
        ({"window_slices": "4"}, ["body", "window_slices"], "Input should be a valid integer"),
        ({"url": None}, ["body"], "url: null is no value here"),
    ]:
        status, answer = await request("PATCH", url, json=change, headers=AUTH)
        assert status == 400 and isinstance(answer, dict), answer
        [error] = answer["errors"]
        assert error["loc"] == where and message in error["msg"], error
    row = await db.fetchrow("select every, metadata_prefix, base_url, enabled from links")
    assert (row["every"], row["metadata_prefix"], row["base_url"], row["enabled"]) == (
        timedelta(minutes=10), "iso19139.wmo", PEER, False
    )  # fmt: skip


async def test_a_listed_link_can_be_sent_back(provider: RunningProvider, db: Pool) -> None:
    """Durations are listed in seconds; they are taken in seconds too, besides "1h" and the
    like, so that a link listed can be posted again (another node, a restore) as it is."""
    links = f"{provider.root}/admin/links"
    new = {"name": "peer", "url": PEER, "set": "S", "every": "30m", "full_every": "3d"}
    assert (await request("POST", links, json=new, headers=AUTH))[0] == 201
    status, [listed] = await request("GET", links, headers=AUTH)
    assert (listed["every"], listed["full_every"], listed["overlap"]) == (1800, 259200, 0)
    again = {key: listed[key] for key in ("every", "full_every", "overlap", "window_slices")}
    again |= {"name": "copy", "url": listed["base_url"], "set": listed["remote_set"]}
    status, body = await request("POST", links, json=again, headers=AUTH)
    assert status == 201, body
    assert {k: body[k] for k in ("every", "full_every", "overlap")} == {
        "every": 1800, "full_every": 259200, "overlap": 0
    }  # fmt: skip
    status, body = await request("PATCH", f"{links}/copy", json={"every": 90.5}, headers=AUTH)
    assert (status, body["every"]) == (200, 90.5)
    status, body = await request("PATCH", f"{links}/copy", json={"every": -60}, headers=AUTH)
    assert status == 400 and "-60 seconds: a duration is not negative" in body["detail"], body


async def test_harvest_now_is_refused_for_a_disabled_link(
    provider: RunningProvider, db: Pool
) -> None:
    """A disabled link never runs: "harvest now" said 202 "requested" and nothing happened (until
    someone enabled the link, which then ran at once)."""
    status, _ = await request(
        "POST",
        f"{provider.root}/admin/links",
        json={"name": "peer", "url": PEER, "set": "S"},
        headers=AUTH,
    )
    assert status == 201
    now = f"{provider.root}/admin/links/peer/harvest"
    assert await request("POST", now + "?full=true", headers=AUTH) == (
        202,
        {"link": "peer", "requested": "full"},
    )
    await db.execute("update links set run_requested = null, next_run_at = now() + interval '1h'")
    await link_store.set_enabled(db, "peer", False)
    status, body = await request("POST", now, headers=AUTH)
    assert (status, body) == (409, {"detail": "link peer is disabled: enable it first"})
    assert await db.fetchval("select run_requested from links") is None
    assert await db.fetchval("select next_run_at > now() from links")
    status, body = await request("POST", f"{provider.root}/admin/links/nope/harvest", headers=AUTH)
    assert (status, body) == (404, {"detail": "no link named 'nope'"})


async def test_run_now_is_refused_for_a_disabled_check(provider: RunningProvider, db: Pool) -> None:
    """As with links: a disabled check never runs, so "run now" is refused, not 202."""
    check = {"set": "S", "source": PEER, "peers": [PEER + "2"], "enabled": False}
    url = f"{provider.root}/admin/checks/c"
    assert (await request("PUT", url, json=check, headers=AUTH))[0] == 200
    before = await db.fetchval("select next_run_at from checks")
    status, body = await request("POST", url + "/run", headers=AUTH)
    assert (status, body) == (409, {"detail": "check c is disabled: enable it first"})
    assert await db.fetchval("select next_run_at from checks") == before
    assert (await request("PUT", url, json={**check, "enabled": True}, headers=AUTH))[0] == 200
    status, body = await request("POST", url + "/run", headers=AUTH)
    assert (status, body) == (202, {"check": "c", "requested": True})
    status, body = await request("POST", f"{provider.root}/admin/checks/nope/run", headers=AUTH)
    assert (status, body) == (404, {"detail": "no check named 'nope'"})


@pytest.mark.parametrize("report", ["0", "-1", "123", str(2**63), "9" * 30])
async def test_a_report_that_does_not_exist_is_not_found(
    provider: RunningProvider, report: str
) -> None:
    # ids past a bigint were a 500: the database could not take them
    status, body = await request(
        "GET", f"{provider.root}/admin/check-reports/{report}", headers=AUTH
    )
    assert (status, body) == (404, {"detail": f"no report {report}"})


async def test_a_malformed_body_says_what_is_wrong_and_nothing_more(
    provider: RunningProvider,
) -> None:
    status, body = await request("PUT", provider.root + "/admin/checks/c", headers=AUTH, json={})
    assert status == 400
    assert isinstance(body, dict) and body["detail"] == "bad request"
    assert {"loc": ["body", "set"], "msg": "Field required"} in body["errors"]
    assert ".py" not in str(body)  # no source location of the server's code


async def test_admin_is_disabled_without_a_token(db: Pool, database_url: str) -> None:
    async with running_provider(database_url, admin_token=None) as running:
        status, detail = await request(
            "PUT", f"{running.root}/admin/records/x", data=b"", headers=AUTH
        )
    assert status == 403 and "WISCAT_ADMIN_TOKEN" in str(detail)


async def test_folder_ingest_keeps_good_files_and_names_bad_ones(tmp_path: Path, db: Pool) -> None:
    for n in range(5):
        (tmp_path / f"good-{n}.xml").write_bytes(generate_record(n))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "broken.xml").write_bytes(b"<gmd:MD_Metadata")
    (tmp_path / "sub" / "wrong-root.xml").write_bytes(b"<html/>")
    with open(tmp_path / "sub" / "huge.xml", "wb") as huge:  # sparse: no disk, never read
        huge.truncate(20 * 1024 * 1024 + 1)
    report = await ingest_paths(db, OWN, [tmp_path])
    assert report.counts["added"] == 5
    reasons = {Path(p).name: reason for p, reason in report.refused}
    assert sorted(reasons) == ["broken.xml", "huge.xml", "wrong-root.xml"]
    assert reasons["huge.xml"] == "larger than 20971520 bytes: not one metadata record"
    assert await db.fetchval("select count(*) from records where not deleted") == 5
    again = await ingest_paths(db, OWN, [tmp_path])
    assert again.counts["unchanged"] == 5


async def test_ingest_reads_only_files_that_can_be_records_and_lists_the_others(
    tmp_path: Path, db: Pool
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "UPPER.XML").write_bytes(generate_record(1))  # any case of the suffix
    os.mkfifo(tmp_path / "in" / "pipe.xml")  # reading it would wait for a writer, for ever
    (tmp_path / "in" / "gone.xml").symlink_to(tmp_path / "removed.xml")  # a link to nothing
    (tmp_path / "in" / "folder.xml").mkdir()  # a folder is walked, not read
    (tmp_path / "in" / "folder.xml" / "inner.xml").write_bytes(generate_record(2))
    os.mkfifo(tmp_path / "given.xml")
    (tmp_path / "empty").mkdir()
    given = [tmp_path / "in", tmp_path / "given.xml", Path("/dev/zero"), tmp_path / "empty"]
    report = await asyncio.wait_for(ingest_paths(db, OWN, given), 30)
    assert report.counts["added"] == 2
    # in a folder too, what looks like a record file but cannot be read is listed, not skipped
    assert report.refused == [
        (
            str(tmp_path / "in" / "gone.xml"),
            f"a link to nothing: {tmp_path}/removed.xml does not exist",
        ),
        (str(tmp_path / "in" / "pipe.xml"), "not a regular file"),
        (str(tmp_path / "given.xml"), "not a regular file"),
        ("/dev/zero", "not a regular file"),
        (str(tmp_path / "empty"), "a folder without any .xml file"),
    ]


async def test_two_files_of_one_identifier_are_not_both_taken(tmp_path: Path, db: Pool) -> None:
    """A copied record whose fileIdentifier was not changed: the later file overwrote the
    earlier in silence (within a batch, counted once). Now it is refused, naming the other."""
    record = generate_record(3)
    (tmp_path / "a.xml").write_bytes(record)
    (tmp_path / "b.xml").write_bytes(
        record.replace(b"</gmd:MD_Metadata>", b"<!--copy--></gmd:MD_Metadata>")
    )
    (tmp_path / "c.xml").write_bytes(generate_record(4))
    (tmp_path / "same.xml").symlink_to(tmp_path / "c.xml")  # the same file by another name
    # a file given again, by itself and within its folder: read once, not refused
    report = await ingest_paths(db, OWN, [tmp_path, tmp_path / "a.xml", tmp_path / "c.xml"])
    assert report.counts == {"added": 2}
    assert report.refused == [
        (
            str(tmp_path / "b.xml"),
            f"the same gmd:fileIdentifier as {tmp_path / 'a.xml'}, read before it in this ingest",
        )
    ]
    stored = await db.fetchval("select xml from records where identifier = $1", identifier_for(3))
    assert "copy" not in stored


async def test_health_ready_and_metrics(provider: RunningProvider, db: Pool) -> None:
    await factories.load_records(db, OWN, range(3))
    status, body = await request("GET", f"{provider.root}/healthz")
    assert status == 200
    status, body = await request("GET", f"{provider.root}/readyz")
    assert (status, body) == (200, {"ready": True})
    await request("GET", f"{provider.oai}?verb=Identify")
    await request("GET", f"{provider.oai}?verb=Bogus")
    await request("GET", f"{provider.oai}?verb=ListRecords&metadataPrefix=iso19139")
    status, text = await request("GET", f"{provider.root}/metrics")
    assert status == 200
    assert 'wiscat_oai_requests_total{outcome="ok",verb="Identify"} 1.0' in str(text)
    assert 'wiscat_oai_requests_total{outcome="badVerb",verb="invalid"} 1.0' in str(text)
    assert 'wiscat_oai_records_served_total{verb="ListRecords"} 3.0' in str(text)
    assert f'wiscat_records{{set="{OWN}",status="live"}} 3.0' in str(text)
    assert "wiscat_oai_request_duration_seconds_bucket" in str(text)


async def test_a_set_whose_last_tombstone_is_purged_leaves_the_metrics(
    provider: RunningProvider, db: Pool
) -> None:
    # its last counts (live 0, deleted 2) stayed until the provider restarted
    await factories.load_records(db, "WIS-GISC-GONE", range(2))
    async with db.acquire() as conn, conn.transaction():
        await store.delete_records(conn, "WIS-GISC-GONE", [identifier_for(0), identifier_for(1)])
    _, text = await request("GET", f"{provider.root}/metrics")
    assert 'wiscat_records{set="WIS-GISC-GONE",status="deleted"} 2.0' in str(text)
    assert await store.purge_tombstones(db, timedelta(0)) == 2
    _, text = await request("GET", f"{provider.root}/metrics")
    assert "WIS-GISC-GONE" not in str(text)
    assert 'wiscat_catalogue_records{status="deleted"} 0.0' in str(text)


async def test_readyz_reports_an_old_schema(provider: RunningProvider, db: Pool) -> None:
    await db.execute(
        "delete from schema_migrations where version = (select max(version) from schema_migrations)"
    )
    status, body = await request("GET", f"{provider.root}/readyz")
    assert status == 503 and "run `wiscat migrate`" in str(body)
