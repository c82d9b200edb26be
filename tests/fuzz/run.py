"""Run one fuzz target of :mod:`tests.fuzz.targets` under atheris (libFuzzer).

    python -m tests.fuzz.run TARGET [libFuzzer options] [corpus folders]

wiscat's own modules (``shared``, ``services``) are instrumented for coverage; lxml is C and is
fuzzed through them. ``tests/fuzz/test_fuzz.py`` and ``make fuzz`` run it; see there.
"""

from __future__ import annotations

import logging
import sys

import atheris


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m tests.fuzz.run TARGET [libFuzzer options] [corpus folders]")
    name = sys.argv.pop(1)
    # guide the fuzzer through regular expressions and string comparisons, which are C code
    # that coverage cannot see (the datestamp forms, the token alphabet, the argument syntax)
    atheris.enabled_hooks.add("RegEx")
    atheris.enabled_hooks.add("str")
    with atheris.instrument_imports(include=["shared", "services"]):
        from tests.fuzz import targets
    found = {**targets.TARGETS, "canary": targets.canary}
    if name not in found:
        sys.exit(f"no fuzz target {name!r}: one of {', '.join(targets.TARGETS)}")
    # a peer's odd Identify is logged as a warning, at every one of thousands of runs a second
    logging.disable(logging.CRITICAL)
    atheris.Setup(sys.argv, found[name])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
