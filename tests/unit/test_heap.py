"""wiscat.shared.heap: pages of megabytes built and dropped again and again reuse the heap's memory
instead of mapping fresh pages from the kernel each time."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

PAGES = """
import resource, sys
from wiscat.shared.heap import tune_heap
print(tune_heap())
parts = [b"x" * 9000] * 500  # a list page of 500 records, twice over: about 9 MB
for _ in range(3):
    page, copy = b"".join(parts), b"".join(parts)
    del page, copy
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    page, copy = b"".join(parts), b"".join(parts)
    del page, copy
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(**env: str) -> tuple[str, int]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environment.pop("GLIBC_TUNABLES", None)
    result = subprocess.run(
        [sys.executable, "-c", PAGES],
        env={**environment, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    tuned, faults = result.stdout.split()
    return tuned, int(faults)


needs_glibc = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's"
)


@needs_glibc
def test_tuned_heap_reuses_its_memory_for_every_page() -> None:
    tuned, faults = page_faults()
    assert tuned == "True"
    # 100 pages of 4.5 MB: more than 100,000 page faults untuned (see below), none here
    assert faults < 1000


@needs_glibc
def test_an_operators_own_malloc_settings_are_kept() -> None:
    tuned, faults = page_faults(MALLOC_TRIM_THRESHOLD_="131072", MALLOC_MMAP_THRESHOLD_="131072")
    assert tuned == "False"
    # glibc's defaults, as the operator asked: every page mapped afresh
    assert faults > 50_000


ARENAS = """
import ctypes, sys, threading
from wiscat.shared.heap import one_arena

print(one_arena() if sys.argv[1] == "one" else None)
worker = threading.Thread(target=lambda: bytes(1_000_000))  # a thread that allocates
worker.start()
worker.join()
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


def arenas(mode: str, **env: str) -> tuple[str, int]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environment.pop("GLIBC_TUNABLES", None)
    result = subprocess.run(
        [sys.executable, "-c", ARENAS, mode],
        env={**environment, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip(), result.stderr.count("Arena ")


@needs_glibc
def test_threads_allocate_from_one_arena() -> None:
    assert arenas("default") == ("None", 2)  # glibc's default: the thread got its own arena
    assert arenas("one") == ("True", 1)


@needs_glibc
def test_an_operators_own_arena_limit_is_kept() -> None:
    assert arenas("one", MALLOC_ARENA_MAX="4") == ("False", 2)


FROZEN = """
import gc, weakref
import fastapi, lxml.etree  # start-up: a framework's worth of long-lived objects
from wiscat.shared.heap import freeze_startup_objects

before = len(gc.get_objects())
freeze_startup_objects()
walked = len(gc.get_objects())


class Node:
    pass


a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after start-up, then dropped
alive = weakref.ref(a)
del a, b
gc.collect()
print(before, walked, alive() is None)
"""


def test_a_frozen_start_up_is_not_walked_and_later_cycles_are_still_collected() -> None:
    result = subprocess.run(
        [sys.executable, "-c", FROZEN], capture_output=True, text=True, check=True
    )
    before, walked, collected = result.stdout.split()
    # the collector walked tens of thousands of start-up objects; after freezing, next to none
    assert int(before) > 20_000
    assert int(walked) < 1_000
    assert collected == "True"
