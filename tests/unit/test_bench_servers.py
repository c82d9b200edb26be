"""The benchmark's choice of Debian's PostgreSQL and its table of the servers side by side."""

from __future__ import annotations

from pathlib import Path

from bench.clusters import debian_binaries
from bench.run import side_by_side


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
