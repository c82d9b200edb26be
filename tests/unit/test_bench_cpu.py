"""The benchmark's CPU accounting by process (``bench.cpu.CpuUse``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from bench.cpu import CpuUse

MARK = "cpu-use-test-process"

# Spends 1 s of CPU, says so, then on a line from stdin renames itself (as a kernel worker does
# with each queue it serves), spends 0.2 s more, says so, and waits for a last line to end.
_BUSY = textwrap.dedent(
    f"""
    import sys, time

    def spend(seconds):
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass

    spend(1.0)
    print("ready", flush=True)
    sys.stdin.readline()
    with open("/proc/self/comm", "w") as comm:
        comm.write("renamed")
    spend(0.2)
    print("spent", flush=True)
    sys.stdin.readline()
    # {MARK}
    """
)


def test_a_process_renamed_meanwhile_counts_only_what_it_spent_meanwhile() -> None:
    use = CpuUse([("busy", lambda name, line: MARK in line or name == "renamed")])
    with subprocess.Popen(
        [sys.executable, "-c", _BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as busy:
        assert busy.stdout is not None and busy.stdin is not None
        assert busy.stdout.readline().strip() == "ready"
        with use.measured():
            busy.stdin.write("go\n")
            busy.stdin.flush()
            assert busy.stdout.readline().strip() == "spent"
        busy.stdin.write("end\n")
        busy.stdin.flush()
        assert busy.wait(30) == 0
    # 0.2 s and a little; counted from the process's start, it would be 1.2 s
    assert 0.15 <= use.seconds["busy"] < 0.7, use.seconds
