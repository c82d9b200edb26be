"""What the Makefile does when typed as a newcomer would: a plain ``make`` lists the targets
(it ran lint and the whole suite), and ``make demo`` passes ``DEMO_ARGS`` on to the demo."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _make(*args: str) -> str:
    result = subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def test_a_plain_make_lists_the_targets_and_runs_nothing() -> None:
    # dry run: what a plain make would run is the help target's grep alone
    assert _make("-n").splitlines()[0].startswith("grep -E ")
    listed = _make()
    assert {line.split()[0] for line in listed.splitlines()} >= {"help", "run", "test", "demo"}


def test_make_demo_passes_demo_args_on() -> None:
    lines = _make("-n", "demo", "DEMO_ARGS=--port-base 22300").splitlines()
    assert lines[-1] == ".venv/bin/python -m tools.demo --port-base 22300"
