"""Named SQL queries, loaded once from the ``.sql`` files beside this module.

Each query is a block headed ``-- name: query_name --`` followed by a one-line description; the
block runs until the next header. Values go in through ``$n`` parameters only.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*) --\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split a ``.sql`` file into ``{name: sql}``."""
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = body.strip()
    return queries


@cache
def load(filename: str) -> dict[str, str]:
    """The named queries of ``shared/db/sql/<filename>``."""
    text = resources.files("wiscat.shared.db").joinpath("sql", filename).read_text(encoding="utf-8")
    return parse_queries(text)
