"""What compose.yaml, .env.example, the Dockerfile and .dockerignore must say, as functions that
list the problems of given texts (the tests run them on the real files and on broken copies)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from wiscat.cli import build_parser
from wiscat.shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


COMPOSE = ROOT / "compose.yaml"


ENV_EXAMPLE = ROOT / ".env.example"


DOCKERFILE = ROOT / "Dockerfile"


DOCKERIGNORE = ROOT / ".dockerignore"


PYPROJECT = ROOT / "pyproject.toml"


WISCAT_SERVICES = {"migrate": "migrate", "provider": "provider", "harvester": "harvester"}


SERVED = {"provider": "provider_port", "harvester": "harvester_port"}


HEALTH_PATHS = {"/healthz", "/readyz"}


LOOPBACK = {"127.0.0.1", "localhost", "::1"}


WISCAT_NAME = re.compile(r"\bWISCAT_[A-Za-z0-9_]+")


INTERPOLATION = re.compile(
    r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)"
)


def _case_sensitive() -> bool:
    return bool(Settings.model_config.get("case_sensitive", False))


def _norm(name: str) -> str:
    return name if _case_sensitive() else name.upper()


def setting_env_names() -> dict[str, str]:
    """Environment variable -> field of Settings, as pydantic-settings reads them."""
    prefix = Settings.model_config.get("env_prefix", "")
    names: dict[str, str] = {}
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias if isinstance(field.validation_alias, str) else field.alias
        names[_norm(alias or f"{prefix}{field_name}")] = field_name
    return names


def settings_from_env(env: dict[str, str]) -> Settings:
    """Settings as a process with exactly ``env`` would build them (no .env, no os.environ)."""
    names = setting_env_names()
    values = {names[_norm(k)]: v for k, v in env.items() if _norm(k) in names}
    return Settings.model_validate(values)


def parse_wiscat(argv: list[str]) -> tuple[Any, str | None]:
    """The parsed arguments of a ``wiscat`` command line, or the parser's complaint."""
    if not argv or argv[0] != "wiscat":
        return None, f"{argv!r} does not run the wiscat console script"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv[1:]), None
    except SystemExit:
        return None, f"{shlex.join(argv)!r} is not a valid wiscat command: {err.getvalue().strip()}"


def load_compose(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict), "compose.yaml is not a mapping"
    return data


def env_file_values(text: str) -> dict[str, str]:
    """KEY=VALUE lines of a docker env file (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value
    return values


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``$VAR`` against the project .env."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        default = match.group(2)
        return env.get(name) or (default if default is not None else "")

    return INTERPOLATION.sub(one, value)


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line:
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def exec_form(value: str) -> list[str] | None:
    """The argv of a JSON (exec) form, None for the shell form."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    if isinstance(parsed, list) and all(isinstance(x, str) for x in parsed):
        return parsed
    return None


def image_argv(dockerfile: str) -> tuple[list[str] | None, list[str] | None, list[str]]:
    """ENTRYPOINT and CMD (the last of each) as exec-form argv, and problems with them."""
    problems = []
    entrypoint = cmd = None
    for word, rest in dockerfile_instructions(dockerfile):
        if word in ("CMD", "ENTRYPOINT"):
            argv = exec_form(rest)
            if argv is None:
                problems.append(
                    f"Dockerfile {word} {rest} uses the shell form: /bin/sh would be PID 1 and "
                    "wiscat would never see SIGTERM; use the JSON form"
                )
            if word == "CMD":
                cmd = argv
            else:
                entrypoint = argv
    return entrypoint, cmd, problems


def as_argv(value: Any) -> list[str] | None:
    if value is None:
        return None
    return shlex.split(value) if isinstance(value, str) else [str(x) for x in value]


def service_argv(svc: dict[str, Any], dockerfile: str) -> list[str]:
    """What a container of the image runs: entrypoint + command, compose overriding the image."""
    entrypoint, cmd, _ = image_argv(dockerfile)
    if "entrypoint" in svc:
        entrypoint, cmd = as_argv(svc["entrypoint"]), None
    if "command" in svc:
        cmd = as_argv(svc["command"])
    return (entrypoint or []) + (cmd or [])


def service_env(svc: dict[str, Any], env_file: dict[str, str]) -> dict[str, str]:
    """The container's environment; ``.env`` is a copy of .env.example (compose.yaml says so)."""
    env: dict[str, str] = {}
    if svc.get("env_file"):
        env.update(env_file)
    environment = svc.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.partition("=")[::2] for item in environment)
    for key, value in environment.items():
        env[key] = interpolate("" if value is None else str(value), env_file)
    return env


def depends_on(svc: dict[str, Any]) -> dict[str, str]:
    """Service -> condition (the list form means service_started)."""
    deps = svc.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: "service_started" for name in deps}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def published(svc: dict[str, Any]) -> list[tuple[int | None, int]]:
    """(host port or None, container port) of every published port."""
    ports = []
    for entry in svc.get("ports") or []:
        if isinstance(entry, dict):
            host = entry.get("published")
            ports.append((int(host) if host is not None else None, int(entry["target"])))
            continue
        parts = str(entry).split("/")[0].rsplit(":", 2)
        container = int(parts[-1])
        host_port = int(parts[-2]) if len(parts) >= 2 and parts[-2] else None
        ports.append((host_port, container))
    return ports


def published_addresses(svc: dict[str, Any]) -> list[str | None]:
    """The host address each published port binds (None: every interface of the host)."""
    addresses: list[str | None] = []
    for entry in svc.get("ports") or []:
        if isinstance(entry, dict):
            addresses.append(entry.get("host_ip"))
            continue
        parts = str(entry).split("/")[0].rsplit(":", 2)
        addresses.append(parts[0].strip("[]") if len(parts) == 3 and parts[0] else None)
    return addresses


def healthcheck_urls(svc: dict[str, Any]) -> list[str]:
    test = (svc.get("healthcheck") or {}).get("test")
    text = " ".join(test) if isinstance(test, list) else str(test or "")
    return re.findall(r"https?://[^\s'\"),]+", text)


def service_problems(compose: dict[str, Any]) -> list[str]:
    """db (postgres, healthy), one-shot migrate, provider and harvester waiting on both."""
    services = compose.get("services") or {}
    problems = [f"no service {name!r}" for name in ("db", *WISCAT_SERVICES) if name not in services]
    if problems:
        return problems
    db = services["db"]
    # its default, when POSTGRES_IMAGE names no stand-in built from Debian's packages
    db_image = interpolate(str(db.get("image", "")), {})
    if not db_image.startswith("postgres"):
        problems.append(f"db runs {db_image!r}, not a postgres image")
    db_test = " ".join(as_argv((db.get("healthcheck") or {}).get("test")) or [])
    if "pg_isready" not in db_test:
        problems.append("db has no pg_isready healthcheck, so service_healthy means nothing")

    migrate = services["migrate"]
    if str(migrate.get("restart", "no")) != "no":
        problems.append(f"migrate restarts ({migrate['restart']!r}); it must run once")
    if migrate.get("ports"):
        problems.append("migrate publishes ports; it serves nothing")
    if depends_on(migrate).get("db") != "service_healthy":
        problems.append("migrate does not wait for db to be healthy")

    for name in ("provider", "harvester"):
        deps = depends_on(services[name])
        if deps.get("migrate") != "service_completed_successfully":
            problems.append(f"{name} does not wait for migrate to complete successfully: {deps}")
        if deps.get("db") != "service_healthy":
            problems.append(f"{name} does not wait for db to be healthy: {deps}")
        if str(services[name].get("restart", "no")) == "no":
            problems.append(f"{name} is not restarted when it stops")
    return problems


def command_problems(compose: dict[str, Any], dockerfile: str) -> list[str]:
    """Each wiscat service runs the console script with the matching, valid subcommand."""
    services = compose.get("services") or {}
    problems = []
    for name, command in WISCAT_SERVICES.items():
        if name not in services:
            problems.append(f"no service {name!r}")
            continue
        argv = service_argv(services[name], dockerfile)
        args, error = parse_wiscat(argv)
        if error:
            problems.append(f"{name}: {error}")
        elif args.command != command:
            problems.append(f"{name} runs `wiscat {args.command}`, not `wiscat {command}`")
    return problems


def env_name_problems(text: str, where: str) -> list[str]:
    """Every WISCAT_* name in the text is a field of Settings."""
    known = setting_env_names()
    return [
        f"{where}: {name} is not a setting (known: {', '.join(sorted(known))})"
        for name in sorted(set(WISCAT_NAME.findall(text)))
        if _norm(name) not in known
    ]


def env_example_problems(env_text: str, compose_text: str) -> list[str]:
    """.env.example's values are valid settings; its other names are used by compose.yaml."""
    problems = []
    values = env_file_values(env_text)
    try:
        settings_from_env(values)
    except ValueError as exc:
        problems.append(f".env.example: invalid settings: {exc}")
    used_by_compose = {m.group(1) or m.group(3) for m in INTERPOLATION.finditer(compose_text)}
    for key in values:
        if not key.startswith("WISCAT_") and key not in used_by_compose:
            problems.append(f".env.example: {key} is neither a setting nor used by compose.yaml")
    return problems


def port_problems(compose: dict[str, Any], env_text: str, dockerfile: str) -> list[str]:  # noqa: C901
    """Listening, published, health-checked and exposed ports all equal the configured ones."""
    services = compose.get("services") or {}
    env_file = env_file_values(env_text)
    problems = []
    exposed = {
        int(p.split("/")[0])
        for word, rest in dockerfile_instructions(dockerfile)
        if word == "EXPOSE"
        for p in rest.split()
    }
    for name, port_field in SERVED.items():
        svc = services.get(name)
        if svc is None:
            problems.append(f"no service {name!r}")
            continue
        env = service_env(svc, env_file)
        try:
            settings = settings_from_env(env)
        except ValueError as exc:
            problems.append(f"{name}: invalid settings: {exc}")
            continue
        configured = getattr(settings, port_field)
        env_name = next(k for k, v in setting_env_names().items() if v == port_field)
        args, error = parse_wiscat(service_argv(svc, dockerfile))
        if error:
            problems.append(f"{name}: {error}")
            continue
        # As services/cli/serve.py does: --port, else the setting; the harvester has no --host.
        port = args.port or configured
        host = getattr(args, "host", None) or settings.provider_host
        if port != configured:
            problems.append(f"{name} listens on {port} but {env_name} is {configured}")
        ports = published(svc)
        if not ports:
            problems.append(f"{name} publishes no port")
        for host_port, container_port in ports:
            if container_port != configured:
                problems.append(
                    f"{name} publishes container port {container_port}, not {configured}"
                )
            if host_port is not None and host_port != configured:
                problems.append(f"{name} publishes host port {host_port}, not {configured}")
        if ports and host in LOOPBACK:
            problems.append(f"{name} binds {host} inside its container: its published port is dead")
        urls = healthcheck_urls(svc)
        if not urls:
            problems.append(f"{name} has no HTTP healthcheck")
        for url in urls:
            parts = urlsplit(url)
            if parts.port != configured or parts.hostname not in LOOPBACK:
                problems.append(f"{name} healthcheck {url} is not loopback port {configured}")
            if parts.path not in HEALTH_PATHS:
                problems.append(f"{name} healthcheck {url} is not one of {sorted(HEALTH_PATHS)}")
        if configured not in exposed:
            problems.append(f"Dockerfile does not EXPOSE {configured} ({name})")
        if name == "provider":
            base = urlsplit(settings.base_url)
            base_port = base.port or (443 if base.scheme == "https" else 80)
            if ports and base_port not in {h for h, _ in ports}:
                problems.append(
                    f"WISCAT_BASE_URL {settings.base_url} is not on the published provider port"
                )
    return problems


def harvester_exposure_problems(compose: dict[str, Any]) -> list[str]:
    """The harvester's port (health and metrics, no authentication) is on the host's loopback."""
    harvester = (compose.get("services") or {}).get("harvester") or {}
    return [
        f"the harvester's port is published on {address or 'every interface'}, not 127.0.0.1"
        for address in published_addresses(harvester)
        if address not in LOOPBACK
    ]


def database_problems(compose: dict[str, Any], env_text: str) -> list[str]:
    """Every wiscat service talks to the db service with its user, password and database."""
    services = compose.get("services") or {}
    env_file = env_file_values(env_text)
    db_env = service_env(services.get("db") or {}, env_file)
    problems = []
    for name in WISCAT_SERVICES:
        if name not in services:
            continue
        try:
            url = settings_from_env(service_env(services[name], env_file)).database_url
        except ValueError as exc:
            problems.append(f"{name}: invalid settings: {exc}")
            continue
        if not url:
            problems.append(f"{name} has no WISCAT_DATABASE_URL: it would start its own database")
            continue
        parts = urlsplit(url)
        wanted = (
            "db",
            db_env.get("POSTGRES_USER", "postgres"),
            db_env.get("POSTGRES_PASSWORD"),
            db_env.get("POSTGRES_DB", db_env.get("POSTGRES_USER", "postgres")),
        )
        got = (parts.hostname, parts.username, parts.password, parts.path.lstrip("/"))
        if got != wanted:
            problems.append(f"{name}: database URL {url} does not match the db service {wanted}")
    return problems


def dockerfile_problems(dockerfile: str, pyproject: str) -> list[str]:
    """The image installs the project and starts the ``wiscat`` console script."""
    problems = []
    scripts = tomllib.loads(pyproject).get("project", {}).get("scripts", {})
    if scripts.get("wiscat") != "wiscat.__main__:main":
        problems.append(f"pyproject.toml has no wiscat = wiscat.__main__:main script: {scripts}")
    runs = [rest for word, rest in dockerfile_instructions(dockerfile) if word == "RUN"]
    if not any(re.search(r"pip install\b[^&;]*\s'?\.(\[[a-z,]+\])?'?(\s|$)", run) for run in runs):
        problems.append("Dockerfile does not pip install the project (no wiscat script)")
    entrypoint, cmd, form = image_argv(dockerfile)
    problems += form
    if entrypoint is None and cmd is None:
        problems.append("Dockerfile has neither CMD nor ENTRYPOINT")
    elif not form:
        _, error = parse_wiscat((entrypoint or []) + (cmd or []))
        if error:
            problems.append(f"Dockerfile: {error}")
    return problems


def dockerignore_problems(dockerignore: str, dockerfile: str) -> list[str]:
    """The build context leaves out secrets and the embedded database, and keeps what is copied."""
    patterns = [
        line.strip().rstrip("/")
        for line in dockerignore.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    problems = [
        f".dockerignore does not leave out {name}"
        for name in (".env", "var", ".venv")
        if name not in patterns
    ]
    for word, rest in dockerfile_instructions(dockerfile):
        if word == "COPY":
            for source in [t for t in shlex.split(rest) if not t.startswith("--")][:-1]:
                if any(fnmatch(source.removeprefix("./"), p) for p in patterns):
                    problems.append(f".dockerignore leaves out {source}, which the image copies")
    return problems


def base_image_problems(compose: dict[str, Any], dockerfile: str) -> list[str]:
    """Every stage starts from the PYTHON_IMAGE build argument (a stand-in built from Debian's
    packages where no registry is reached), whose default compose.yaml repeats."""
    problems = []
    instructions = dockerfile_instructions(dockerfile)
    defaults = dict(
        rest.partition("=")[::2] for word, rest in instructions if word == "ARG" and "=" in rest
    )
    if "PYTHON_IMAGE" not in defaults:
        problems.append("Dockerfile has no ARG PYTHON_IMAGE=<default base image>")
    stages: set[str] = set()
    for word, rest in instructions:
        if word == "FROM":
            image, _, name = rest.partition(" AS ")
            if image not in stages and image not in ("${PYTHON_IMAGE}", "$PYTHON_IMAGE"):
                problems.append(f"Dockerfile FROM {image}: not the PYTHON_IMAGE build argument")
            stages.add(name.strip())
    for name in WISCAT_SERVICES:
        build = ((compose.get("services") or {}).get(name) or {}).get("build") or {}
        args = build.get("args") or {} if isinstance(build, dict) else {}
        wanted = defaults.get("PYTHON_IMAGE")
        got = interpolate(str(args.get("PYTHON_IMAGE", "")), {})
        if got != wanted:
            problems.append(
                f"{name} builds with PYTHON_IMAGE {got!r}, the Dockerfile's is {wanted!r}"
            )
    return problems


def install_problems(dockerfile: str) -> list[str]:
    """The image installs wiscat as a package (not editable), from the sources it copies.

    The migrations and SQL files are package data (tests/integration/test_packaging.py shows the
    wheel holds them), so a plain install carries them; an editable install would run the code
    from the build folder instead. The build needs services/, shared/ and migrations/ copied in.
    """
    problems = []
    copied: set[str] = set()
    for word, rest in dockerfile_instructions(dockerfile):
        if word == "COPY":
            tokens = [t for t in shlex.split(rest) if not t.startswith("--")]
            if any(t.startswith("--from") for t in shlex.split(rest)):
                continue
            copied.update(source.removeprefix("./").rstrip("/") for source in tokens[:-1])
        elif word == "RUN" and re.search(r"pip install\b[^&;]*(\s-e|--editable)\s", rest):
            problems.append("the image installs wiscat editable: install it as a package")
    missing = [
        d for d in ("services", "shared", "migrations") if d not in copied and "." not in copied
    ]
    if missing:
        problems.append(f"the image builds wiscat without {', '.join(missing)}/")
    return problems
