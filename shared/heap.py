"""The heaps of a process that moves pages of megabytes: glibc's, and Python's collector.

glibc's malloc serves a block larger than its mmap threshold (128 KiB at first) with a fresh
mapping, and unmaps it when freed; it also gives back the top of its heap once more than the
trim threshold (128 KiB) is free there. A process that builds, sends and drops list pages of a
few MiB, many times a second, then pays the kernel to map, zero and unmap every byte of every
page again, a large share of the provider's CPU time. With both thresholds raised, those
blocks stay in the heap and are reused. The heap then keeps, at most, the trim threshold of free
memory for the next page.

The provider sets them at start (``wiscat provider``, ``wiscat run``). The harvester does not:
with them its peak memory rose past 300 MB, for a gain in rate within the machine's drift. It
keeps its threads on one heap instead (:func:`one_arena`). The measurements are in
docs/benchmarks.md ("Measurements behind the code").

Other C libraries, and an operator who set glibc's own ``MALLOC_*_`` variables or
``GLIBC_TUNABLES``, are left as they are.

Python's cyclic garbage collector is the other cost (:func:`freeze_startup_objects`). A list
page makes a few thousand short-lived container objects (rows, records, tuples), so collections
run several times a page, and every tenth of a tenth walks every object the process holds, most
of them made at start-up (the web framework, its models, the parsers) and alive until it ends.
Frozen, and collected less often, they cost nothing.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import platform

log = logging.getLogger("wiscat")

MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit systems)
TRIM_THRESHOLD = 128 * 1024 * 1024

_M_TRIM_THRESHOLD = -1  # from glibc's <malloc.h>
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_OPERATOR_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def _mallopt(settings: tuple[str, ...], *options: tuple[int, int]) -> bool:
    """glibc's mallopt for each (option, value), unless the operator set one of ``settings``."""
    if platform.libc_ver()[0] != "glibc" or any(name in os.environ for name in settings):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = all(mallopt(option, value) for option, value in options)
    if not done:
        log.debug("glibc refused a malloc setting; its defaults stay")
    return done


def tune_heap() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; True when they were set."""
    return _mallopt(
        _OPERATOR_SETTINGS,
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
    )


def one_arena() -> bool:
    """Have every thread of this process that starts from now on allocate from glibc's main
    heap; True when set.

    glibc gives each new thread an arena (a heap of its own), up to eight per core. In the
    harvester, threads write pages to the spool and receive what the page workers made of them
    (megabytes a page); each arena then keeps its own free and fragmented memory. One arena
    lowers the harvest's peak memory at the same rate (docs/benchmarks.md). The dynamic mmap
    threshold is left as it is.
    """
    return _mallopt(("MALLOC_ARENA_MAX", "GLIBC_TUNABLES"), (_M_ARENA_MAX, 1))


# A young generation this large is collected about once a page, not several times.
YOUNG_THRESHOLD = 20_000


def freeze_startup_objects() -> None:
    """Move every object alive now out of the collector's reach, and collect less often.

    Call it once start-up is over. Cycles made afterwards are still collected, and objects made
    at start-up are still freed by reference counting; the collector just no longer walks them.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 20, 20)
