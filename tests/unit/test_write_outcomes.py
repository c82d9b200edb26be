"""The write outcomes are one typed vocabulary (wiscat.shared.model.WriteOutcome): every outcome
records.sql can give is in it, every one in it is given, and an unknown one is refused, so that
a misspelled outcome is an error, never a silent zero in a count."""

from __future__ import annotations

import re
from typing import get_args

import pytest

from wiscat.shared.db import records
from wiscat.shared.db.queries import load
from wiscat.shared.model import WriteOutcome

OUTCOME_CASE = re.compile(r"case\b((?:(?!\bas outcome\b).)*?)\bend as outcome", re.DOTALL)


def sql_outcomes() -> set[str]:
    """The string literals of records.sql's ``case ... end as outcome`` columns."""
    sql = "\n".join(load("records.sql").values())
    blocks = OUTCOME_CASE.findall(sql)
    assert len(blocks) == 3, "upsert_records, delete_records and backup_records"
    found: set[str] = set()
    for block in blocks:
        for then, other in re.findall(r"then '([a-z_]+)'|else '([a-z_]+)'", block):
            found.add(then or other)
    return found


def test_the_sql_gives_exactly_the_typed_outcomes() -> None:
    # not_found is also given in Python, to identifiers no row can hold
    assert sql_outcomes() == set(get_args(WriteOutcome))


def test_an_unknown_outcome_is_refused() -> None:
    rows = [{"identifier": "a", "outcome": "added"}, {"identifier": "b", "outcome": "adde"}]
    with pytest.raises(ValueError, match="a write gave 'b' the unknown outcome 'adde'"):
        records._outcomes(rows)  # type: ignore[arg-type]
    assert records._outcomes(rows[:1]) == {"a": "added"}  # type: ignore[arg-type]
