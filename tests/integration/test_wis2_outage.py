"""Nothing announced is lost: 50 changes while the broker is stopped for a while and the
announcer (a process of its own) is SIGKILLed mid-send; at the end the last message of each
metadata_id matches the record's final state, and nothing is left unsent.

WISCAT_WIS2_OUTAGE_SECONDS is how long the broker stays stopped: 3 here, 60 in `make soak`."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import asyncpg
import pytest

from tests.support import factories
from tests.support.mosquitto import PUBLISHER, Mosquitto, Subscriber, running_mosquitto
from wiscat.shared.generator import identifier_for

OWN = "WIS-GISC-HOME"
OUTAGE = float(os.environ.get("WISCAT_WIS2_OUTAGE_SECONDS", "3"))
RUN = """
import asyncio
from wiscat.harvester import wis2
from wiscat.shared.db.pool import create_pool
from wiscat.shared.settings import Settings

async def main():
    settings = Settings(_env_file=None)
    pool = await create_pool(settings.database_url, max_size=3)
    await wis2.run_wis2(pool, settings, asyncio.Event())

asyncio.run(main())
"""


@pytest.fixture
def broker() -> Iterator[Mosquitto]:
    with running_mosquitto() as running:
        yield running


def announcer(database_url: str, broker: Mosquitto) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "WISCAT_DATABASE_URL": database_url,
        "WISCAT_GISC_NAME": "HOME",
        "WISCAT_BASE_URL": "https://node.example/oai",
        "WISCAT_WIS2_CENTRES": "de-dwd;de-dwd=licence:https://www.dwd.de/terms",
        "WISCAT_WIS2_BROKER_URL": broker.url,
        "WISCAT_WIS2_BROKER_USER": PUBLISHER[0],
        "WISCAT_WIS2_BROKER_PASSWORD": PUBLISHER[1],
        "WISCAT_WIS2_POLL_SECONDS": "0.2",
        "WISCAT_SETTLE_SECONDS": "0",
    }
    return subprocess.Popen([sys.executable, "-c", RUN], env=env)


async def unsent(db: asyncpg.Pool) -> int:
    return int(await db.fetchval("select count(*) from wis2_outbox where sent_at is null"))


async def test_broker_down_and_announcer_killed_lose_nothing(
    db: asyncpg.Pool, database_url: str, broker: Mosquitto
) -> None:
    subscriber = Subscriber(broker)
    process = announcer(database_url, broker)
    try:
        await factories.load_records(db, OWN, range(20))  # 20 changes
        await asyncio.to_thread(subscriber.wait_for, 5)
        broker.stop()  # the broker goes away mid-flow
        before = len(subscriber.messages())
        await factories.load_records(db, OWN, range(10), version=1)  # 10 changes
        await factories.delete(db, OWN, [identifier_for(n) for n in range(10, 15)])  # 5
        await asyncio.sleep(OUTAGE)
        assert await unsent(db) > 0  # held while the broker is down
        broker.start()
        await factories.load_records(db, OWN, range(20, 35))  # 15 changes: 50 in all
        while len(subscriber.messages()) == before:
            await asyncio.sleep(0.005)
        process.send_signal(signal.SIGKILL)  # mid-send
        process.wait()
        await factories.load_records(db, OWN, [0], version=2)
        process = announcer(database_url, broker)
        for _ in range(600):
            if await unsent(db) == 0:
                break
            await asyncio.sleep(0.1)
        assert await unsent(db) == 0
        await asyncio.sleep(1)
    finally:
        process.kill()
        process.wait()
        subscriber.close()
    last: dict[str, dict[str, str]] = {}
    for _, message, _ in subscriber.messages():
        last[message["properties"]["metadata_id"]] = message["links"][0]
    rows = await db.fetch("select wcmp2_id, revision, deleted from wis2_records")
    assert len(rows) == 35
    for row in rows:
        link = last[row["wcmp2_id"]]
        if row["deleted"]:
            assert link["rel"] == "deletion", row["wcmp2_id"]
        else:
            assert link["rel"] in ("canonical", "update")
            assert link["href"].endswith(f"/revisions/{row['revision']}"), row["wcmp2_id"]
