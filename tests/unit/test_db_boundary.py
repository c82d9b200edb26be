"""wiscat.shared.db is the driver's edge: no module beyond it names an asyncpg exception class,
and its errors module offers wiscat's classes only (the import-linter contract "only
wiscat.shared.db talks to asyncpg" forbids importing asyncpg itself)."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import asyncpg
import asyncpg.exceptions

from wiscat.shared.db import driver, errors

ROOT = Path(__file__).resolve().parents[2]

#: every exception class asyncpg exports, but Python's own names (which it re-exports)
DRIVER_CLASSES = {
    name
    for module in (asyncpg, asyncpg.exceptions)
    for name, value in vars(module).items()
    if isinstance(value, type) and issubclass(value, BaseException)
} - set(dir(builtins))


def beyond_the_edge() -> list[Path]:
    """The modules of services/ and shared/ outside shared/db."""
    return sorted(
        path
        for folder in ("services", "shared")
        for path in (ROOT / folder).rglob("*.py")
        if not path.is_relative_to(ROOT / "shared" / "db")
    )


def named_driver_classes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.alias):
            name = node.name.rsplit(".", 1)[-1]
        else:
            continue
        if name in DRIVER_CLASSES:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    return found


def test_no_module_beyond_shared_db_names_an_asyncpg_exception() -> None:
    assert len(DRIVER_CLASSES) > 200  # the set is asyncpg's, not empty by a mistake here
    assert {"InterfaceError", "PostgresConnectionError", "UniqueViolationError"} <= DRIVER_CLASSES
    modules = beyond_the_edge()
    assert ROOT / "services" / "provider" / "app.py" in modules
    assert [hit for path in modules for hit in named_driver_classes(path)] == []


def test_the_errors_module_is_wiscat_s_classes_only() -> None:
    """The tuples of asyncpg classes that services used to catch are gone, and the errors
    module does not import the driver: its classes are all wiscat's."""
    source = Path(errors.__file__).read_text()
    assert "asyncpg" not in source
    for gone in ("UNAVAILABLE", "FAILED", "UNSTORABLE_TEXT"):
        assert not hasattr(errors, gone), gone
    exported = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    assert all(issubclass(getattr(errors, name), errors.DatabaseError) for name in exported)


def test_every_translation_is_to_a_class_services_catch() -> None:
    """The table names each driver error once, most specific first, and translates it to a
    DatabaseFailed (what ends a command, fails a run) or to UnstorableText (the client's)."""
    causes = [cause for cause, _ in driver.TRANSLATED]
    assert len(causes) == len(set(causes))
    for i, cause in enumerate(causes):  # a subclass after its parent would never be reached
        later = causes[i + 1 :]
        assert not any(issubclass(other, cause) for other in later), (cause, later)
    assert {ours for _, ours in driver.TRANSLATED} == {
        errors.UnstorableText,
        errors.OutOfResources,
        errors.DatabaseUnavailable,
    }
    reset = asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")
    translated = driver.translation(reset)
    assert (type(translated), str(translated), translated.kind) == (
        errors.DatabaseUnavailable,
        "connection was closed in the middle of operation",
        "ConnectionDoesNotExistError",
    )
    assert driver.translation(ConnectionRefusedError(111, "refused")).kind == (
        "ConnectionRefusedError"
    )
