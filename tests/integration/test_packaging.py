"""wiscat installs as one package, ``wiscat``, that works without its source tree.

A wheel is built from the repository as ``pip install .`` builds it (with the build backend of
the test environment: no download), and installed (not editable)
into a fresh virtual environment: only ``wiscat`` lands in site-packages (no top-level ``shared``
or ``services`` to clash with another project's), the migrations and SQL files come with it, and
the installed ``wiscat`` and ``python -m wiscat`` run a node's commands against a real database.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.support import pg
from wiscat.shared.db import migrate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            out,
            ROOT,
        ],
        check=True,
        cwd=out,
        timeout=300,
    )
    (built,) = out.glob("wiscat-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtual environment with the wheel installed; the dependencies are the test
    environment's, reached through a .pth file (whose own .pth files, the editable install's
    among them, Python does not read)."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    site = Path(
        subprocess.run(
            [
                venv / "bin" / "python",
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python"]
    subprocess.run(
        [*pip, "install", "--quiet", "--no-deps", "--no-index", wheel],
        check=True,
        timeout=300,
    )
    yield venv


def test_the_wheel_holds_one_package_with_its_migrations_and_sql(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"wiscat", re.sub(r"-py3.*", ".dist-info", wheel.name)}
    sql = sorted(p.name for p in (ROOT / "shared" / "db" / "sql").glob("*.sql"))
    migrations = sorted(p.name for p in (ROOT / "migrations").glob("*.sql"))
    assert sql and migrations
    assert [n for n in names if n.startswith("wiscat/shared/db/sql/")] == [
        f"wiscat/shared/db/sql/{name}" for name in sql
    ]
    assert sorted(
        n for n in names if n.startswith("wiscat/migrations/") and n.endswith(".sql")
    ) == [f"wiscat/migrations/{name}" for name in migrations]
    assert {"wiscat/__main__.py", "wiscat/py.typed", "wiscat/cli/app.py"} <= set(names)
    assert not [n for n in names if n.startswith("wiscat/tests/") or "conftest" in n]


def run(venv: Path, *command: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(venv / "bin" / command[0]), *command[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=venv,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_installed_command_and_module_run_from_site_packages(installed: Path) -> None:
    where = run(installed, "python", "-c", "import wiscat, wiscat.shared; print(wiscat.__file__)")
    assert Path(where.strip()).is_relative_to(installed), where
    assert not where.strip().startswith(str(ROOT))
    version = run(installed, "wiscat", "--version")
    assert version == run(installed, "python", "-m", "wiscat", "--version")
    assert version.startswith("wiscat ")
    assert "usage: wiscat" in run(installed, "python", "-m", "wiscat", "--help")


async def test_the_installed_migrate_applies_every_migration(
    installed: Path, template_ready: str
) -> None:
    name = f"wiscat_pkg_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(template_ready)
    try:
        await conn.execute(f"create database {name}")
    finally:
        await conn.close()
    url = pg.with_database(template_ready, name)
    try:
        run(installed, "wiscat", "migrate", env={"WISCAT_DATABASE_URL": url})
        conn = await asyncpg.connect(url)
        try:
            applied = {
                r["version"] for r in await conn.fetch("select version from schema_migrations")
            }
        finally:
            await conn.close()
        assert applied == {m.version for m in migrate.available()}
    finally:
        await pg.drop_database(template_ready, url)


def test_a_node_without_the_embedded_extra_says_how_to_get_one(tmp_path: Path) -> None:
    """pgserver is the [embedded] extra: a node started without it and without a database URL
    stops with exit code 2 and says what to do (the import refused as if not installed)."""
    env = {k: v for k, v in os.environ.items() if k != "WISCAT_DATABASE_URL"}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['pgserver'] = None; "
            "from wiscat.cli.app import main; sys.exit(main(['run']))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**env, "WISCAT_DATA_DIR": str(tmp_path / "var")},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        "wiscat: the embedded PostgreSQL is not installed: set WISCAT_DATABASE_URL to a "
        "PostgreSQL server, or install wiscat with it (pip install 'wiscat[embedded]')"
    )
