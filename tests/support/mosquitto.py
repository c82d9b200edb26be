"""A real MQTT broker for the tests: Debian's mosquitto on a loopback port, with a password file
and an ACL file, and a real subscriber (paho) that keeps what arrives."""

from __future__ import annotations

import getpass
import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

PUBLISHER = ("wiscat", "publisher-secret")
READER = ("gdc", "reader-secret")
# the publisher may write its centres' metadata topics only; the reader reads everything
ACL = """user wiscat
topic write origin/a/wis2/de-dwd/metadata
topic write origin/a/wis2/fr-meteofrance/metadata

user gdc
topic read origin/a/wis2/#
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Mosquitto:
    folder: Path
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self.process is None
        with (self.folder / "log").open("ab") as log:
            self.process = subprocess.Popen(
                ["mosquitto", "-c", str(self.folder / "mosquitto.conf")],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    raise AssertionError((self.folder / "log").read_text()) from None
                time.sleep(0.05)
        raise AssertionError("mosquitto did not listen within 10 s")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


@contextmanager
def running_mosquitto(acl: str = ACL) -> Iterator[Mosquitto]:
    """mosquitto on a free loopback port, anonymous access refused, the ACL ``acl``."""
    tool = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    assert Path(tool).exists(), "mosquitto is missing: `make test` installs Debian's package"
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        passwords = folder / "passwords"
        passwords.touch()
        for user, password in (PUBLISHER, READER):
            subprocess.run(["mosquitto_passwd", "-b", str(passwords), user, password], check=True)
        (folder / "acl").write_text(acl)
        broker = Mosquitto(folder)
        (folder / "mosquitto.conf").write_text(
            f"user {getpass.getuser()}\n"  # run as root, mosquitto would change to its own user
            f"listener {broker.port} 127.0.0.1\n"
            "allow_anonymous false\n"
            f"password_file {passwords}\n"
            f"acl_file {folder / 'acl'}\n"
            "persistence true\n"
            f"persistence_location {folder}/\n"
            "log_dest stderr\n"
        )
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()


class Subscriber:
    """A paho subscriber to ``origin/a/wis2/#`` (QoS 1) keeping (topic, message, retain)."""

    def __init__(self, broker: Mosquitto, reader: tuple[str, str] = READER) -> None:
        self.received: list[tuple[str, dict[str, Any], bool]] = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        # a session of its own that outlives a restart of the broker: nothing published while
        # it reconnects is missed
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id="gdc-subscriber", protocol=mqtt.MQTTv5
        )
        self.client.username_pw_set(*reader)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *args: self.subscribed.set()
        self.client.on_message = self._on_message
        expiry = Properties(PacketTypes.CONNECT)
        expiry.SessionExpiryInterval = 3600
        self.client.connect_async("127.0.0.1", broker.port, clean_start=False, properties=expiry)
        self.client.reconnect_delay_set(0.2, 1)
        self.client.loop_start()
        assert self.subscribed.wait(10), "the subscriber did not subscribe"

    def _on_connect(self, client: Any, *args: Any) -> None:
        client.subscribe("origin/a/wis2/#", qos=1)

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self.lock:
            self.received.append((msg.topic, json.loads(msg.payload), bool(msg.retain)))

    def messages(self) -> list[tuple[str, dict[str, Any], bool]]:
        with self.lock:
            return list(self.received)

    def wait_for(self, count: int, timeout: float = 20) -> list[tuple[str, dict[str, Any], bool]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.messages()) < count:
            time.sleep(0.05)
        return self.messages()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
