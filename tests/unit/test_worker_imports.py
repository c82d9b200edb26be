"""What the harvester's page workers import: the module their fork server preloads, alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_page_workers_import_neither_the_http_client_nor_the_database_driver() -> None:
    # a fresh interpreter, as the fork server is: what importing the module pulls in
    probe = (
        "import sys, wiscat.harvester.page_workers; "
        "print(' '.join(sorted(m for m in ('aiohttp', 'asyncpg', 'pydantic', 'fastapi', "
        "'lxml.etree', 'wiscat.shared.iso19139') if m in sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    # what a worker needs, and nothing of the event loop's side
    assert loaded == ["lxml.etree", "wiscat.shared.iso19139"]


def test_the_wiscat_command_adds_nothing_to_what_a_page_worker_imports() -> None:
    """L04: a page worker started by the ``wiscat`` script imports nothing of the command line.
    A worker the fork server starts runs its parent's main script again (as ``__mp_main__``),
    to find what the parent defined there: for a harvester that is the ``wiscat`` script, and
    whatever the script imports, every page worker imports too (about 25 MB each, measured
    from the command). ``spawn.prepare`` is how the worker does it."""
    script = Path(sys.executable).with_name("wiscat")
    probe = (
        "import sys; from multiprocessing import spawn; "
        "spawn.prepare({'init_main_from_path': sys.argv[1]}); "
        "assert '__mp_main__' in sys.modules; "
        "print(' '.join(sorted(m for m in ('aiohttp', 'asyncpg', 'pydantic', 'fastapi', "
        "'wiscat.cli') if m in sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe, str(script)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded == []
