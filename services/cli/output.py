"""How the ``wiscat`` commands print what they list: aligned columns, or JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Iterable, Sequence
from datetime import datetime
from typing import Any

from wiscat.shared.db.errors import kind_of
from wiscat.shared.oaipmh.dates import format_datestamp


def when(value: datetime | None) -> str:
    """A time as the list commands show it (UTC, to the second), or "-" for none."""
    return "-" if value is None else format_datestamp(value)


def said(exc: BaseException) -> str:
    """An exception's message, or its kind when it has none (a connection reset says nothing)."""
    return str(exc) or kind_of(exc)


def jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in row.items()}


def show(
    rows: list[dict[str, Any]],
    as_json: bool,
    empty: str,
    lines: Callable[[dict[str, Any]], Iterable[str]],
) -> int:
    """Print ``rows`` as JSON, or each as its ``lines``, or ``empty`` when there are none."""
    if as_json:
        print(json.dumps([jsonable(row) for row in rows], indent=2))
    elif not rows:
        print(empty)
    else:
        for row in rows:
            print("\n".join(lines(row)))
    return 0


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Container[int] = ()
) -> list[str]:
    """``headers`` and ``rows`` as lines of columns two spaces apart, each as wide as its widest
    cell (a long link or set name no longer pushes the columns after it out of line), the
    columns numbered in ``right`` (counts) aligned right; the last column, free text, is not
    padded. Every list of the ``wiscat`` commands is printed by this one function."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers) - 1)]

    def line(row: Sequence[str]) -> str:
        cells = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=False))
        ]
        return "  ".join([*cells, row[-1]]).rstrip()

    return [line(row) for row in [headers, *rows]]
