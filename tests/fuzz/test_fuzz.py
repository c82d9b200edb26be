"""RELIABILITY F04: the parsers that take hostile input, fuzzed with atheris (libFuzzer).

Each target of :mod:`tests.fuzz.targets` runs in a process of its own for
``WISCAT_FUZZ_SECONDS`` (15 in ``make test``, the four side by side: a minute of fuzzing in
about 20 s; 600 in ``make fuzz``), from its seed corpus in ``tests/fuzz/corpus/<target>/``.
The inputs it adds go to a temporary folder, never to the kept corpus. A finding (an exception
the contract does not allow) fails the test with the input that raised it, as a Python literal,
and the traceback; the input then goes into the corpus as ``regression-<what>`` and the defect
is fixed at its root.

``make test`` fuzzes from a fixed seed (``WISCAT_FUZZ_SEED``, 1), so that a run is as repeatable
as a time bound allows; ``make fuzz`` takes a random one (0). Every test prints the runs,
executions a second and corpus size libFuzzer reports (``pytest -s`` shows them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fuzz import targets

ROOT = Path(__file__).parents[2]
CORPUS = Path(__file__).parent / "corpus"
SECONDS = int(os.environ.get("WISCAT_FUZZ_SECONDS", "15"))
SEED = int(os.environ.get("WISCAT_FUZZ_SEED", "1"))
# the page seed of whole records is 19 KB; room to grow it
MAX_LEN = {"page": 32768}
# the page's words (tags, attributes, the refused DOCTYPE), which mutations of bytes seldom make
DICTIONARY = Path(__file__).parent / "page.dict"
_UNCAUGHT = "=== Uncaught Python exception: ==="
_DONE = re.compile(r"#(\d+)\s+DONE\s.*?corp: (\d+)/(\S+) .*?exec/s: (\d+)")


@dataclass
class Outcome:
    returncode: int
    output: str
    finding: bytes | None  # the input that raised, when there was one
    runs: int = 0
    exec_per_second: int = 0
    corpus_files: int = 0
    corpus_size: str = ""

    def figures(self) -> str:
        return (
            f"{self.runs} runs, {self.exec_per_second} exec/s, "
            f"corpus {self.corpus_files} inputs ({self.corpus_size})"
        )

    def report(self) -> str:
        """What a failure shows: the input, then the fuzzer's output from the exception on."""
        lines = self.output.splitlines()
        start = next((n for n, line in enumerate(lines) if _UNCAUGHT in line), len(lines) - 60)
        tail = "\n".join(lines[max(start, 0) : start + 80])
        found = f"input that failed: {self.finding!r}\n" if self.finding is not None else ""
        return f"{found}fuzzer exited {self.returncode}; its output ends:\n{tail}"


class Fuzzing:
    """``target`` fuzzed for ``seconds`` in a process of its own, new inputs into ``work``,
    from the ``seeds`` folders; :meth:`outcome` waits for its end."""

    def __init__(self, target: str, seconds: int, work: Path, *seeds: Path) -> None:
        corpus, self.artifacts = work / "corpus", work / "artifacts"
        corpus.mkdir()
        self.artifacts.mkdir()
        self.seconds = seconds
        command = [
            sys.executable,
            "-m",
            "tests.fuzz.run",
            target,
            f"-max_total_time={seconds}",
            f"-seed={SEED}",
            f"-max_len={MAX_LEN.get(target, 4096)}",
            "-timeout=20",  # one input that takes this long is a finding (a hang)
            "-rss_limit_mb=2048",
            f"-artifact_prefix={self.artifacts}/",
            *([f"-dict={DICTIONARY}"] if target == "page" else []),
            "-print_final_stats=1",
            str(corpus),
            *(str(seed) for seed in seeds),
        ]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # atheris prints the traceback on one, libFuzzer on the other
            text=True,
            errors="replace",
        )

    def outcome(self) -> Outcome:
        try:
            stdout, _ = self.process.communicate(timeout=self.seconds + 120)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.communicate()
        # the list of modules instrumented says nothing about the run
        output = "".join(
            line for line in stdout.splitlines(keepends=True) if "INFO: Instrumenting" not in line
        )
        found = sorted(self.artifacts.iterdir())
        outcome = Outcome(self.process.returncode, output, found[0].read_bytes() if found else None)
        if (figures := _DONE.search(output)) is not None:
            outcome.runs, outcome.corpus_files = int(figures[1]), int(figures[2])
            outcome.corpus_size, outcome.exec_per_second = figures[3], int(figures[4])
        return outcome


def fuzz(target: str, seconds: int, work: Path, *seeds: Path) -> Outcome:
    """Run ``target`` for ``seconds`` and wait for its outcome."""
    return Fuzzing(target, seconds, work, *seeds).outcome()


FUZZED = ["page", "token", "datestamp", "arguments"]


@pytest.fixture(scope="module")
def fuzzing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Fuzzing]]:
    """The four targets fuzzed at once, each in its process (their seconds run side by side,
    not one after the other)."""
    runs = {
        target: Fuzzing(target, SECONDS, tmp_path_factory.mktemp(target), CORPUS / target)
        for target in FUZZED
    }
    try:
        yield runs
    finally:
        for run in runs.values():
            if run.process.poll() is None:
                run.process.kill()
                run.process.communicate()


@pytest.mark.parametrize("target", sorted(targets.TARGETS))
def test_f04_every_seed_keeps_the_contract(target: str) -> None:
    """RELIABILITY F04: every input of the kept corpus (seeds and regressions) passes its
    target's contract, run in this process without atheris."""
    seeds = sorted((CORPUS / target).iterdir())
    assert len(seeds) >= 9, seeds
    for seed in seeds:
        targets.TARGETS[target](seed.read_bytes())


@pytest.mark.parametrize("target", FUZZED)
def test_f04_fuzzing_raises_nothing_outside_the_contract(
    target: str, fuzzing: dict[str, Fuzzing]
) -> None:
    """RELIABILITY F04: ``WISCAT_FUZZ_SECONDS`` of atheris on one target, from its seed corpus:
    no input raises an exception its contract does not allow."""
    outcome = fuzzing[target].outcome()
    print(f"F04 {target}: {outcome.figures()}")
    assert outcome.returncode == 0 and outcome.finding is None, outcome.report()
    assert outcome.runs > 0, outcome.report()


def test_f04_a_finding_fails_with_its_input(tmp_path: Path) -> None:
    """The harness itself: a target that raises on one seed is a failure, and the input that
    raised it is reported."""
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "finding").write_bytes(b"FUZZ")
    outcome = fuzz("canary", 30, tmp_path, seeds)
    assert outcome.returncode != 0
    assert outcome.finding == b"FUZZ"
    assert "input that failed: b'FUZZ'" in outcome.report()
    assert "ValueError: the canary's input" in outcome.report()
