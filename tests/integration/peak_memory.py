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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.proc import status_kib


@dataclass
class Growth:
    kib: int = 0


@contextmanager
def peak_growth(others: list[int] | None = None) -> Iterator[Growth]:
    """How far the step inside grows the processes' resident sets at their peak (KiB)."""
    before = {}
    for pid in [os.getpid(), *(others or [])]:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        before[pid] = status_kib(pid, "VmRSS")
        assert status_kib(pid, "VmHWM") <= before[pid] + 1024, f"the peak of {pid} was not reset"
    growth = Growth()
    try:
        yield growth
    finally:
        growth.kib = sum(status_kib(pid, "VmHWM") - rss for pid, rss in before.items())
