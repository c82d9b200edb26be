"""The checker's sorted spill and merge, on data of known shape."""

from __future__ import annotations

import random
from pathlib import Path

from wiscat.harvester.check import SortedSpill, collapse, compare_datestamps


def test_spill_returns_every_entry_sorted_across_many_runs(tmp_path: Path) -> None:
    rng = random.Random(7)
    entries = [
        (f"id-{rng.randrange(10**9):09d}", "2026-01-01T00:00:00Z", False) for _ in range(5000)
    ]
    spill = SortedSpill(tmp_path, "t", run_size=300)  # 17 runs
    for entry in entries:
        spill.add(entry)
    spill.close()
    assert len(spill.runs) == 17
    assert list(spill.sorted()) == sorted(entries)
    assert list(spill.sorted()) == sorted(entries)  # can be read again


def test_collapse_reports_each_repeated_identifier_once_and_keeps_the_newest() -> None:
    entries = [
        ("a", "2026-01-01T00:00:00Z", False),
        ("b", "2026-01-01T00:00:00Z", False),
        ("b", "2026-01-02T00:00:00Z", True),
        ("b", "2026-01-03T00:00:00Z", False),
        ("c", "2026-01-01T00:00:00Z", False),
        ("c", "2026-01-01T00:00:00Z", False),
    ]
    duplicates: list[str] = []
    assert list(collapse(entries, duplicates)) == [
        ("a", "2026-01-01T00:00:00Z", False),
        ("b", "2026-01-03T00:00:00Z", False),
        ("c", "2026-01-01T00:00:00Z", False),
    ]
    assert duplicates == ["b", "c"]


def test_datestamps_compare_at_the_coarser_granularity() -> None:
    assert compare_datestamps("2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z") == -1
    assert compare_datestamps("2026-01-01T00:00:01Z", "2026-01-01T00:00:01Z") == 0
    assert compare_datestamps("2026-01-01T00:00:02Z", "2026-01-01T00:00:01Z") == 1
    # a day-granularity side: an earlier day is outdated; the same day cannot be told apart
    assert compare_datestamps("2025-12-31", "2026-01-01T10:00:00Z") == -1
    assert compare_datestamps("2026-01-01", "2026-01-01T10:00:00Z") == 1
    assert compare_datestamps("2026-01-01T09:00:00Z", "2026-01-01") == 1
