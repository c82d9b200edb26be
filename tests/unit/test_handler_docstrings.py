"""Every HTTP route of the provider and every ``wiscat`` command's handler says what it does in a
docstring: a reader of the code meets the route or the command there first (ruff's D1 covers
shared/ alone; the rest of services/ is not held to it). A route's docstring is also its
description in /openapi.json."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from tests.support.servers import provider_settings
from wiscat.cli.app import build_parser
from wiscat.provider.app import create_app


def handlers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, Any]]:
    """(the command's name, its handler) for every command under ``parser``."""
    handler = parser.get_default("handler")
    if handler is not None:
        yield parser.prog, handler
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from handlers(sub)


def test_every_command_handler_has_a_docstring() -> None:
    found = dict(handlers(build_parser()))
    assert len(found) >= 29  # the walk reaches the commands of every group
    assert [name for name, handler in found.items() if not (handler.__doc__ or "").strip()] == []


def test_every_route_of_the_provider_has_a_docstring() -> None:
    """Read from /openapi.json, where FastAPI puts a route's docstring as its description."""
    app = create_app(provider_settings(8080), "postgresql://127.0.0.1:9/unused")
    operations = {
        f"{method.upper()} {path}": operation
        for path, methods in app.openapi()["paths"].items()
        for method, operation in methods.items()
    }
    assert len(operations) >= 30  # OAI-PMH, admin, registry, dashboard, health
    assert [name for name, op in operations.items() if not op.get("description")] == []
