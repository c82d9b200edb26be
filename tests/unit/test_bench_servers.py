"""The benchmark's choice of Debian's PostgreSQL and its table of the servers side by side."""

from __future__ import annotations

from pathlib import Path

from bench.clusters import debian_binaries
from bench.run import BY_HAND, kept_by_hand, side_by_side, with_kept


def test_debian_binaries_are_the_newest_installed(tmp_path: Path) -> None:
    for version in ("9.6", "15", "13"):
        (tmp_path / version / "bin").mkdir(parents=True)
        (tmp_path / version / "bin" / "initdb").touch()
    (tmp_path / "17" / "lib").mkdir(parents=True)  # a version without its server: not it
    assert debian_binaries(tmp_path) == tmp_path / "15" / "bin"
    assert debian_binaries(tmp_path / "none") is None


def test_side_by_side_has_a_column_a_server_and_only_rows_all_have() -> None:
    figures = {
        "embedded": {"provider_minimal": 41533.4, "noop_seconds": 0.414, "harvest_memory": 286},
        "debian": {"provider_minimal": 52000.0, "noop_seconds": 0.5},
    }
    lines = side_by_side(figures, 100_000)
    assert lines[0] == "## The servers side by side"
    table = lines[lines.index("| figure | embedded | debian |") :]
    assert table == [
        "| figure | embedded | debian |",
        "|---|---|---|",
        "| provider, minimal client: records/s | 41,533 | 52,000 |",
        "| incremental run with no changes, s | 0.41 | 0.50 |",
        "",
    ]


def test_the_section_kept_by_hand_outlives_a_full_run_and_a_partial_one(tmp_path: Path) -> None:
    old = "\n".join(
        ["# Benchmarks", "- date: then", "", "## Provider", "old", "", BY_HAND, "", "| a |", ""]
    )
    assert kept_by_hand(old) == [BY_HAND, "", "| a |"]
    assert kept_by_hand("# Benchmarks\n\n## Provider\n") == []
    middle = f"# Benchmarks\n\n{BY_HAND}\n\n| a |\n\n## Later\nx\n"
    assert kept_by_hand(middle) == [BY_HAND, "", "| a |", ""]
    output = tmp_path / "benchmarks.md"
    output.write_text(old)
    fresh = ["# Benchmarks", "- date: now", "", "## Provider", "new", ""]
    # a run of every section writes the file anew, but for the section kept by hand
    assert with_kept(fresh, output, every_section=True) == [*fresh, "", BY_HAND, "", "| a |"]
    # a run of some keeps every other section, and the header
    assert with_kept(fresh[3:], output, every_section=False) == [
        *old.splitlines()[:3],
        *fresh[3:],
        BY_HAND,
        "",
        "| a |",
    ]
