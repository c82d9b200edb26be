"""compose.ha.yaml (a primary and its standby, two providers behind a load balancer, two
harvesters) agrees with the code, checked as tests/integration/test_compose.py checks
compose.yaml, with its helpers: nothing is built or started."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import yaml

from tests.compose_checks import (
    DOCKERFILE,
    ENV_EXAMPLE,
    ROOT,
    depends_on,
    env_file_values,
    env_name_problems,
    healthcheck_urls,
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


def service_problems(compose: dict[str, Any]) -> list[str]:
    """The services, what they wait for, and the standby made from the primary."""
    services = compose.get("services") or {}
    wanted = (*DATABASES, "lb", *WISCAT_SERVICES)
    problems = [f"no service {name!r}" for name in wanted if name not in services]
    if problems:
        return problems
    for name in DATABASES:
        db = services[name]
        if not str(db.get("image", "")).startswith("postgres"):
            problems.append(f"{name} runs {db.get('image')!r}, not a postgres image")
        if "pg_isready" not in str((db.get("healthcheck") or {}).get("test")):
            problems.append(f"{name} has no pg_isready healthcheck")
    standby = " ".join(service_argv(services["standby"], ""))
    if not re.search(r"pg_basebackup -h primary\b.*\s-R\b", standby):
        problems.append("the standby is not copied from primary by pg_basebackup -R")
    if depends_on(services["standby"]).get("primary") != "service_healthy":
        problems.append("the standby does not wait for the primary to be healthy")
    access = (compose.get("configs") or {}).get("replication-access", {}).get("content", "")
    mounted = [c.get("source") for c in services["primary"].get("configs") or []]
    if "host replication" not in access or "replication-access" not in mounted:
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


def port_problems(compose: dict[str, Any], env_text: str) -> list[str]:
    """The load balancer publishes the base URL's port and passes to every provider at its
    port; the providers publish none; each harvester's port is on the host's loopback."""
    services = compose.get("services") or {}
    env_file = env_file_values(env_text)
    problems = []
    lb = services.get("lb") or {}
    if not str(lb.get("image", "")).startswith(("nginx", "haproxy")):
        problems.append(f"lb runs {lb.get('image')!r}, not nginx or haproxy")
    config = (compose.get("configs") or {}).get("load-balancer", {}).get("content", "")
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


def _run_all(compose_text: str, env_text: str) -> list[str]:
    compose = load_compose(compose_text)
    return (
        service_problems(compose)
        + database_problems(compose, env_text)
        + port_problems(compose, env_text)
        + env_name_problems(compose_text, "compose.ha.yaml")
    )


@pytest.fixture(scope="module")
def files() -> tuple[str, str]:
    return COMPOSE_HA.read_text(), ENV_EXAMPLE.read_text()


def test_services_and_dependencies(files: tuple[str, str]) -> None:
    assert service_problems(load_compose(files[0])) == []


def test_services_take_the_primary_and_providers_read_the_standby(
    files: tuple[str, str],
) -> None:
    assert database_problems(load_compose(files[0]), files[1]) == []


def test_ports_load_balancer_and_healthchecks(files: tuple[str, str]) -> None:
    assert port_problems(load_compose(files[0]), files[1]) == []


def test_wiscat_variables_are_settings(files: tuple[str, str]) -> None:
    assert env_name_problems(files[0], "compose.ha.yaml") == []


def _edit(change: Callable[[dict[str, Any]], None]) -> Callable[[str], str]:
    def mutate(text: str) -> str:
        compose = copy.deepcopy(load_compose(text))
        change(compose)
        return yaml.safe_dump(compose, sort_keys=False)

    return mutate


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
MUTATIONS: dict[str, Callable[[str], str]] = {
    "no second harvester": _edit(lambda c: c["services"].pop("harvester2")),
    "standby not a copy": _edit(lambda c: c["services"]["standby"].update(command=["postgres"])),
    "no replication access": _edit(lambda c: c["configs"].pop("replication-access")),
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
    "load balancer misses a provider": lambda text: text.replace(
        "server provider2:8080", "server provider3:8080", 1
    ),
    "harvester on every interface": _edit(
        lambda c: c["services"]["harvester2"].update(ports=["8082:8081"])
    ),
    "unknown variable": _edit(_env("provider1", WISCAT_READ_URL="x")),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_checks_catch(files: tuple[str, str], mutation: str) -> None:
    broken = MUTATIONS[mutation](files[0])
    assert broken != files[0]
    new = set(_run_all(broken, files[1])) - set(_run_all(*files))
    assert new, f"no check noticed: {mutation}"
