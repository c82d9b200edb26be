"""The WIS 2.0 publisher on a real mosquitto (password and ACL files) with a real subscriber: every
message passes both WNM schemas, WMO's test suite (pywis-pubsub 0.12.0, offline) and wiscat's
rules, on the exact topic, QoS 1, not retained; integrity and length are those of the revision's
bytes; a publish the ACL refuses is an error kept on its row and counted, never marked sent."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import pytest
from jsonschema import Draft202012Validator

from tests.support import factories
from tests.support.mosquitto import PUBLISHER, Mosquitto, Subscriber, running_mosquitto
from tests.support.servers import running_provider
from tests.support.wcmp2_suite import SCHEMA as WCMP2_SCHEMA
from tests.support.wnm_suite import Suite as WnmSuite
from tests.support.wnm_suite import session_suite
from wiscat.harvester import wis2 as announcer
from wiscat.harvester.metrics import HarvesterMetrics
from wiscat.shared.db import wis2 as store
from wiscat.shared.generator import identifier_for
from wiscat.shared.settings import Settings
from wiscat.shared.wcmp2.identifiers import wcmp2_id
from wiscat.shared.wcmp2.messages import message_errors

WNM = Path(__file__).parents[2] / ".." / "shared" / "reference" / "wis2" / "wnm"
SCHEMAS = [
    Draft202012Validator(
        json.loads((WNM / name).read_text()), format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    for name in (
        "wis2-notification-message-bundled-1.3.json",
        "wis2-notification-message-bundled-1.4-draft.json",
    )
]
GISC = "HOME"
OWN = f"WIS-GISC-{GISC}"
LICENCE = "de-dwd=licence:https://www.dwd.de/terms"


def settings_for(broker: Mosquitto, centres: str) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None,
        gisc_name=GISC,
        base_url="https://node.example/oai",
        wis2_centres=centres,
        wis2_broker_url=broker.url,
        wis2_broker_user=PUBLISHER[0],
        wis2_broker_password=PUBLISHER[1],
        wis2_poll_seconds=0.2,
        settle_seconds=0,
    )


@pytest.fixture
def broker() -> Iterator[Mosquitto]:
    with running_mosquitto() as running:
        yield running


@pytest.fixture
def subscriber(broker: Mosquitto) -> Iterator[Subscriber]:
    reader = Subscriber(broker)
    yield reader
    reader.close()


class Running:
    def __init__(self, counts: announcer.Counts, stop: asyncio.Event) -> None:
        self.counts, self.stop = counts, stop


async def start(db: asyncpg.Pool, settings: Settings) -> tuple[Running, asyncio.Task[None]]:
    stop = asyncio.Event()
    running = Running(announcer.Counts(metrics=HarvesterMetrics()), stop)
    task = asyncio.create_task(announcer.run_wis2(db, settings, stop, running.counts))
    return running, task


@pytest.fixture
async def announcing(
    db: asyncpg.Pool, broker: Mosquitto
) -> AsyncIterator[tuple[Running, Settings]]:
    settings = settings_for(broker, f"de-dwd;{LICENCE}")
    running, task = await start(db, settings)
    yield running, settings
    running.stop.set()
    await task


@pytest.fixture
def wnm(tmp_path_factory: pytest.TempPathFactory) -> WnmSuite:
    return session_suite(tmp_path_factory)


def check(topic: str, message: dict[str, Any], retain: bool, wnm: WnmSuite) -> None:
    for schema in SCHEMAS:
        assert not list(schema.iter_errors(message)), message
    assert wnm.failures(message) == [], message  # WMO's own test suite, pywis-pubsub
    assert message_errors(message) == []
    centre = message["properties"]["metadata_id"].split(":")[3]
    assert topic == f"origin/a/wis2/{centre}/metadata"
    assert not retain
    [link] = message["links"]
    assert link["type"] == "application/geo+json"


async def wait_until(condition: Any, timeout: float = 20) -> None:
    for _ in range(int(timeout * 20)):
        if await condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


async def test_messages_are_valid_and_name_their_bytes(
    db: asyncpg.Pool, announcing: tuple[Running, Settings], subscriber: Subscriber, wnm: WnmSuite
) -> None:
    await factories.load_records(db, OWN, range(4))
    await factories.load_records(db, "WIS-GISC-AWAY", range(10, 14), kind="remote")
    got = await asyncio.to_thread(subscriber.wait_for, 4)
    await factories.load_records(db, OWN, [1], version=1)
    await factories.delete(db, OWN, [identifier_for(2)])
    got = await asyncio.to_thread(subscriber.wait_for, 6)
    await asyncio.sleep(0.5)
    got = subscriber.messages()
    assert len(got) == 6
    for topic, message, retain in got:
        check(topic, message, retain, wnm)
    relations = [(m["properties"]["metadata_id"], m["links"][0]["rel"]) for _, m, _ in got]
    wid = [wcmp2_id("de-dwd", identifier_for(n)) for n in range(4)]
    assert sorted(relations[:4]) == sorted((w, "canonical") for w in wid)
    assert sorted(relations[4:]) == sorted([(wid[1], "update"), (wid[2], "deletion")])
    for _, message, _ in got:
        [link] = message["links"]
        if link["rel"] == "deletion":
            assert message["geometry"] is None and "integrity" not in message["properties"]
            continue
        revision = link["href"].rsplit("/", 1)[1]
        content = bytes(
            await db.fetchval(
                "select content from wis2_revisions where wcmp2_id = $1 and revision = $2",
                message["properties"]["metadata_id"],
                revision,
            )
        )
        digest = base64.b64encode(hashlib.sha512(content).digest()).decode()
        assert message["properties"]["integrity"] == {"method": "sha512", "value": digest}
        assert link["length"] == len(content)
    assert await db.fetchval("select count(*) from wis2_outbox where sent_at is null") == 0


async def test_a_refused_publish_is_an_error_not_a_success(
    db: asyncpg.Pool, database_url: str, broker: Mosquitto, subscriber: Subscriber
) -> None:
    # the ACL lets wiscat write de-dwd's topic, not xx-other's
    settings = settings_for(
        broker,
        f"xx-other=prefix:{identifier_for(1)};de-dwd;{LICENCE};xx-other=licence:https://x.example/l",
    )
    running, task = await start(db, settings)
    try:
        await factories.load_records(db, OWN, [0, 1])
        await wait_until(lambda: _failing(db))
        await asyncio.to_thread(subscriber.wait_for, 1)
    finally:
        running.stop.set()
        await task
    got = subscriber.messages()
    assert [m["properties"]["metadata_id"] for _, m, _ in got] == [
        wcmp2_id("de-dwd", identifier_for(0))
    ]
    row = await db.fetchrow("select * from wis2_outbox where centre_id = 'xx-other'")
    assert row["sent_at"] is None and row["attempts"] >= 1
    assert "0x87" in row["last_error"], row["last_error"]
    assert running.counts.refused >= 1
    status = await store.status(db)
    assert status["failing"] == 1 and "0x87" in status["failing_messages"][0]["last_error"]
    assert running.counts.metrics is not None
    registry = running.counts.metrics.registry
    assert registry.get_sample_value("wiscat_wis2_refused_messages_total") >= 1
    assert registry.get_sample_value("wiscat_wis2_outbox_backlog") == 1
    assert (
        registry.get_sample_value("wiscat_wis2_published_messages_total", {"relation": "canonical"})
        == 1
    )
    # the operator sees it: wiscat wis2 status exits 1 and shows the refusal
    shown = subprocess.run(
        [sys.executable, "-m", "wiscat", "wis2", "status"],
        env={**os.environ, "WISCAT_DATABASE_URL": database_url, "WISCAT_GISC_NAME": GISC},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 1, shown.stderr
    assert "failing:    1 messages" in shown.stdout
    assert "not authorized" in shown.stdout.lower() and "0x87" in shown.stdout, shown.stdout


async def _failing(db: asyncpg.Pool) -> bool:
    return bool(await db.fetchval("select count(*) from wis2_outbox where last_error is not null"))


class Catalogue:
    """A GDC's rules on the messages it receives: skip an id already seen; delete by
    metadata_id; else GET the link (from the node's real provider: the link's path at its
    address, the announced host being made up), check its hash and length, validate it, and
    refuse a record whose centre-id is not the topic's."""

    def __init__(self, http: aiohttp.ClientSession, provider: str) -> None:
        self.http, self.provider = http, provider
        self.seen: set[str] = set()
        self.records: dict[str, bytes] = {}
        self.refused: list[str] = []
        self.schema = Draft202012Validator(json.loads(WCMP2_SCHEMA.read_text()))

    async def apply(self, topic: str, message: dict[str, Any]) -> None:
        if message["id"] in self.seen:
            return
        self.seen.add(message["id"])
        metadata_id = message["properties"]["metadata_id"]
        [link] = message["links"]
        if link["rel"] == "deletion":
            self.records.pop(metadata_id, None)
            return
        async with self.http.get(
            self.provider + urlsplit(link["href"]).path, allow_redirects=False
        ) as response:
            assert response.status == 200, (link["href"], await response.text())
            assert response.content_type == link["type"]
            content = await response.read()
        digest = base64.b64encode(hashlib.sha512(content).digest()).decode()
        assert digest == message["properties"]["integrity"]["value"]
        assert len(content) == link["length"]
        record = json.loads(content)
        assert not list(self.schema.iter_errors(record))
        if topic.split("/")[3] != record["id"].split(":")[3]:
            self.refused.append(record["id"])
            return
        self.records[record["id"]] = content


async def test_a_gdc_ends_holding_exactly_the_announced_records(
    db: asyncpg.Pool,
    database_url: str,
    announcing: tuple[Running, Settings],
    subscriber: Subscriber,
) -> None:
    await factories.load_records(db, OWN, range(8))
    await factories.load_records(db, "WIS-GISC-AWAY", [4, 20, 21], kind="remote")
    await wait_until(lambda: _all_sent(db, 8))
    await factories.load_records(db, OWN, [1], version=1)  # update
    await factories.delete(db, OWN, [identifier_for(2)])  # deletion
    await factories.delete(db, OWN, [identifier_for(3)])  # delete then re-create
    await factories.load_records(db, OWN, [3], version=1)
    await factories.delete(db, OWN, [identifier_for(4)])  # leaves the own set: AWAY's copy
    await wait_until(lambda: _all_sent(db, 11))
    await asyncio.sleep(0.5)
    async with (
        running_provider(database_url, wis2_centres="de-dwd") as provider,
        aiohttp.ClientSession() as http,
    ):
        gdc = Catalogue(http, provider.root)
        for topic, message, _ in subscriber.messages():
            await gdc.apply(topic, message)
            await gdc.apply(topic, message)  # a duplicate is skipped
    live = {
        r["wcmp2_id"]: bytes(r["content"])
        for r in await db.fetch("select wcmp2_id, content from wis2_records where not deleted")
    }
    assert gdc.refused == []
    assert gdc.records == live
    assert sorted(live) == sorted(wcmp2_id("de-dwd", identifier_for(n)) for n in (0, 1, 3, 5, 6, 7))


async def _all_sent(db: asyncpg.Pool, count: int) -> bool:
    sent = await db.fetchval("select count(*) from wis2_outbox where sent_at is not null")
    unsent = await db.fetchval("select count(*) from wis2_outbox where sent_at is null")
    return bool(sent >= count and unsent == 0)
