"""compose.ha.yaml (a primary and its standby, two providers behind a load balancer, two
harvesters) agrees with the code, checked as tests/integration/test_compose.py checks
compose.yaml, with its helpers: nothing is built or started (tests/containers/test_ha.py starts
it). The files it mounts (deploy/ha/) are read with it."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import yaml

from tests.support.compose_checks import (
    DOCKERFILE,
    ENV_EXAMPLE,
    ROOT,
    depends_on,
    env_file_values,
    env_name_problems,
    healthcheck_urls,
    interpolate,
    load_compose,
    parse_wiscat,
    published,
    published_addresses,
    service_argv,
    service_env,
    settings_from_env,
)

COMPOSE_HA = ROOT / "compose.ha.yaml"

WISCAT_SERVICES = {
    "migrate": "migrate",
    "provider1": "provider",
    "provider2": "provider",
    "harvester1": "harvester",
    "harvester2": "harvester",
}
DATABASES = ("primary", "standby")
#: where the postgres image runs scripts once, and where nginx reads its sites
INIT_SCRIPTS = "/docker-entrypoint-initdb.d/"
NGINX_SITES = "/etc/nginx/conf.d/"


class Files(NamedTuple):
    """compose.ha.yaml, .env.example and the files compose.ha.yaml mounts (by their source)."""

    compose: str
    env: str
    mounts: dict[str, str]


def bind_mounts(svc: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, target) of the service's mounts of a file or folder of the checkout."""
    found = []
    for entry in svc.get("volumes") or []:
        if isinstance(entry, dict):
            source, target = str(entry.get("source", "")), str(entry.get("target", ""))
        else:
            source, _, rest = str(entry).partition(":")
            target = rest.partition(":")[0]
        if source.startswith(("./", "../", "/")):
            found.append((source.removeprefix("./"), target))
    return found


def mounted_texts(compose: dict[str, Any]) -> dict[str, str]:
    """The checkout's files that the services mount, as they are on disk."""
    texts = {}
    for svc in (compose.get("services") or {}).values():
        for source, _ in bind_mounts(svc):
            path = ROOT / source
            if path.is_file():
                texts[source] = path.read_text()
    return texts


def mounted(svc: dict[str, Any], folder: str, mounts: dict[str, str]) -> str:
    """The text of the files the service mounts into ``folder``."""
    return "\n".join(
        mounts.get(source, "") for source, target in bind_mounts(svc) if target.startswith(folder)
    )


def mount_problems(compose: dict[str, Any], mounts: dict[str, str]) -> list[str]:
    """What the services mount is in the checkout; nothing comes from compose ``configs:``,
    which podman-compose 1.0.3 ignores (its services would start without them)."""
    problems = []
    if compose.get("configs"):
        problems.append("top-level configs: podman-compose 1.0.3 ignores them; mount files")
    for name, svc in (compose.get("services") or {}).items():
        if svc.get("configs"):
            problems.append(f"{name} takes configs: podman-compose 1.0.3 ignores them")
        problems += [
            f"{name} mounts {source}, which is not a file of the checkout"
            for source, _ in bind_mounts(svc)
            if source not in mounts
        ]
    return problems


def _hosts(url: str) -> tuple[list[str], str | None, str | None, str, dict[str, list[str]]]:
    """A libpq URL's host names (several, comma-separated), user, password, database and
    query; urlsplit reads one host only."""
    parts = urlsplit(url)
    credentials, _, hosts = parts.netloc.rpartition("@")
    user, _, password = credentials.partition(":")
    names = [host.rsplit(":", 1)[0] for host in hosts.split(",")]
    return (
        names,
        unquote(user) or None,
        unquote(password) or None,
        parts.path.lstrip("/"),
        parse_qs(parts.query),
    )


def service_problems(compose: dict[str, Any], mounts: dict[str, str]) -> list[str]:  # noqa: C901
    """The services, what they wait for, and the standby made from the primary."""
    services = compose.get("services") or {}
    wanted = (*DATABASES, "lb", *WISCAT_SERVICES)
    problems = [f"no service {name!r}" for name in wanted if name not in services]
    if problems:
        return problems
    for name in DATABASES:
        db = services[name]
        # its default, when POSTGRES_IMAGE names no stand-in built from Debian's packages
        image = interpolate(str(db.get("image", "")), {})
        if not image.startswith("postgres"):
            problems.append(f"{name} runs {image!r}, not a postgres image")
        if "pg_isready" not in str((db.get("healthcheck") or {}).get("test")):
            problems.append(f"{name} has no pg_isready healthcheck")
    standby = " ".join(service_argv(services["standby"], ""))
    if not re.search(r"pg_basebackup -h primary\b.*\s-R\b", standby):
        problems.append("the standby is not copied from primary by pg_basebackup -R")
    if depends_on(services["standby"]).get("primary") != "service_healthy":
        problems.append("the standby does not wait for the primary to be healthy")
    if "host replication" not in mounted(services["primary"], INIT_SCRIPTS, mounts):
        problems.append("the primary does not let the standby connect for replication")
    for name, command in WISCAT_SERVICES.items():
        deps = depends_on(services[name])
        if deps.get("primary") != "service_healthy":
            problems.append(f"{name} does not wait for the primary to be healthy: {deps}")
        if name != "migrate":
            if deps.get("migrate") != "service_completed_successfully":
                problems.append(f"{name} does not wait for migrate to complete: {deps}")
            if str(services[name].get("restart", "no")) == "no":
                problems.append(f"{name} is not restarted when it stops")
        if command == "provider" and deps.get("standby") != "service_healthy":
            problems.append(f"{name} reads from the standby but does not wait for it: {deps}")
        args, error = parse_wiscat(service_argv(services[name], DOCKERFILE.read_text()))
        if error:
            problems.append(f"{name}: {error}")
        elif args.command != command:
            problems.append(f"{name} runs `wiscat {args.command}`, not `wiscat {command}`")
    return problems


def database_problems(compose: dict[str, Any], env_text: str) -> list[str]:
    """Every service names both servers, and takes the one that takes writes; the providers
    read from the standby; user, password and database are the primary's."""
    services = compose.get("services") or {}
    env_file = env_file_values(env_text)
    db_env = service_env(services.get("primary") or {}, env_file)
    credentials = (
        db_env.get("POSTGRES_USER", "postgres"),
        db_env.get("POSTGRES_PASSWORD"),
        db_env.get("POSTGRES_DB", db_env.get("POSTGRES_USER", "postgres")),
    )
    problems = []
    for name, command in WISCAT_SERVICES.items():
        if name not in services:
            continue
        try:
            settings = settings_from_env(service_env(services[name], env_file))
        except ValueError as exc:
            problems.append(f"{name}: invalid settings: {exc}")
            continue
        if not settings.database_url:
            problems.append(f"{name} has no WISCAT_DATABASE_URL")
            continue
        hosts, *given, query = _hosts(settings.database_url)
        if sorted(hosts) != sorted(DATABASES):
            problems.append(f"{name}: its database URL names {hosts}, not both servers")
        if query.get("target_session_attrs") != ["read-write"]:
            problems.append(f"{name}: its database URL may reach the standby for writes")
        if tuple(given) != credentials:
            problems.append(f"{name}: its database URL does not match the primary's {credentials}")
        read = settings.database_read_url
        if command != "provider":
            if read:
                problems.append(f"{name} has a read URL, which only the provider reads")
            continue
        if not read:
            problems.append(f"{name} does not read from the standby (WISCAT_DATABASE_READ_URL)")
            continue
        hosts, *given, query = _hosts(read)
        if hosts != ["standby"] or tuple(given) != credentials:
            problems.append(f"{name}: its read URL {hosts} is not the standby's, one host")
    return problems


def port_problems(compose: dict[str, Any], env_text: str, mounts: dict[str, str]) -> list[str]:
    """The load balancer publishes the base URL's port and passes to every provider at its
    port; the providers publish none; each harvester's port is on the host's loopback."""
    services = compose.get("services") or {}
    env_file = env_file_values(env_text)
    problems = []
    lb = services.get("lb") or {}
    # its default, when LB_IMAGE names no stand-in built from Debian's packages
    image = interpolate(str(lb.get("image", "")), {})
    if not image.startswith("nginx"):
        problems.append(f"lb runs {image!r}, not nginx")
    config = mounted(lb, NGINX_SITES, mounts)
    upstreams = set(re.findall(r"server\s+([\w.-]+:\d+)", config))
    listens = {int(port) for port in re.findall(r"listen\s+(\d+)", config)}
    providers = [name for name, c in WISCAT_SERVICES.items() if c == "provider"]
    base_ports = set()
    for name in providers:
        svc = services.get(name) or {}
        args, _ = parse_wiscat(service_argv(svc, DOCKERFILE.read_text()))
        settings = settings_from_env(service_env(svc, env_file))
        port = args.port if args and args.port else settings.provider_port
        if f"{name}:{port}" not in upstreams:
            problems.append(f"the load balancer does not pass to {name}:{port}: {upstreams}")
        if svc.get("ports"):
            problems.append(f"{name} publishes a port: the load balancer is the way in")
        if not any(f":{port}/readyz" in url for url in healthcheck_urls(svc)):
            problems.append(f"{name}'s healthcheck does not ask its /readyz on port {port}")
        base_ports.add(urlsplit(settings.base_url).port)
    for host_port, container in published(lb):
        if container not in listens:
            problems.append(f"lb publishes {container}, where nginx does not listen {listens}")
        if host_port not in base_ports:
            problems.append(f"lb publishes {host_port}, not the base URL's port {base_ports}")
    host_ports = []
    for name in (n for n, c in WISCAT_SERVICES.items() if c == "harvester"):
        svc = services.get(name) or {}
        problems += [
            f"{name}'s port is published on {address or 'every interface'}, not 127.0.0.1"
            for address in published_addresses(svc)
            if address != "127.0.0.1"
        ]
        host_ports += [host for host, _ in published(svc)]
    if len(host_ports) != len(set(host_ports)):
        problems.append(f"two harvesters publish one host port: {host_ports}")
    return problems


def _run_all(files: Files) -> list[str]:
    compose = load_compose(files.compose)
    return (
        service_problems(compose, files.mounts)
        + database_problems(compose, files.env)
        + port_problems(compose, files.env, files.mounts)
        + mount_problems(compose, files.mounts)
        + env_name_problems(files.compose, "compose.ha.yaml")
    )


@pytest.fixture(scope="module")
def files() -> Files:
    text = COMPOSE_HA.read_text()
    return Files(text, ENV_EXAMPLE.read_text(), mounted_texts(load_compose(text)))


def test_services_and_dependencies(files: Files) -> None:
    assert service_problems(load_compose(files.compose), files.mounts) == []


def test_services_take_the_primary_and_providers_read_the_standby(files: Files) -> None:
    assert database_problems(load_compose(files.compose), files.env) == []


def test_ports_load_balancer_and_healthchecks(files: Files) -> None:
    assert port_problems(load_compose(files.compose), files.env, files.mounts) == []


def test_mounted_files_are_in_the_checkout(files: Files) -> None:
    wanted = ["deploy/ha/load-balancer.conf", "deploy/ha/replication-access.sh"]
    assert sorted(files.mounts) == wanted
    assert mount_problems(load_compose(files.compose), files.mounts) == []


def test_wiscat_variables_are_settings(files: Files) -> None:
    assert env_name_problems(files.compose, "compose.ha.yaml") == []


def _edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Files], Files]:
    def mutate(files: Files) -> Files:
        compose = copy.deepcopy(load_compose(files.compose))
        change(compose)
        return files._replace(compose=yaml.safe_dump(compose, sort_keys=False))

    return mutate


def _mounted(source: str, old: str, new: str) -> Callable[[Files], Files]:
    def mutate(files: Files) -> Files:
        changed = files.mounts[source].replace(old, new)
        return files._replace(mounts=files.mounts | {source: changed})

    return mutate


def _volumes(service: str, keep: Callable[[str], bool]) -> Callable[[dict[str, Any]], None]:
    def change(compose: dict[str, Any]) -> None:
        svc = compose["services"][service]
        svc["volumes"] = [v for v in svc["volumes"] if keep(str(v))]

    return change


def _env(service: str, **values: str | None) -> Callable[[dict[str, Any]], None]:
    def change(compose: dict[str, Any]) -> None:
        env = compose["services"][service]["environment"]
        for key, value in values.items():
            if value is None:
                env.pop(key)
            else:
                env[key] = value

    return change


URL = "postgresql://wiscat:wiscat@{}/wiscat"
MUTATIONS: dict[str, Callable[[Files], Files]] = {
    "no second harvester": _edit(lambda c: c["services"].pop("harvester2")),
    "standby not a copy": _edit(lambda c: c["services"]["standby"].update(command=["postgres"])),
    "no replication access": _edit(_volumes("primary", lambda v: INIT_SCRIPTS not in v)),
    "replication access for nobody": _mounted(
        "deploy/ha/replication-access.sh", "host replication", "host all"
    ),
    "standby on another image": _edit(lambda c: c["services"]["standby"].update(image="mysql:8")),
    "load balancer on another image": _edit(
        lambda c: c["services"]["lb"].update(image="${LB_IMAGE:-traefik:3}")
    ),
    "load balancer settings not mounted": _edit(_volumes("lb", lambda v: False)),
    "a mounted file missing": _edit(
        lambda c: c["services"]["lb"].update(volumes=["./lb.conf:/etc/nginx/conf.d/a.conf"])
    ),
    "settings as configs": _edit(lambda c: c.update(configs={"x": {"content": "x"}})),
    "harvester on the primary only": _edit(
        _env("harvester1", WISCAT_DATABASE_URL=URL.format("primary:5432"))
    ),
    "provider may write to the standby": _edit(
        _env(
            "provider2",
            WISCAT_DATABASE_URL=URL.format("primary:5432,standby:5432"),
        )
    ),
    "provider reads the primary": _edit(_env("provider1", WISCAT_DATABASE_READ_URL=None)),
    "harvester reads the standby": _edit(
        _env("harvester2", WISCAT_DATABASE_READ_URL=URL.format("standby:5432"))
    ),
    "provider published": _edit(lambda c: c["services"]["provider1"].update(ports=["8080:8080"])),
    "load balancer misses a provider": _mounted(
        "deploy/ha/load-balancer.conf", "server provider2:8080", "server provider3:8080"
    ),
    "harvester on every interface": _edit(
        lambda c: c["services"]["harvester2"].update(ports=["8082:8081"])
    ),
    "unknown variable": _edit(_env("provider1", WISCAT_READ_URL="x")),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_checks_catch(files: Files, mutation: str) -> None:
    broken = MUTATIONS[mutation](files)
    assert broken != files
    new = set(_run_all(broken)) - set(_run_all(files))
    assert new, f"no check noticed: {mutation}"
