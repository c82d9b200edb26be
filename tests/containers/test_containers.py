"""The container deployment for real: the image built from a clean copy of the checkout, on base
images built from Debian's packages (no container registry), and compose.yaml started with
podman-compose as two GISCs on one host.

Not part of ``make test`` (pyproject's addopts leave tests/containers out): ``make
test-containers`` runs it, in a few minutes once the base images are built (they are kept in
podman's storage between runs). The tests run in order and share the two projects: each step
starts from the state the one before left.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lxml import etree

from tests.containers.engine import (
    FIGURES,
    Project,
    free_port,
    http,
    inspect,
    logs,
    podman,
    print_figures,
    run,
    wait_healthy,
    wait_http,
)
from wiscat.shared.generator import generate_record, identifier_for

OAI = "{http://www.openarchives.org/OAI/2.0/}"
RECORDS = 5


def project(name: str, gisc: str, checkout: Path, postgres: str, into: Path) -> Project:
    folder = into / name
    shutil.copytree(checkout, folder)
    return Project(name=name, folder=folder, gisc=gisc, postgres_image=postgres)


@pytest.fixture(scope="module")
def projects(
    image: str,
    base_images: dict[str, str],
    checkout: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Project, Project]]:
    into = tmp_path_factory.mktemp("projects")
    alpha = project("wiscatalpha", "ALPHA", checkout, base_images["postgres"], into)
    bravo = project("wiscatbravo", "BRAVO", checkout, base_images["postgres"], into)
    for each in (alpha, bravo):
        each.remove()
    try:
        yield alpha, bravo
    finally:
        for each in (alpha, bravo):
            each.remove()
        print_figures()


def identifiers(project: Project, set_spec: str) -> set[str]:
    status, body = http(
        project.url(f"/oai?verb=ListIdentifiers&metadataPrefix=iso19139&set={set_spec}")
    )
    assert status == 200, body
    root = etree.fromstring(body)
    error = root.find(f"{OAI}error")
    if error is not None and error.get("code") == "noRecordsMatch":
        return set()
    assert error is None, body
    assert root.find(f".//{OAI}resumptionToken") is None, "more than one page: ask for fewer"
    return {str(e.text) for e in root.iter(f"{OAI}identifier")}


def test_image_runs_the_installed_package_without_build_tools(image: str) -> None:
    found = podman(
        "run",
        "--rm",
        image,
        "python",
        "-c",
        "import importlib.util as u, shutil, wiscat, wiscat.migrations as m, os;"
        "print(wiscat.__file__);"
        "print(sorted(f for f in os.listdir(m.__path__[0]) if f.endswith('.sql'))[0]);"
        "print([t for t in ('gcc', 'cc', 'make') if shutil.which(t)]);"
        "print([p for p in ('pytest', 'mypy', 'ruff', 'hypothesis') if u.find_spec(p)]);"
        "print(os.getuid(), os.getcwd(), os.access(os.getcwd(), os.W_OK))",
    ).splitlines()
    assert found == [
        "/opt/wiscat/lib/python3.11/site-packages/wiscat/__init__.py",
        "0001_records.sql",
        "[]",
        "[]",
        "10001 /var/lib/wiscat True",
    ]


def test_default_command_runs_a_node(image: str) -> None:
    """``podman run IMAGE``: wiscat run, its embedded PostgreSQL in /var/lib/wiscat."""
    provider, harvester = free_port(), free_port()
    name = "wiscat-default-command"
    podman("rm", "--force", name, check=False)
    started = time.monotonic()
    podman(
        "run",
        "--detach",
        "--name",
        name,
        # the provider binds 127.0.0.1 unless told: the only change, to reach it from the host
        "--env",
        "WISCAT_PROVIDER_HOST=0.0.0.0",
        "--publish",
        f"127.0.0.1:{provider}:8080",
        "--publish",
        f"127.0.0.1:{harvester}:8081",
        image,
    )
    try:
        wait_http(f"http://127.0.0.1:{provider}/readyz", timeout=180)
        FIGURES["default command ready in"] = f"{time.monotonic() - started:.1f} s"
        wait_http(f"http://127.0.0.1:{harvester}/readyz", timeout=60)
        assert inspect(name)["Config"]["Cmd"] == ["wiscat", "run"]
        owner = podman("exec", name, "stat", "-c", "%u %a", "/var/lib/wiscat/postgres")
        assert owner.split()[0] == "10001"
    finally:
        podman("rm", "--force", name, check=False)


def test_compose_starts_a_healthy_node(projects: tuple[Project, Project]) -> None:
    alpha, _ = projects
    started = time.monotonic()
    alpha.up()
    FIGURES["compose up (db healthy, migrate, provider and harvester healthy)"] = (
        f"{time.monotonic() - started:.0f} s"
    )
    for service in ("db", "provider", "harvester"):
        assert inspect(alpha.container(service))["State"]["Status"] == "running"
    status, body = http(alpha.url("/oai?verb=Identify"))
    assert status == 200
    identify = etree.fromstring(body).find(f"{OAI}Identify")
    assert identify is not None, body
    assert identify.findtext(f"{OAI}repositoryName") == "GISC ALPHA in a container"
    assert identify.findtext(f"{OAI}baseURL") == "http://wiscatalpha_provider_1:8080/oai"
    assert http(alpha.url("/readyz")) == (200, b'{"ready":true}')


def test_records_put_through_the_admin_api_are_listed(projects: tuple[Project, Project]) -> None:
    alpha, _ = projects
    for n in range(RECORDS):
        record = generate_record(n, centre="alpha")
        status, answer = alpha.admin("PUT", f"/admin/records/{identifier_for(n, 'alpha')}", record)
        assert status == 201, answer
    status, answer = alpha.admin("PUT", "/admin/records/x", b"<not-a-record/>")
    assert status == 400, answer
    wanted = {identifier_for(n, "alpha") for n in range(RECORDS)}
    assert identifiers(alpha, "WIS-GISC-ALPHA") == wanted


def test_another_gisc_harvests_the_first(
    projects: tuple[Project, Project], request: pytest.FixtureRequest
) -> None:
    alpha, bravo = projects
    bravo.up()
    # Two GISCs on one host, met on a network of their own, where alpha's provider is known by its
    # container name (alpha's base URL), as a peer's host name is on the Internet. Not on either
    # project's network: there "db" is that project's database, and a harvester that joined
    # alpha's would open its new sessions (its runs' leases) on alpha's database.
    peering = f"wiscat-peering-{os.getpid()}"
    podman("network", "create", peering)
    met = [alpha.container("provider"), bravo.container("harvester")]

    def part() -> None:  # not `network rm --force`: it would remove the containers too
        for container in met:
            podman("network", "disconnect", peering, container, check=False)
        podman("network", "rm", peering, check=False)

    request.addfinalizer(part)
    for container in met:
        podman("network", "connect", peering, container)
    link = {"name": "alpha", "url": f"http://{alpha.container('provider')}:8080/oai"}
    link |= {"set": "WIS-GISC-ALPHA", "into": "WIS-GISC-ALPHA"}
    status, answer = bravo.admin("POST", "/admin/links", link)
    assert status == 201, answer
    wanted = {identifier_for(n, "alpha") for n in range(RECORDS)}
    deadline = time.monotonic() + 120
    while identifiers(bravo, "WIS-GISC-ALPHA") != wanted:
        status, answer = bravo.admin("POST", "/admin/links/alpha/harvest")
        assert status == 202, answer
        if time.monotonic() > deadline:
            runs = bravo.admin("GET", "/admin/runs?link=alpha&limit=3")
            output = logs(bravo.container("harvester"))
            raise AssertionError(f"bravo did not harvest alpha's records: {runs}\n{output}")
        time.sleep(3)


def test_down_then_up_keeps_the_records(projects: tuple[Project, Project]) -> None:
    alpha, _ = projects
    alpha.down()
    assert podman("ps", "--all", "--quiet", "--filter", f"name={alpha.name}_") == ""
    alpha.up()
    wanted = {identifier_for(n, "alpha") for n in range(RECORDS)}
    assert identifiers(alpha, "WIS-GISC-ALPHA") == wanted


@pytest.mark.parametrize("service", ["provider", "harvester"])
def test_a_killed_service_is_restarted(projects: tuple[Project, Project], service: str) -> None:
    """SIGKILL to the service's process from the host (as the OOM killer would): its restart
    policy (unless-stopped) starts it again, and it becomes healthy."""
    alpha, _ = projects
    container = alpha.container(service)
    before = inspect(container)
    pid, restarts = before["State"]["Pid"], before.get("RestartCount", 0)
    assert pid > 0
    run(["kill", "-KILL", str(pid)])
    killed = time.monotonic()
    deadline = killed + 120
    while True:
        now = inspect(container)
        if now["State"]["Status"] == "running" and now["State"]["Pid"] not in (0, pid):
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"{container} was not restarted: {now['State']}")
        time.sleep(1)
    assert now.get("RestartCount", 0) == restarts + 1
    wait_healthy(container)
    FIGURES[f"{service} killed, healthy again in"] = f"{time.monotonic() - killed:.1f} s"
    if service == "provider":
        assert http(alpha.url("/readyz"))[0] == 200
