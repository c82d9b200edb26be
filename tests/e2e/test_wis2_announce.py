"""The harvester announces: with WISCAT_WIS2_BROKER_URL and WISCAT_WIS2_CENTRES set, a record
ingested into the own set reaches the broker as a canonical message, and its /metrics show
it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from tests.e2e.nodes import NodeFactory
from tests.support.mosquitto import PUBLISHER, Subscriber, running_mosquitto
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.wcmp2.identifiers import wcmp2_id


async def test_the_harvester_announces_an_ingested_record(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    with running_mosquitto() as broker:
        subscriber = Subscriber(broker)
        node = await make_node("WISONE")
        node.extra.update(
            {
                "WISCAT_WIS2_CENTRES": "de-dwd;de-dwd=licence:https://www.dwd.de/terms",
                "WISCAT_WIS2_BROKER_URL": broker.url,
                "WISCAT_WIS2_BROKER_USER": PUBLISHER[0],
                "WISCAT_WIS2_BROKER_PASSWORD": PUBLISHER[1],
                "WISCAT_WIS2_POLL_SECONDS": "0.2",
            }
        )
        try:
            await node.start("harvester", f"http://127.0.0.1:{node.harvester_port}/readyz")
            folder = tmp_path / "records"
            folder.mkdir()
            (folder / "0.xml").write_bytes(generate_record(0))
            await node.wiscat("ingest", str(folder))
            got = await asyncio.to_thread(subscriber.wait_for, 1)
            [(topic, message, retain)] = got
            assert topic == "origin/a/wis2/de-dwd/metadata" and not retain
            assert message["properties"]["metadata_id"] == wcmp2_id("de-dwd", identifier_for(0))
            assert message["links"][0]["rel"] == "canonical"
            await asyncio.sleep(0.5)
            url = f"http://127.0.0.1:{node.harvester_port}/metrics"
            async with aiohttp.ClientSession() as session, session.get(url) as response:
                text = await response.text()
            assert 'wiscat_wis2_published_messages_total{relation="canonical"} 1.0' in text
            assert "wiscat_wis2_broker_connected 1.0" in text
            _, out, _ = await node.wiscat("wis2", "status")
            assert "announced:  1 records" in out and PUBLISHER[1] not in out
        finally:
            await node.stop()
            subscriber.close()
