"""compose.wis2.yaml for real: compose.yaml's node with the MQTT broker built from Debian's
mosquitto package (deploy/containers/base-images.sh), its password file and the ACL of
deploy/mosquitto/ as the operator has them. A record put through the admin API is announced
on the centre's metadata topic, and a Global Broker's account (the ACL's reader) receives it
through the published port.

Run by ``make test-containers`` with the other container tests, after them.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from tests.containers.engine import FIGURES, Project, free_port, logs, print_figures
from tests.support.mosquitto import Mosquitto, Subscriber
from wiscat.shared.generator import generate_record, identifier_for

CENTRE = "de-dwd"  # the centre deploy/mosquitto/acl lets the wiscat account write for
TOPIC = f"origin/a/wis2/{CENTRE}/metadata"


@dataclass
class Wis2Project(Project):
    """compose.yaml and compose.wis2.yaml: a node, its database and its broker."""

    mosquitto_image: str = ""
    broker_port: int = field(default_factory=free_port)
    publisher: tuple[str, str] = ("wiscat", secrets.token_urlsafe(16))
    reader: tuple[str, str] = ("globalbroker", secrets.token_urlsafe(16))

    OVERLAYS: ClassVar[tuple[str, ...]] = ("compose.wis2.yaml",)

    def published(self) -> dict[str, str]:
        return super().published() | {'"1883:1883"': f'"127.0.0.1:{self.broker_port}:1883"'}

    def settings(self) -> dict[str, str]:
        return super().settings() | {
            "WISCAT_WIS2_CENTRES": CENTRE,
            "WISCAT_WIS2_BROKER_USER": self.publisher[0],
            "WISCAT_WIS2_BROKER_PASSWORD": self.publisher[1],
        }

    def images(self) -> dict[str, str]:
        return super().images() | {"MOSQUITTO_IMAGE": self.mosquitto_image}

    def __post_init__(self) -> None:
        super().__post_init__()
        # what compose.wis2.yaml's header asks of the operator: the password file
        passwords = self.folder / "deploy" / "mosquitto" / "passwords"
        passwords.touch()
        for user, password in (self.publisher, self.reader):
            subprocess.run(["mosquitto_passwd", "-b", str(passwords), user, password], check=True)
        passwords.chmod(0o644)  # read by the broker's own user in the container


@pytest.fixture(scope="module")
def node(
    image: str,
    base_images: dict[str, str],
    checkout: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Wis2Project]:
    assert shutil.which("mosquitto_passwd"), "make test-containers installs Debian's mosquitto"
    folder = tmp_path_factory.mktemp("wis2") / "wiscatwis2"
    shutil.copytree(checkout, folder)
    project = Wis2Project(
        name="wiscatwis2",
        folder=folder,
        gisc="WIS2",
        postgres_image=base_images["postgres"],
        mosquitto_image=base_images["mosquitto"],
    )
    project.remove()
    try:
        project.up()
        yield project
    finally:
        project.remove()
        print_figures()


def test_a_record_put_at_the_node_is_announced_on_the_broker(node: Wis2Project) -> None:
    subscriber = Subscriber(Mosquitto(folder=node.folder, port=node.broker_port), node.reader)
    try:
        identifier = identifier_for(0, "wis2")
        status, answer = node.admin(
            "PUT", f"/admin/records/{identifier}", generate_record(0, centre="wis2")
        )
        assert status == 201, answer
        received = subscriber.wait_for(1, timeout=60)
        assert received, "nothing announced in 60 s:\n" + logs(node.container("harvester"))
        topic, message, retained = received[0]
        assert (topic, retained) == (TOPIC, False)
        assert message["properties"]["metadata_id"].startswith(f"urn:wmo:md:{CENTRE}:")
        [link] = [each for each in message["links"] if each["rel"] == "canonical"]
        assert link["type"] == "application/geo+json"
        FIGURES["a record announced through the Debian-built broker"] = topic
    finally:
        subscriber.close()
