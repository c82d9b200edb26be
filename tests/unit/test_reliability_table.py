"""docs/reliability.md gives every scenario of the team's reliability catalogue one row, in the
catalogue's order, and names only tests that exist ("what is not acceptable is a scenario nobody
looked at").

The catalogue (RELIABILITY.md) lives in the team folder beside the project, which a clone need
not have. The IDs are therefore kept as test data too (tests/data/reliability-scenarios.txt), so
that the table is checked wherever the tests run; the catalogue calls its IDs stable, and where
the team folder is present (as on CI) the copy is checked against it.

Every row names its mutations, ``tests/mutants/<ROW>.toml`` (changes to the production code that
break its rule, run by ``make mutants``): each file must parse, name files that exist, and find
its text exactly once, so that a stale mutation fails here, at once, before ``make mutants``.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from tools.mutants import MUTANTS, load_mutations

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "reliability.md"
SCENARIOS = ROOT / "tests" / "data" / "reliability-scenarios.txt"
CATALOGUE = ROOT.parent / "shared" / "RELIABILITY.md"

SCENARIO_ROW = re.compile(r"^\|\s*([A-Z][0-9]{2})\s*\|(.*)\|\s*$", re.MULTILINE)
TEST_NAME = re.compile(r"`([^`\s]+)::([^`\s]+)`")
STATUS = re.compile(r"covered|partly: \S.*|not yet")
TOTALS = re.compile(r"Of the (\d+) scenarios, (\d+) are covered, (\d+) partly and (\d+) not yet\.")
WITHOUT_MUTATIONS = re.compile(r"(\d+) rows? ha(?:s|ve) no mutation file yet")


def catalogue_ids(text: str) -> list[str]:
    """The scenario IDs of RELIABILITY.md's tables, in their order."""
    return [match.group(1) for match in SCENARIO_ROW.finditer(text)]


def kept_ids() -> list[str]:
    lines = SCENARIOS.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def rows() -> list[tuple[str, list[str]]]:
    """(ID, cells after the ID) of every scenario row of docs/reliability.md."""
    return [
        (match.group(1), [cell.strip() for cell in match.group(2).split("|")])
        for match in SCENARIO_ROW.finditer(TABLE.read_text())
    ]


@cache
def functions_in(path: Path) -> frozenset[str]:
    """The names of the functions a test file defines, at module level or in a class."""
    tree = ast.parse(path.read_text(), str(path))
    return frozenset(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    )


def test_the_kept_ids_are_the_catalogues() -> None:
    if not CATALOGUE.is_file():
        pytest.skip(f"no team catalogue at {CATALOGUE} to compare the kept IDs with")
    assert kept_ids() == catalogue_ids(CATALOGUE.read_text()), (
        f"{SCENARIOS.relative_to(ROOT)} differs from {CATALOGUE}: copy its IDs again, "
        "and give docs/reliability.md a row for each new one"
    )


def test_every_scenario_has_one_row_in_the_catalogues_order() -> None:
    expected = kept_ids()
    assert len(expected) == len(set(expected)), "an ID twice in the kept list"
    found = [identifier for identifier, _ in rows()]
    assert {
        "no row": sorted(set(expected) - set(found)),
        "not in the catalogue": sorted(set(found) - set(expected)),
        "in more than one row": sorted(i for i, n in Counter(found).items() if n > 1),
    } == {"no row": [], "not in the catalogue": [], "in more than one row": []}
    assert found == expected, "rows out of the catalogue's order"


def test_every_test_named_exists() -> None:
    missing = []
    for identifier, cells in rows():
        for path, name in TEST_NAME.findall(" ".join(cells)):
            file = ROOT / path
            if not (path.startswith("tests/") and path.endswith(".py") and file.is_file()):
                missing.append(f"{identifier}: no test file {path}")
            elif name not in functions_in(file):
                missing.append(f"{identifier}: {path} defines no {name}")
    assert missing == []


def test_every_row_has_a_status_and_covers_only_with_tests() -> None:
    wrong = []
    for identifier, cells in rows():
        status, tests = cells[1], TEST_NAME.findall(cells[0])
        if len(cells) != 3 or not STATUS.fullmatch(status):
            wrong.append(f"{identifier}: {len(cells) + 1} cells, status {status!r}")
        elif not status.startswith("not yet") and not tests:
            wrong.append(f"{identifier}: {status.split(':')[0]} by no test")
    assert wrong == []


def test_the_counts_are_those_of_the_rows() -> None:
    statuses = Counter(cells[1].split(":")[0] for _, cells in rows())
    stated = TOTALS.search(TABLE.read_text())
    assert stated is not None, "docs/reliability.md states no totals"
    assert tuple(int(n) for n in stated.groups()) == (
        sum(statuses.values()),
        statuses["covered"],
        statuses["partly"],
        statuses["not yet"],
    )
    by_group: dict[str, Counter[str]] = {}
    for identifier, cells in rows():
        by_group.setdefault(identifier[0], Counter())[cells[1].split(":")[0]] += 1
    group_rows = re.findall(
        r"^\| ([A-Z]) [^|]*\((\d+)\) \| (\d+) \| (\d+) \| (\d+) \|$", TABLE.read_text(), re.M
    )
    assert {g: tuple(int(n) for n in ns) for g, *ns in group_rows} == {
        g: (sum(c.values()), c["covered"], c["partly"], c["not yet"]) for g, c in by_group.items()
    }


def test_every_row_names_its_mutation_file() -> None:
    wrong = [
        f"{identifier}: {cells[-1]}"
        for identifier, cells in rows()
        if cells[-1] != f"`{MUTANTS}/{identifier}.toml`"
    ]
    assert wrong == []


def test_the_mutations_parse_and_find_their_text_once() -> None:
    """A mutation whose text no longer occurs exactly once is stale: make mutants would call it
    a failure; it is one here already."""
    ids = {identifier for identifier, _ in rows()}
    wrong = []
    for mutation in load_mutations(ROOT):
        where = f"{mutation.source} {mutation.name!r}"
        if mutation.row not in ids or mutation.source != f"{MUTANTS}/{mutation.row}.toml":
            wrong.append(f"{where}: row {mutation.row} in the wrong file, or no such row")
        for edited, find, _ in ((mutation.file, mutation.find, ""), *mutation.also):
            if not (ROOT / edited).is_file():
                wrong.append(f"{where}: no file {edited}")
            elif (count := (ROOT / edited).read_text().count(find)) != 1:
                wrong.append(f"{where}: its find occurs {count} times in {edited}")
        for test in mutation.tests:
            path, _, name = test.partition("::")
            if not (ROOT / path).is_file() or name not in functions_in(ROOT / path):
                wrong.append(f"{where}: no test {test}")
    assert wrong == []


def test_the_rows_without_mutations_are_counted() -> None:
    """Each row should name at least one mutation; the page states how many do not yet, and
    that number is kept true (as the status counts are)."""
    with_file = {path.stem for path in (ROOT / MUTANTS).glob("*.toml")}
    without = sorted(identifier for identifier, _ in rows() if identifier not in with_file)
    stated = WITHOUT_MUTATIONS.search(TABLE.read_text())
    assert stated is not None, "docs/reliability.md does not say how many rows lack mutations"
    assert int(stated.group(1)) == len(without), f"rows without a mutation file: {without}"
