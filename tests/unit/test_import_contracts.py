"""shared/db is the one way to the database: the import-linter contract that keeps asyncpg out
of everything else covers the whole wiscat package, shared/db's own imports alone excepted, so
that a module added later is covered too (`make lint` runs the contracts; this test fails when
the contract is narrowed)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_but_shared_db_is_kept_from_asyncpg() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"] == "only wiscat.shared.db talks to asyncpg"]
    assert contract["type"] == "forbidden"
    assert contract["source_modules"] == ["wiscat"]
    assert contract["forbidden_modules"] == ["asyncpg"]
    assert contract["ignore_imports"] == ["wiscat.shared.db.** -> asyncpg"]


def test_no_module_imports_itself_through_others() -> None:
    """No import cycle anywhere in shared and services (type-checking imports included): a
    module can be read before the modules that use it."""
    graph = grimp.build_graph("wiscat")
    cycles = [
        (module, other)
        for module in sorted(graph.modules)
        for other in sorted(graph.find_modules_directly_imported_by(module))
        if graph.chain_exists(importer=other, imported=module)
    ]
    assert cycles == []
