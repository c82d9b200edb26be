"""What the harvester's page workers import: the module their fork server preloads, alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# what a worker needs (the parser and the record's checks), and what it must not hold: the
# event loop's side and the command line
WATCHED = (
    "aiohttp",
    "asyncpg",
    "pydantic",
    "fastapi",
    "wiscat.cli",
    "lxml.etree",
    "wiscat.shared.iso19139",
)


def _loaded(setup: str, *args: str) -> list[str]:
    """Which of :data:`WATCHED` a fresh interpreter holds once it ran ``setup`` (``args`` are
    its ``sys.argv[1:]``)."""
    probe = f"import sys; {setup}; print(' '.join(m for m in {WATCHED!r} if m in sys.modules))"
    run = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, check=True
    )
    return sorted(run.stdout.split())


def test_the_page_workers_import_neither_the_http_client_nor_the_database_driver() -> None:
    # a fresh interpreter, as the fork server is: what importing the module pulls in
    loaded = _loaded("import wiscat.harvester.page_workers")
    # what a worker needs, and nothing of the event loop's side
    assert loaded == ["lxml.etree", "wiscat.shared.iso19139"]


def test_the_wiscat_command_adds_nothing_to_what_a_page_worker_imports() -> None:
    """L04: a page worker started by the ``wiscat`` script imports nothing of the command line.
    A worker the fork server starts runs its parent's main script again (as ``__mp_main__``),
    to find what the parent defined there: for a harvester that is the ``wiscat`` script, and
    whatever the script imports, every page worker imports too (about 25 MB each, measured
    from the command). ``spawn.prepare`` is how the worker does it."""
    script = Path(sys.executable).with_name("wiscat")
    loaded = _loaded(
        "from multiprocessing import spawn; "
        "spawn.prepare({'init_main_from_path': sys.argv[1]}); "
        "assert '__mp_main__' in sys.modules",
        str(script),
    )
    assert loaded == []
