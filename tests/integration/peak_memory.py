"""The peak memory of a harvester over one step, whatever ran before it (X01, X08).

``resource.getrusage(RUSAGE_SELF).ru_maxrss`` is the process's peak over its whole life, so a
step that grows less than an earlier test's peak shows no growth at all. Linux resets a
process's peak resident set (VmHWM) when "5" is written to /proc/PID/clear_refs: a step's peak
is then VmHWM after it, and its growth that less the resident set before it. The processes
measured are this one and the ``others`` given (a harvester's page workers, say); their
growths add up.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def _kib(pid: int, field: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(rf"^{field}:\s+(\d+) kB$", status, re.MULTILINE)
    assert found is not None, f"/proc/{pid}/status has no {field}"
    return int(found.group(1))


@dataclass
class Growth:
    kib: int = 0


@contextmanager
def peak_growth(others: list[int] | None = None) -> Iterator[Growth]:
    """How far the step inside grows the processes' resident sets at their peak (KiB)."""
    before = {}
    for pid in [os.getpid(), *(others or [])]:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        before[pid] = _kib(pid, "VmRSS")
        assert _kib(pid, "VmHWM") <= before[pid] + 1024, f"the peak of {pid} was not reset"
    growth = Growth()
    try:
        yield growth
    finally:
        growth.kib = sum(_kib(pid, "VmHWM") - rss for pid, rss in before.items())
