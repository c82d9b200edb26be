"""What the harvester's page workers import: the module their fork server preloads, alone."""

from __future__ import annotations

import subprocess
import sys


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
