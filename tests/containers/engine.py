"""Podman and podman-compose as the container tests drive them: a compose project is one GISC
(:class:`Project`, compose.yaml; :class:`HaProject`, compose.ha.yaml).

Two things of Debian bookworm's engine shape this module (docs/deploy.md says the same to
operators):

- podman-compose 1.0.3 starts the services in ``depends_on`` order but does not wait for their
  conditions, so :meth:`Project.up` starts the database servers first, one by one, and waits
  until each is healthy, as ``condition: service_healthy`` would, then starts the rest.
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
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[2]
#: runc, and the ulimits podman inherits (a VM may refuse to raise them: docs/deploy.md)
CONTAINERS_CONF = ROOT / "deploy" / "containers" / "containers.conf"
BASE_IMAGES = ROOT / "deploy" / "containers" / "base-images.sh"
IMAGE = "localhost/wiscat:latest"
#: what the tests measured, printed at the end of each module (docs/deploy.md quotes it)
FIGURES: dict[str, str] = {}


def print_figures() -> None:
    """What the module measured (and the session's builds, when it was the first), then
    forgotten: the next module prints its own."""
    print("\n" + "\n".join(f"{key}: {value}" for key, value in FIGURES.items()))
    FIGURES.clear()


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
    return str(done.stdout)


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
    #: where the host reaches the providers (the provider's port; the load balancer's)
    provider_port: int = field(default_factory=free_port)
    harvester_port: int = field(default_factory=free_port)
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    COMPOSE_FILE: ClassVar[str] = "compose.yaml"
    #: compose files laid over it (-f each, in order)
    OVERLAYS: ClassVar[tuple[str, ...]] = ()
    #: started first, one by one, each waited for until healthy
    DATABASES: ClassVar[tuple[str, ...]] = ("db",)
    #: started with the rest, then waited for until healthy
    SERVICES: ClassVar[tuple[str, ...]] = ("provider", "harvester")

    def published(self) -> dict[str, str]:
        """The compose file's published ports, and what this project publishes instead."""
        return {
            '"8080:8080"': f'"127.0.0.1:{self.provider_port}:8080"',
            '"127.0.0.1:8081:8081"': f'"127.0.0.1:{self.harvester_port}:8081"',
        }

    def settings(self) -> dict[str, str]:
        """What .env says besides .env.example."""
        return {
            "WISCAT_GISC_NAME": self.gisc,
            "WISCAT_BASE_URL": f"http://{self.container('provider')}:8080/oai",
            "WISCAT_REPOSITORY_NAME": f"GISC {self.gisc} in a container",
            "WISCAT_ADMIN_TOKEN": self.admin_token,
            "WISCAT_TOKEN_SECRET": secrets.token_urlsafe(24),
            "WISCAT_SETTLE_SECONDS": "0",
        }

    def images(self) -> dict[str, str]:
        """The variables naming the compose file's images."""
        return {"POSTGRES_IMAGE": self.postgres_image}

    def __post_init__(self) -> None:
        files = (self.COMPOSE_FILE, *self.OVERLAYS)
        texts = {name: (self.folder / name).read_text() for name in files}
        for old, new in self.published().items():
            holding = [name for name, text in texts.items() if text.count(old) == 1]
            assert len(holding) == 1, f"one of {files} must publish {old}: update this test"
            texts[holding[0]] = texts[holding[0]].replace(old, new)
        for name, text in texts.items():
            (self.folder / name).write_text(text)
        settings = self.settings()
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

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        env = engine_env(**self.images())
        files = [arg for name in (self.COMPOSE_FILE, *self.OVERLAYS) for arg in ("-f", name)]
        argv = ["podman-compose", "-p", self.name, *files, *args]
        return run(argv, cwd=self.folder, env=env, timeout=timeout, check=check)

    def up(self) -> None:
        """The database servers first, each until healthy; migrate once, successfully; then the
        services, until healthy."""
        for database in self.DATABASES:
            self.compose("up", "-d", "--no-build", database)
            wait_healthy(self.container(database))
        self.compose("up", "-d", "--no-build")
        code = wait_exited(self.container("migrate"))
        logs = podman("logs", self.container("migrate"))
        assert code == 0, f"wiscat migrate exited {code}:\n{logs}"
        for service in self.SERVICES:
            wait_healthy(self.container(service))

    def down(self, *args: str) -> None:
        self.compose("down", *args)

    def remove(self) -> None:
        """Containers, volumes and network gone (those a run that was stopped left too)."""
        self.compose("down", "--volumes", check=False)
        podman("network", "rm", "--force", self.network, check=False)

    def sql(self, service: str, query: str) -> list[list[str]]:
        """The rows of ``query`` run by psql in the service's database server."""
        out = podman(
            "exec", "--user", "postgres", self.container(service),
            "psql", "-U", "wiscat", "-d", "wiscat", "-AtX", "-F", "|", "-c", query,
        )  # fmt: skip
        return [line.split("|") for line in out.splitlines()]

    def address(self, service: str) -> str:
        """The service's address on the project's network."""
        networks = inspect(self.container(service))["NetworkSettings"]["Networks"]
        return str(networks[self.network]["IPAddress"])

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


@dataclass
class HaProject(Project):
    """One GISC of compose.ha.yaml: a primary and its standby, two providers behind the load
    balancer (``provider_port``), two harvesters (``harvester_port`` and ``harvester2_port``)."""

    lb_image: str = ""
    harvester2_port: int = field(default_factory=free_port)
    page_size: int = 3

    COMPOSE_FILE: ClassVar[str] = "compose.ha.yaml"
    DATABASES: ClassVar[tuple[str, ...]] = ("primary", "standby")
    SERVICES: ClassVar[tuple[str, ...]] = ("provider1", "provider2", "harvester1", "harvester2")

    def published(self) -> dict[str, str]:
        return {
            '"8080:8080"': f'"127.0.0.1:{self.provider_port}:8080"',
            '"127.0.0.1:8081:8081"': f'"127.0.0.1:{self.harvester_port}:8081"',
            '"127.0.0.1:8082:8081"': f'"127.0.0.1:{self.harvester2_port}:8081"',
        }

    def settings(self) -> dict[str, str]:
        return super().settings() | {
            "WISCAT_BASE_URL": f"http://127.0.0.1:{self.provider_port}/oai",
            "WISCAT_REPOSITORY_NAME": f"GISC {self.gisc} on a primary and a standby",
            "WISCAT_PAGE_SIZE": str(self.page_size),
        }

    def images(self) -> dict[str, str]:
        return super().images() | {"LB_IMAGE": self.lb_image}
