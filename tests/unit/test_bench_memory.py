"""The benchmark's measure of a command's time and peak memory (``bench.measure.timed_command``)."""

from __future__ import annotations

import sys
import textwrap

from bench.measure import timed_command

MB = 1024 * 1024


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_peak_of_one_process() -> None:
    seconds, peak, code, out = timed_command(
        python(
            f"""
            import time
            held = b"x" * {120 * MB}
            time.sleep(0.6)
            del held
            time.sleep(0.3)
            print("done")
            """
        )
    )
    assert code == 0 and out.strip() == "done"
    assert seconds >= 0.9
    # the interpreter itself is a few MB more; the 120 MB held for a while is not missed
    assert 120 <= peak < 200


def test_peak_of_a_process_tree_adds_its_children() -> None:
    # Parent and child each hold 70 MB at the same time: the tree's peak is their sum, which
    # neither process's own peak shows.
    child = f'import time; held = b"y" * {70 * MB}; print("up", flush=True); time.sleep(0.8)'
    _, peak, code, _ = timed_command(
        python(
            f"""
            import subprocess, sys
            held = b"x" * {70 * MB}
            child = subprocess.Popen([sys.executable, "-c", {child!r}], stdout=subprocess.PIPE)
            child.stdout.readline()
            child.wait()
            """
        )
    )
    assert code == 0
    assert 140 <= peak < 260


def test_exit_code_is_reported() -> None:
    _, _, code, out = timed_command(python("import sys; print('bad'); sys.exit(3)"))
    assert code == 3 and out.strip() == "bad"


def test_pages_in_a_harvesters_spool_count() -> None:
    # A harvester's spool folder holds pages for its workers, in /dev/shm where there is one:
    # memory that is in no process's.
    _, peak, code, _ = timed_command(
        python(
            f"""
            import os, shutil, time
            from wiscat.harvester.page_workers import spool_root
            folder = os.path.join(spool_root(), f"wiscat-pages-{{os.getpid()}}-test")
            os.mkdir(folder)
            try:
                with open(os.path.join(folder, "page"), "wb") as page:
                    for _ in range(100):  # a MB at a time: the process never holds the 100 MB
                        page.write(b"p" * {MB})
                time.sleep(0.6)
            finally:
                shutil.rmtree(folder)
            """
        )
    )
    assert code == 0
    assert 100 <= peak < 200
