"""compose.yaml, .env.example, the Dockerfile and .dockerignore agree with the code.

Static checks: nothing is built or started. Each aspect is a function that returns the problems
it finds; the tests run them on the real files, and the mutation tests at the end feed each one
a broken copy to show that it can fail.

The truth comes from the code: the ``WISCAT_*`` names from ``Settings.model_fields`` and the
``env_prefix`` of its ``model_config``, the ports from the settings' defaults (or the values the
deployment sets), the commands from ``wiscat.cli.build_parser``."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.support.compose_checks import (
    COMPOSE,
    DOCKERFILE,
    DOCKERIGNORE,
    ENV_EXAMPLE,
    PYPROJECT,
    WISCAT_NAME,
    base_image_problems,
    command_problems,
    database_problems,
    dockerfile_problems,
    dockerignore_problems,
    env_example_problems,
    env_name_problems,
    harvester_exposure_problems,
    install_problems,
    load_compose,
    port_problems,
    service_problems,
    setting_env_names,
)
from wiscat.shared.settings import Settings


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return {
        "compose": COMPOSE.read_text(),
        "env": ENV_EXAMPLE.read_text(),
        "dockerfile": DOCKERFILE.read_text(),
        "dockerignore": DOCKERIGNORE.read_text(),
        "pyproject": PYPROJECT.read_text(),
    }


def test_env_names_come_from_settings() -> None:
    names = setting_env_names()
    assert len(names) == len(Settings.model_fields)
    assert all(name.startswith(Settings.model_config["env_prefix"]) for name in names)
    assert names["WISCAT_PROVIDER_PORT"] == "provider_port"
    assert "WISCAT_NOT_A_SETTING" not in names


def test_compose_parses(files: dict[str, str]) -> None:
    compose = load_compose(files["compose"])
    assert isinstance(compose.get("services"), dict)


def test_services_and_dependencies(files: dict[str, str]) -> None:
    assert service_problems(load_compose(files["compose"])) == []


def test_services_run_wiscat_commands(files: dict[str, str]) -> None:
    assert command_problems(load_compose(files["compose"]), files["dockerfile"]) == []


@pytest.mark.parametrize("which", ["compose", "env"])
def test_wiscat_variables_are_settings(files: dict[str, str], which: str) -> None:
    where = {"compose": "compose.yaml", "env": ".env.example"}[which]
    assert WISCAT_NAME.search(files[which]), f"{where} names no WISCAT_ variable"
    assert env_name_problems(files[which], where) == []


def test_env_example_values(files: dict[str, str]) -> None:
    assert env_example_problems(files["env"], files["compose"]) == []


def test_ports_and_healthchecks(files: dict[str, str]) -> None:
    compose = load_compose(files["compose"])
    assert port_problems(compose, files["env"], files["dockerfile"]) == []


def test_harvester_port_on_loopback_only(files: dict[str, str]) -> None:
    """The harvester's /metrics and /healthz answer anyone who reaches them: on 127.0.0.1 only."""
    assert harvester_exposure_problems(load_compose(files["compose"])) == []


def test_services_share_the_db(files: dict[str, str]) -> None:
    assert database_problems(load_compose(files["compose"]), files["env"]) == []


def test_dockerfile_runs_wiscat(files: dict[str, str]) -> None:
    assert dockerfile_problems(files["dockerfile"], files["pyproject"]) == []


def test_image_built_on_the_base_image_argument(files: dict[str, str]) -> None:
    assert base_image_problems(load_compose(files["compose"]), files["dockerfile"]) == []


def test_image_installs_the_package(files: dict[str, str]) -> None:
    assert install_problems(files["dockerfile"]) == []


def test_build_context_leaves_out_secrets_and_data(files: dict[str, str]) -> None:
    assert dockerignore_problems(files["dockerignore"], files["dockerfile"]) == []


def _compose(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, str]], dict[str, str]]:
    def mutate(files: dict[str, str]) -> dict[str, str]:
        compose = copy.deepcopy(load_compose(files["compose"]))
        edit(compose)
        return {**files, "compose": yaml.safe_dump(compose, sort_keys=False)}

    return mutate


def _text(which: str, old: str, new: str) -> Callable[[dict[str, str]], dict[str, str]]:
    def mutate(files: dict[str, str]) -> dict[str, str]:
        assert old in files[which], f"{old!r} not in {which}: update this mutation"
        return {**files, which: files[which].replace(old, new, 1)}

    return mutate


def _svc(name: str, **changes: Any) -> Callable[[dict[str, Any]], None]:
    def edit(compose: dict[str, Any]) -> None:
        svc = compose["services"][name]
        for key, value in changes.items():
            if value is None:
                svc.pop(key, None)
            else:
                svc[key] = value

    return edit


def _run_all(files: dict[str, str]) -> list[str]:
    compose = load_compose(files["compose"])
    return (
        service_problems(compose)
        + command_problems(compose, files["dockerfile"])
        + env_name_problems(files["compose"], "compose.yaml")
        + env_name_problems(files["env"], ".env.example")
        + env_example_problems(files["env"], files["compose"])
        + port_problems(compose, files["env"], files["dockerfile"])
        + harvester_exposure_problems(compose)
        + database_problems(compose, files["env"])
        + dockerfile_problems(files["dockerfile"], files["pyproject"])
        + base_image_problems(compose, files["dockerfile"])
        + install_problems(files["dockerfile"])
        + dockerignore_problems(files["dockerignore"], files["dockerfile"])
    )


MUTATIONS: dict[str, Callable[[dict[str, str]], dict[str, str]]] = {
    "no harvester": _compose(lambda c: c["services"].pop("harvester")),
    "db not postgres": _compose(_svc("db", image="mysql:8")),
    "db without healthcheck": _compose(_svc("db", healthcheck=None)),
    "migrate restarts": _compose(_svc("migrate", restart="unless-stopped")),
    "provider skips migrate": _compose(
        _svc("provider", depends_on={"db": {"condition": "service_healthy"}})
    ),
    "harvester only starts after migrate": _compose(
        _svc("harvester", depends_on=["migrate", "db"])
    ),
    "harvester ignores db health": _compose(
        _svc(
            "harvester",
            depends_on={"migrate": {"condition": "service_completed_successfully"}},
        )
    ),
    "migrate runs the wrong command": _compose(_svc("migrate", command=["wiscat", "run"])),
    "provider not the console script": _compose(
        _svc("provider", command=["python", "-m", "wiscat.cli", "provider"])
    ),
    "unknown subcommand": _compose(_svc("harvester", command=["wiscat", "harvest-all"])),
    "unknown variable in compose": _compose(
        lambda c: (
            c["services"]["provider"].setdefault("environment", {}).update(WISCAT_PAGESIZE="100")
        )
    ),
    "unknown variable in .env.example": _text("env", "WISCAT_PAGE_SIZE=", "WISCAT_PAGESIZE="),
    "invalid value in .env.example": _text("env", "WISCAT_PAGE_SIZE=500", "WISCAT_PAGE_SIZE=0"),
    "stray variable in .env.example": _text("env", "POSTGRES_PASSWORD=", "PG_PASSWORD="),
    "provider published on another port": _compose(_svc("provider", ports=["8080:9090"])),
    "harvester published on another host port": _compose(_svc("harvester", ports=["9091:8081"])),
    "harvester on every interface": _compose(_svc("harvester", ports=["8081:8081"])),
    "harvester on a public address": _compose(_svc("harvester", ports=["0.0.0.0:8081:8081"])),
    "harvester on every interface (long form)": _compose(
        _svc("harvester", ports=[{"target": 8081, "published": 8081}])
    ),
    "harvester listens elsewhere": _compose(
        _svc("harvester", command=["wiscat", "harvester", "--port", "9999"])
    ),
    "port setting changed, compose not": _text(
        "env", "WISCAT_PAGE_SIZE=500", "WISCAT_PAGE_SIZE=500\nWISCAT_HARVESTER_PORT=9000"
    ),
    "provider healthcheck on the wrong port": _compose(
        _svc(
            "provider",
            healthcheck={"test": ["CMD", "curl", "-f", "http://127.0.0.1:8081/readyz"]},
        )
    ),
    "harvester healthcheck on another path": _compose(
        _svc("harvester", healthcheck={"test": ["CMD", "curl", "-f", "http://127.0.0.1:8081/"]})
    ),
    "provider without healthcheck": _compose(_svc("provider", healthcheck=None)),
    "harvester bound to loopback": _compose(
        lambda c: c["services"]["harvester"]["environment"].update(WISCAT_PROVIDER_HOST="127.0.0.1")
    ),
    "base URL on another port": _text("env", "example.org:8080/oai", "example.org:9999/oai"),
    "no database URL": _compose(
        lambda c: c["services"]["provider"]["environment"].pop("WISCAT_DATABASE_URL")
    ),
    "database URL to another host": _compose(
        lambda c: c["services"]["harvester"]["environment"].update(
            WISCAT_DATABASE_URL="postgresql://wiscat:wiscat@localhost:5432/wiscat"
        )
    ),
    "Dockerfile CMD not wiscat": _text("dockerfile", 'CMD ["wiscat", "run"]', 'CMD ["python"]'),
    "Dockerfile CMD shell form": _text("dockerfile", 'CMD ["wiscat", "run"]', "CMD wiscat run"),
    "Dockerfile ENTRYPOINT doubles wiscat": _text(
        "dockerfile", 'CMD ["wiscat", "run"]', 'ENTRYPOINT ["wiscat"]\nCMD ["run"]'
    ),
    "Dockerfile does not expose 8081": _text("dockerfile", "EXPOSE 8080 8081", "EXPOSE 8080"),
    "Dockerfile does not install": _text(
        "dockerfile", "pip install --no-compile -c requirements/node.txt '.[embedded]'", "true"
    ),
    "image without migrations": _text("dockerfile", "COPY migrations ./migrations\n", ""),
    "build stage without shared": _text("dockerfile", "COPY shared ./shared\n", ""),
    "compose builds on another base": _text(
        "compose", "${PYTHON_IMAGE:-python:3.11-slim}", "${PYTHON_IMAGE:-python:3.12-slim}"
    ),
    "a stage not on the base image": _text("dockerfile", "FROM ${PYTHON_IMAGE}\n", "FROM debian\n"),
    "build context with the secrets": _text("dockerignore", "\n.env\n", "\n"),
    "build context without migrations": _text("dockerignore", "\nvar\n", "\nvar\nmigrations\n"),
    "editable install": _text(
        "dockerfile", "pip install --no-compile -c", "pip install --no-compile -e -c"
    ),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_checks_catch(files: dict[str, str], mutation: str) -> None:
    broken = MUTATIONS[mutation](files)
    assert broken != files
    new = set(_run_all(broken)) - set(_run_all(files))
    assert new, f"no check noticed: {mutation}"
