"""Podman and podman-compose as the container tests drive them: a compose project is one GISC.

Two things of Debian bookworm's engine shape this module (docs/deploy.md says the same to
operators):

- podman-compose 1.0.3 starts the services in ``depends_on`` order but does not wait for their
  conditions, so :meth:`Project.up` starts ``db`` first and waits until it is healthy, as
  ``condition: service_healthy`` would, then starts the rest.
- Podman schedules healthchecks with systemd timers; on a host without systemd nobody runs them,
  so :func:`wait_healthy` runs the compose file's healthcheck itself (``podman healthcheck run``),
  which is also what sets the container's health status.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: runc, and the ulimits podman inherits (a VM may refuse to raise them: docs/deploy.md)
CONTAINERS_CONF = ROOT / "deploy" / "containers" / "containers.conf"
BASE_IMAGES = ROOT / "deploy" / "containers" / "base-images.sh"
IMAGE = "localhost/wiscat:latest"


def engine_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF), **extra}


def run(argv: list[str], *, timeout: float = 120, check: bool = True, **kwargs: Any) -> str:
    """The command's output; its whole output in the error when it fails."""
    kwargs.setdefault("env", engine_env())
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def podman(*args: str, timeout: float = 120, check: bool = True) -> str:
    return run(["podman", *args], timeout=timeout, check=check)


def logs(container: str, lines: int = 30) -> str:
    """The container's last ``lines`` of output, what it wrote to stderr (its log) included."""
    done = subprocess.run(
        ["podman", "logs", "--tail", str(lines), container],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        check=False,
        env=engine_env(),
    )
    return done.stdout


def inspect(container: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = json.loads(podman("container", "inspect", container))
    return found[0]


def health(container: str) -> str:
    state = inspect(container)["State"]
    result = state.get("Health") or state.get("Healthcheck") or {}
    return str(result.get("Status", ""))


def wait_healthy(container: str, timeout: float = 180) -> None:
    """Run the container's own healthcheck until it passes; the status must then say healthy."""
    deadline = time.monotonic() + timeout
    while True:
        out = run(["podman", "healthcheck", "run", container], check=False, timeout=60)
        if out.strip() == "healthy" or health(container) == "healthy":
            break
        if time.monotonic() > deadline:
            logs = podman("logs", "--tail", "30", container, check=False)
            raise AssertionError(f"{container} not healthy after {timeout:.0f} s ({out}):\n{logs}")
        time.sleep(2)
    assert health(container) == "healthy", inspect(container)["State"]


def wait_exited(container: str, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while inspect(container)["State"]["Status"] != "exited":
        if time.monotonic() > deadline:
            raise AssertionError(f"{container} still running after {timeout:.0f} s")
        time.sleep(1)
    return int(inspect(container)["State"]["ExitCode"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(
    url: str,
    method: str = "GET",
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_http(url: str, timeout: float = 120) -> float:
    """Seconds until ``url`` answers 200."""
    start = time.monotonic()
    while True:
        try:
            if http(url, timeout=5)[0] == 200:
                return time.monotonic() - start
        except OSError:
            pass
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{url} did not answer 200 in {timeout:.0f} s")
        time.sleep(0.25)


@dataclass
class Project:
    """One GISC: compose.yaml and a .env in ``folder`` (a copy of the checkout), its two
    published ports moved to free ones on 127.0.0.1 (two projects on one host)."""

    name: str
    folder: Path
    gisc: str
    postgres_image: str
    provider_port: int = field(default_factory=free_port)
    harvester_port: int = field(default_factory=free_port)
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    def __post_init__(self) -> None:
        compose = self.folder / "compose.yaml"
        text = compose.read_text()
        for old, new in (
            ('"8080:8080"', f'"127.0.0.1:{self.provider_port}:8080"'),
            ('"127.0.0.1:8081:8081"', f'"127.0.0.1:{self.harvester_port}:8081"'),
        ):
            assert text.count(old) == 1, f"compose.yaml publishes no {old}: update this test"
            text = text.replace(old, new)
        compose.write_text(text)
        settings = {
            "WISCAT_GISC_NAME": self.gisc,
            "WISCAT_BASE_URL": f"http://{self.container('provider')}:8080/oai",
            "WISCAT_REPOSITORY_NAME": f"GISC {self.gisc} in a container",
            "WISCAT_ADMIN_TOKEN": self.admin_token,
            "WISCAT_TOKEN_SECRET": secrets.token_urlsafe(24),
            "WISCAT_SETTLE_SECONDS": "0",
        }
        lines = [
            line
            for line in (self.folder / ".env.example").read_text().splitlines()
            if line.partition("=")[0] not in settings
        ]
        lines += [f"{key}={value}" for key, value in settings.items()]
        (self.folder / ".env").write_text("\n".join(lines) + "\n")

    def container(self, service: str) -> str:
        return f"{self.name}_{service}_1"  # podman-compose 1.0.3's names

    @property
    def network(self) -> str:
        return f"{self.name}_default"

    def compose(self, *args: str, timeout: float = 300) -> str:
        env = engine_env(POSTGRES_IMAGE=self.postgres_image)
        argv = ["podman-compose", "-p", self.name, "-f", "compose.yaml", *args]
        return run(argv, cwd=self.folder, env=env, timeout=timeout)

    def up(self) -> None:
        """db first, until healthy; migrate once, successfully; then provider and harvester."""
        self.compose("up", "-d", "--no-build", "db")
        wait_healthy(self.container("db"))
        self.compose("up", "-d", "--no-build")
        code = wait_exited(self.container("migrate"))
        logs = podman("logs", self.container("migrate"))
        assert code == 0, f"wiscat migrate exited {code}:\n{logs}"
        for service in ("provider", "harvester"):
            wait_healthy(self.container(service))

    def down(self, *args: str) -> None:
        self.compose("down", *args)

    def remove(self) -> None:
        """Containers, volumes and network gone (those a run that was stopped left too)."""
        env = engine_env(POSTGRES_IMAGE=self.postgres_image)
        argv = ["podman-compose", "-p", self.name, "-f", "compose.yaml", "down", "--volumes"]
        run(argv, cwd=self.folder, env=env, timeout=300, check=False)
        podman("network", "rm", "--force", self.network, check=False)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.provider_port}{path}"

    def admin(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        data = None
        if isinstance(body, bytes):
            data, headers["Content-Type"] = body, "application/xml"
        elif body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        status, answer = http(self.url(path), method, data, headers)
        return status, json.loads(answer) if answer else None
