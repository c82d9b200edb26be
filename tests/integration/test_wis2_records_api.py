"""The WCMP2 records collection of the provider (OGC API - Records): a real provider on loopback,
a real PostgreSQL, rows stored as the renderer stores them from the real mapping of generated
records. Every record answer is the exact bytes stored, which the sha512 of a notification names,
gzip or not; a revision's URL keeps its bytes; pages walk every record once."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from multidict import CIMultiDict
from yarl import URL

from tests.support import factories, wis2_rows
from tests.support.servers import RunningProvider, running_provider
from tests.support.wcmp2_suite import SCHEMA, failures, session_suite
from wiscat.shared.db import wis2
from wiscat.shared.generator import identifier_for
from wiscat.shared.wcmp2 import messages
from wiscat.shared.wcmp2.centres import parse_rules
from wiscat.shared.wcmp2.urls import collection_url, item_url
from wiscat.shared.wcmp2.validation import load_schema, schema_errors

CENTRES = "de-dwd=prefix:urn:x-wmo:md:int.wmo.wis::"
HOSTILE_IDS = [
    "urn:wmo:md:de-dwd:a/b/revisions/c",
    "urn:wmo:md:de-dwd:~100% sure",
    "urn:wmo:md:de-dwd:%2F",
    "urn:wmo:md:de-dwd:Zürich?x=1#y",
    "urn:wmo:md:de-dwd:..",
]


@pytest.fixture
async def provider(database_url: str) -> AsyncIterator[RunningProvider]:
    async with running_provider(database_url, wis2_centres=CENTRES) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    # the bytes as sent: no decompression here, and URLs taken as they are encoded
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield session


async def get(
    client: aiohttp.ClientSession, url: str, **headers: str
) -> tuple[int, CIMultiDict[str], bytes]:
    """Status, headers and body (gunzipped when gzip was sent) of GET ``url`` as encoded."""
    headers.setdefault("Accept-Encoding", "identity")
    async with client.get(URL(url, encoded=True), headers=headers) as response:
        body = await response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return response.status, CIMultiDict(response.headers), body


def base(provider: RunningProvider) -> str:
    return collection_url(provider.settings.base_url)


async def test_an_item_is_the_bytes_stored_gzip_or_not(
    provider: RunningProvider, db: asyncpg.Pool, client: aiohttp.ClientSession
) -> None:
    row = await wis2_rows.store(db, wis2_rows.rendered(7, oai_base_url=provider.settings.base_url))
    schema = load_schema(SCHEMA)
    for encoding in ("identity", "gzip"):
        status, headers, body = await get(
            client, item_url(base(provider), row.wcmp2_id), **{"Accept-Encoding": encoding}
        )
        assert status == 200
        assert headers["Content-Type"] == "application/geo+json"
        assert headers.get("Content-Encoding", "identity") == encoding
        assert body == row.content
        assert base64.b64encode(hashlib.sha512(body).digest()).decode() == row.sha512
        assert headers["ETag"] == f'"{row.revision}"'
        assert schema_errors(json.loads(body), schema) == []
    stored = await db.fetchval("select content from wis2_records where wcmp2_id = $1", row.wcmp2_id)
    assert hashlib.sha512(stored).hexdigest()[:16] == row.revision


async def test_a_revision_url_keeps_its_bytes_after_a_new_revision(
    provider: RunningProvider, db: asyncpg.Pool, client: aiohttp.ClientSession
) -> None:
    old = await wis2_rows.store(db, wis2_rows.rendered(3))
    new = await wis2_rows.store(db, wis2_rows.rendered(3, version=2))
    assert (old.wcmp2_id, old.content != new.content) == (new.wcmp2_id, True)
    for row in (old, new):
        status, headers, body = await get(
            client, item_url(base(provider), row.wcmp2_id, row.revision)
        )
        assert (status, body) == (200, row.content)
        assert headers["Cache-Control"] == "public, max-age=31536000, immutable"
        assert headers["ETag"] == f'"{row.revision}"'
    status, headers, body = await get(client, item_url(base(provider), new.wcmp2_id))
    assert (status, headers["ETag"], body) == (200, f'"{new.revision}"', new.content)


async def test_if_none_match_answers_304_until_the_record_changes(
    provider: RunningProvider, db: asyncpg.Pool, client: aiohttp.ClientSession
) -> None:
    old = await wis2_rows.store(db, wis2_rows.rendered(5))
    url = item_url(base(provider), old.wcmp2_id)
    for asked in (f'"{old.revision}"', f'W/"{old.revision}"', f'"x", "{old.revision}"', "*"):
        status, headers, body = await get(client, url, **{"If-None-Match": asked})
        assert (status, body, headers["ETag"]) == (304, b"", f'"{old.revision}"')
    status, _, body = await get(client, url, **{"If-None-Match": '"0000000000000000"'})
    assert (status, body) == (200, old.content)
    new = await wis2_rows.store(db, wis2_rows.rendered(5, version=1))
    status, headers, body = await get(client, url, **{"If-None-Match": f'"{old.revision}"'})
    assert (status, body, headers["ETag"]) == (200, new.content, f'"{new.revision}"')
    revision = item_url(base(provider), old.wcmp2_id, old.revision)
    status, _, body = await get(client, revision, **{"If-None-Match": f'"{old.revision}"'})
    assert (status, body) == (304, b"")


async def test_unknown_and_deleted_records(
    provider: RunningProvider, db: asyncpg.Pool, client: aiohttp.ClientSession
) -> None:
    row = await wis2_rows.store(db, wis2_rows.rendered(4))
    await wis2_rows.delete(db, row.wcmp2_id)
    status, headers, body = await get(client, item_url(base(provider), row.wcmp2_id))
    assert status == 410
    assert headers["Content-Type"] == "application/json"
    assert "is deleted" in json.loads(body)["detail"]
    # its revisions stay served while kept
    status, _, body = await get(client, item_url(base(provider), row.wcmp2_id, row.revision))
    assert (status, body) == (200, row.content)
    for url in (
        item_url(base(provider), "urn:wmo:md:de-dwd:nothing"),
        item_url(base(provider), row.wcmp2_id, "0000000000000000"),
        item_url(base(provider), "urn:wmo:md:de-dwd:nul\x00"),
        f"{base(provider)}/items/%FF%FE",
        f"{base(provider)}/items/{row.wcmp2_id}/other/{row.revision}",
        f"{base(provider)}/items/",
    ):
        status, headers, body = await get(client, url)
        assert status == 404, url
        assert json.loads(body)["detail"], url
    # deleted: in no page
    status, _, body = await get(client, f"{base(provider)}/items")
    assert json.loads(body)["numberMatched"] == 0


async def test_hostile_ids_in_urls(
    provider: RunningProvider, db: asyncpg.Pool, client: aiohttp.ClientSession
) -> None:
    rows = [
        await wis2_rows.store(db, wis2_rows.rendered(n), wcmp2_id=identifier)
        for n, identifier in enumerate(HOSTILE_IDS)
    ]
    for row in rows:
        for revision in (None, row.revision):
            status, _, body = await get(client, item_url(base(provider), row.wcmp2_id, revision))
            assert (status, body) == (200, row.content), row.wcmp2_id
    # "a/b/revisions/c", its "/" not encoded: revision "c" of record "a/b", which is none
    status, _, _ = await get(client, f"{base(provider)}/items/urn:wmo:md:de-dwd:a/b/revisions/c")
    assert status == 404


async def test_paging_walks_every_item_once(
    provider: RunningProvider,
    db: asyncpg.Pool,
    client: aiohttp.ClientSession,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Every record once, in id order, each as stored and, as served, valid by the WCMP2
    schema and pywcmp's suite (12 of 12)."""
    schema = load_schema(SCHEMA)
    suite = session_suite(tmp_path_factory)
    rows = {}
    for n in range(23):
        row = await wis2_rows.store(db, wis2_rows.rendered(n))
        rows[row.wcmp2_id] = row
    deleted = await wis2_rows.store(db, wis2_rows.rendered(99))
    await wis2_rows.delete(db, deleted.wcmp2_id)
    seen: list[str] = []
    url: str | None = f"{base(provider)}/items?limit=5"
    pages = 0
    while url is not None:
        status, headers, body = await get(client, url, **{"Accept-Encoding": "gzip"})
        assert status == 200
        assert headers["Content-Type"] == "application/geo+json"
        page = json.loads(body)
        assert page["type"] == "FeatureCollection"
        assert page["numberMatched"] == 23
        assert page["numberReturned"] == len(page["features"]) <= 5
        # each feature is the stored bytes, joined as they are
        for feature in page["features"]:
            seen.append(feature["id"])
            assert rows[feature["id"]].content in body
            assert schema_errors(feature, schema) == []
            assert failures(suite.run(feature)) == [], feature["id"]
        links = _links(page)
        assert links["self"] == url if "offset" in url else links["self"].endswith("offset=0")
        if pages:
            assert "prev" in links
        url = links.get("next")
        pages += 1
    assert pages == 5
    assert sorted(seen) == seen == sorted(rows)
    status, _, body = await get(client, f"{base(provider)}/items?limit=10&offset=20")
    page = json.loads(body)
    assert (page["numberReturned"], "next" in _links(page)) == (3, False)
    assert _links(page)["prev"].endswith("limit=10&offset=10")
    status, _, body = await get(client, f"{base(provider)}/items?offset=500")
    page = json.loads(body)
    assert (status, page["numberReturned"], page["features"]) == (200, 0, [])
    status, _, body = await get(client, f"{base(provider)}/items")
    assert json.loads(body)["numberReturned"] == 10  # the default limit


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=1001",
        "limit=-1",
        "limit=ten",
        "offset=-1",
        "offset=x",
        "offset=2147483648",
    ],
)
async def test_bad_limit_or_offset_is_400_with_a_reason(
    provider: RunningProvider, client: aiohttp.ClientSession, query: str
) -> None:
    status, _, body = await get(client, f"{base(provider)}/items?{query}")
    assert status == 400
    answer = json.loads(body)
    assert answer["detail"] == "bad request"
    assert answer["errors"][0]["loc"] == ["query", query.partition("=")[0]]


async def test_the_collection_documents(
    provider: RunningProvider, client: aiohttp.ClientSession
) -> None:
    root = provider.root
    status, _, body = await get(client, f"{root}/collections")
    [described] = json.loads(body)["collections"]
    assert status == 200
    assert described["id"] == "wis2-discovery-metadata"
    status, _, body = await get(client, base(provider))
    assert (status, json.loads(body)) == (200, described)
    assert {link["rel"]: link["href"] for link in described["links"]} == {
        "self": base(provider),
        "items": base(provider) + "/items",
    }


@pytest.mark.parametrize(
    ("overrides", "served"),
    [
        ({}, False),
        ({"wis2_centres": CENTRES, "wis2_records": False}, False),
        ({"wis2_records": True}, True),
        ({"wis2_centres": CENTRES}, True),
    ],
)
async def test_switched_off_the_collection_is_404(
    database_url: str,
    db: asyncpg.Pool,
    client: aiohttp.ClientSession,
    overrides: dict[str, Any],
    served: bool,
) -> None:
    row = await wis2_rows.store(db, wis2_rows.rendered(2))
    async with running_provider(database_url, **overrides) as provider:
        collection = collection_url(provider.settings.base_url)
        for url in (
            f"{provider.root}/collections",
            collection,
            collection + "/items",
            item_url(collection, row.wcmp2_id),
            item_url(collection, row.wcmp2_id, row.revision),
        ):
            status, _, body = await get(client, url)
            assert status == (200 if served else 404), url
            if not served:
                assert "WISCAT_WIS2_RECORDS" in json.loads(body)["detail"]


def _links(page: dict[str, Any]) -> dict[str, str]:
    return {link["rel"]: link["href"] for link in page["links"]}


async def test_every_message_link_answers_the_bytes_its_integrity_names(
    provider: RunningProvider, db: asyncpg.Pool, client: aiohttp.ClientSession
) -> None:
    """End to end with the renderer (wiscat.shared.db.wis2): records of the own set rendered,
    their messages built; a GET of each message's link answers the bytes its integrity and
    length name; a deletion's link answers 410."""
    how = wis2.Rendering(
        provider.settings.own_set,
        parse_rules("de-dwd;de-dwd=licence:https://www.dwd.de/terms"),
        provider.settings.base_url,
    )
    collection = base(provider)
    await factories.load_records(db, provider.settings.own_set, range(6))
    await wis2.render(db, how)
    first = [messages.message(row, collection) for row in await wis2.pending(db, 100)]
    await wis2.mark_sent(db, [m["id"] for m in first])
    await factories.load_records(db, provider.settings.own_set, [2], version=1)
    await factories.delete(db, provider.settings.own_set, [identifier_for(3)])
    await wis2.render(db, how)
    later = [messages.message(row, collection) for row in await wis2.pending(db, 100)]
    assert sorted(m["links"][0]["rel"] for m in first) == ["canonical"] * 6
    assert sorted(m["links"][0]["rel"] for m in later) == ["deletion", "update"]
    for sent in first + later:
        [link] = sent["links"]
        status, headers, body = await get(client, link["href"], **{"Accept-Encoding": "gzip"})
        if link["rel"] == "deletion":
            assert status == 410, link
            continue
        assert (status, headers["Content-Type"]) == (200, "application/geo+json"), link
        assert len(body) == link["length"]
        digest = base64.b64encode(hashlib.sha512(body).digest()).decode()
        assert digest == sent["properties"]["integrity"]["value"]
        assert json.loads(body)["id"] == sent["properties"]["metadata_id"]
