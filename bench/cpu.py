"""Where a benchmark's CPU goes: the CPU time every process on this machine spent meanwhile,
grouped by what the process is (the harvest, its page workers, PostgreSQL, the provider).

Read from ``/proc`` by a thread every quarter of a second: a process that ends during the
measure (a page worker, a PostgreSQL backend whose client disconnected) keeps the CPU time last
read of it, so at most a quarter of a second of its work is missed. One scan of a few hundred
processes costs a few milliseconds, about 1% of one core.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")

#: A group's name, and whether a process (its command name, its command line) belongs to it.
Group = tuple[str, Callable[[str, str], bool]]


def _scan() -> dict[tuple[int, int], tuple[str, float]]:
    """Every process, as its pid and start time (which together name one process: a pid may be
    given again once its process ends), with its command name and CPU seconds (user and system)
    so far."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            seconds = (int(fields[11]) + int(fields[12])) / _TICKS
            found[int(entry.name), int(fields[19])] = (name, seconds)
    return found


def _command_line(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


@dataclass
class CpuUse:
    """CPU seconds by group, measured while the ``measured`` context was open."""

    groups: list[Group]
    seconds: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def measured(self) -> Iterator[None]:
        first = _scan()
        last = dict(first)
        lines: dict[tuple[int, int], str] = {}
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.25):
                for process, seen in _scan().items():
                    if process not in lines:
                        lines[process] = _command_line(process[0])
                    last[process] = seen

        watcher = threading.Thread(target=watch, name="cpu-use", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()
            last.update(_scan())
            for process, (name, seconds) in last.items():
                # a process's name may change meanwhile (a kernel worker takes the name of each
                # queue it serves): only its start time tells it from a new process
                spent = seconds - first.get(process, (name, 0.0))[1]
                if spent <= 0:
                    continue
                line = lines.get(process) or _command_line(process[0])
                group = next((g for g, belongs in self.groups if belongs(name, line)), "other")
                self.seconds[group] = self.seconds.get(group, 0.0) + spent

    def per_item(self, items: int, digits: int) -> tuple[str, float]:
        """Microseconds of CPU per item (a record): each group's, largest first and written with
        ``digits`` decimals (a group that would show as 0 left out), and all groups' together."""
        ordered = sorted(self.seconds.items(), key=lambda pair: -pair[1])
        per_item = [(group, seconds / items * 1e6) for group, seconds in ordered]
        shown = ", ".join(
            f"{group} {us:.{digits}f}" for group, us in per_item if us >= 0.5 / 10**digits
        )
        return shown, sum(us for _, us in per_item)
