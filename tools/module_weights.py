"""The seconds each test module took, from the output of a run with ``--durations=0``: written
to tests/module_seconds.json by ``make test-weights``, read by tests/conftest.py to start the
slowest modules first (pytest-xdist's loadscope gives each worker a whole module, and a slow
module begun last leaves the other worker idle while it runs)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

DURATION = re.compile(r"^([\d.]+)s (?:setup|call|teardown) +([^:\s]+)::")


def module_seconds(lines: list[str]) -> dict[str, float]:
    """Each module's seconds (setup, call and teardown of its tests), the slowest first; modules
    of under a second are left out (they run last, in the order pytest collects them)."""
    seconds: dict[str, float] = {}
    for line in lines:
        found = DURATION.match(line)
        if found:
            seconds[found[2]] = seconds.get(found[2], 0.0) + float(found[1])
    slowest = sorted(seconds.items(), key=lambda item: -item[1])
    return {module: round(s, 1) for module, s in slowest if s >= 1}


if __name__ == "__main__":
    weights = module_seconds(Path(sys.argv[1]).read_text(encoding="utf-8").splitlines())
    if not weights:
        sys.exit(f"no durations in {sys.argv[1]}: run pytest with --durations=0")
    json.dump(weights, sys.stdout, indent=0)
    sys.stdout.write("\n")
