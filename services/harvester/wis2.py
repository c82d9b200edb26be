"""The WIS 2.0 announcer of the harvester: renders changed records into the outbox
(:func:`wiscat.shared.db.wis2.render`), queues the daily re-announcement, and publishes the
outbox's messages to the MQTT broker (``WISCAT_WIS2_BROKER_URL``).

The client is paho-mqtt 2 on a thread of its own (``loop_start``: it reconnects by itself); a
publish is QoS 1, retain false, and counts as sent only when the broker's PUBACK carries a
success reason code (MQTT v5). A refusal (reason code 0x80 or more, such as 0x87 not
authorized by an ACL) is kept on the row in ``last_error``, counted, and retried with backoff
with the same message id; while the broker is unreachable nothing is marked, and the rows wait.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from wiscat.harvester.metrics import HarvesterMetrics
from wiscat.shared import tls
from wiscat.shared.db import wis2 as store
from wiscat.shared.db.errors import DatabaseError
from wiscat.shared.db.pool import Pool
from wiscat.shared.settings import Settings
from wiscat.shared.tasks import wait_for_event
from wiscat.shared.wcmp2 import messages
from wiscat.shared.wcmp2.urls import collection_url

log = logging.getLogger(__name__)

ACK_TIMEOUT_SECONDS = 10.0
BATCH = 200


class Broker:
    """One MQTT v5 connection to the broker, on paho's own thread, used until it is lost
    (``dead``): a new one is made then, so that no message paho still holds from the lost one
    is sent again behind the outbox's back, out of its order."""

    def __init__(self, url: str, user: str | None, password: str | None, ca_file: Any) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or ""
        self.port = parts.port or (8883 if parts.scheme == "mqtts" else 1883)
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=f"wiscat-{uuid.uuid4().hex[:12]}",
            protocol=mqtt.MQTTv5,
        )
        if user:
            self.client.username_pw_set(user, password)
        if parts.scheme == "mqtts":
            self.client.tls_set_context(tls.client_context(ca_file))
        self.client.max_inflight_messages_set(BATCH)
        self.client.reconnect_delay_set(1, 30)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_publish
        self.connected = threading.Event()
        self.dead = False
        self.last_error = ""
        self._waiting: dict[int, asyncio.Future[str | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Connect (and keep trying to) on paho's thread."""
        self._loop = asyncio.get_running_loop()
        self.client.connect_async(self.host, self.port, keepalive=30, clean_start=True)
        self.client.loop_start()

    def stop(self) -> None:
        self.dead = True
        self.client.disconnect()
        self.client.loop_stop()

    def _on_connect(
        self, client: Any, userdata: Any, flags: Any, reason: ReasonCode, props: Any
    ) -> None:
        if reason.is_failure:
            self.last_error = f"connection refused: {reason}"
            log.warning("the WIS 2.0 broker refused the connection: %s", reason)
            return
        self.last_error = ""
        self.connected.set()
        log.info("connected to the WIS 2.0 broker %s:%d", self.host, self.port)

    def _on_disconnect(
        self, client: Any, userdata: Any, flags: Any, reason: ReasonCode, props: Any
    ) -> None:
        if self.connected.is_set():  # lost: this client is done (a new one reconnects)
            self.connected.clear()
            self.dead = True
            self.last_error = f"disconnected: {reason}"
            client.loop_stop()  # from paho's own thread: only asks its loop to end
            self._call(self._lost, str(reason))

    def _on_publish(
        self, client: Any, userdata: Any, mid: int, reason: ReasonCode, props: Properties | None
    ) -> None:
        error = None
        if reason.is_failure:
            error = f"refused by the broker: {reason} (reason code 0x{reason.value:02x})"
        self._call(self._acknowledged, mid, error)

    def _call(self, function: Any, *args: Any) -> None:
        # on the event loop: a publish registers its mid there before the loop runs again
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(function, *args)

    def _acknowledged(self, mid: int, error: str | None) -> None:
        future = self._waiting.pop(mid, None)
        if future is not None and not future.done():
            future.set_result(error)

    def _lost(self, reason: str) -> None:
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_result(f"broker unreachable ({reason}) before its acknowledgement")

    def publish(self, topic: str, payload: bytes) -> asyncio.Future[str | None]:
        """Publish (QoS 1, retain false); the future gives None once the broker acknowledged
        it with a success reason code, else the error."""
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        info = self.client.publish(topic, payload, qos=1, retain=False)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            future.set_result(f"broker unreachable: {mqtt.error_string(info.rc)}")
        else:
            self._waiting[info.mid] = future
        return future


@dataclass
class Counts:
    """What the publisher did, for tests, and the harvester's metrics when given."""

    published: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    invalid: int = 0
    metrics: HarvesterMetrics | None = None

    def sent(self, relation: str) -> None:
        self.published[relation] = self.published.get(relation, 0) + 1
        if self.metrics is not None:
            self.metrics.wis2_published.labels(relation).inc()

    def refusal(self) -> None:
        self.refused += 1
        if self.metrics is not None:
            self.metrics.wis2_refused.inc()

    async def observe(self, pool: Pool, broker: Broker) -> None:
        if self.metrics is not None:
            backlog, oldest = await store.backlog(pool)
            self.metrics.wis2_backlog.set(backlog)
            self.metrics.wis2_oldest.set(oldest)
            self.metrics.wis2_connected.set(broker.connected.is_set() and not broker.dead)


async def publish_once(
    pool: Pool, broker: Broker, collection: str, counts: Counts, *, batch: int = BATCH
) -> int:
    """Send the due messages of the outbox, oldest first; how many the broker acknowledged."""
    if broker.dead or not broker.connected.is_set():
        return 0
    rows = await store.pending(pool, batch)
    sending: list[tuple[messages.Announcement, asyncio.Future[str | None]]] = []
    for row in rows:
        message = messages.message(row, collection)
        problems = messages.message_errors(message)
        if problems:
            counts.invalid += 1
            await store.mark_failed(pool, row.message_id, "invalid message: " + "; ".join(problems))
            continue
        payload = json.dumps(message, separators=(",", ":")).encode("utf-8")
        sending.append((row, broker.publish(messages.topic(row.centre_id), payload)))
    sent = []
    for row, future in sending:
        try:
            error = await asyncio.wait_for(asyncio.shield(future), ACK_TIMEOUT_SECONDS)
        except TimeoutError:
            error = "no acknowledgement from the broker within 10 s"
        if error is None:
            sent.append(row.message_id)
            counts.sent(row.relation)
        else:
            if error.startswith("refused"):
                counts.refusal()
                log.warning("%s %s of %s: %s", row.relation, row.message_id, row.wcmp2_id, error)
            await store.mark_failed(pool, row.message_id, error)
    await store.mark_sent(pool, sent)
    return len(sent)


def rendering(settings: Settings) -> store.Rendering:
    """How the renderer reads, from the settings."""
    return store.Rendering(
        settings.own_set,
        settings.wis2_centres,
        settings.base_url,
        settle_seconds=settings.settle_seconds,
    )


def broker_of(settings: Settings) -> Broker:
    """The broker client the settings name (not started)."""
    assert settings.wis2_broker_url is not None
    password = settings.wis2_broker_password
    return Broker(
        settings.wis2_broker_url,
        settings.wis2_broker_user,
        password.get_secret_value() if password else None,
        settings.wis2_broker_ca_file,
    )


async def run_wis2(
    pool: Pool, settings: Settings, stop: asyncio.Event, counts: Counts | None = None
) -> None:
    """Render, queue the daily re-announcement and publish, every WIS2_POLL_SECONDS, until
    ``stop``."""
    counts = counts or Counts()
    broker = broker_of(settings)
    broker.start()
    collection = collection_url(settings.base_url)
    how = rendering(settings)
    every = settings.wis2_poll_seconds
    daily_limit = max(1, int(settings.wis2_republish_rate * every))
    try:
        while not stop.is_set():
            if broker.dead:
                broker.stop()
                broker = broker_of(settings)
                broker.start()
            try:
                await store.render(pool, how)
                await store.queue_updates(pool, daily=True, limit=daily_limit)
                while await publish_once(pool, broker, collection, counts) == BATCH:
                    pass
                await counts.observe(pool, broker)
            except (OSError, DatabaseError) as exc:
                log.warning("WIS 2.0 announcement: %s; trying again in %.0f s", exc, every)
            except Exception:  # a bug of ours must not stop the announcements for good
                log.exception("WIS 2.0 announcement failed; trying again in %.0f s", every)
            await wait_for_event(stop, every)
    finally:
        broker.stop()
