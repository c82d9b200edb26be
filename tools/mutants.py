"""Mutation tests: does each row of docs/reliability.md have tests that fail when its rule breaks?

Every row names, in ``tests/mutants/<ROW>.toml``, one or more small changes to the production
code that break its rule::

    [[mutation]]
    row = "P09"
    name = "the token's MAC is not checked"
    file = "shared/oaipmh/tokens.py"
    find = '''text that occurs exactly once in the file'''
    replace = '''the mutated text'''
    tests = ["tests/...::test_name"]  # optional: by default the tests the row names

    [[mutation.also]]  # optional: more edits of the same mutation, where a rule is held in
    file = "..."       # two places (a trigger and the SQL that spares it the work)
    find = '''...'''
    replace = '''...'''

Each mutation is applied in a scratch copy of the checkout (its current files, committed or
not), and only its tests run there, importing the scratch copy's code: the ``wiscat`` package is
laid out beside it as the editable install lays it out, first on ``PYTHONPATH``, so that the
processes the tests start (``wiscat``, ``python -m ...``) import it too. The tests must fail:

- caught: they failed (a mutation that breaks an import fails them too);
- SURVIVED: they passed, so the row's tests do not hold its rule;
- stale: ``find`` does not occur exactly once in the file (the code moved on, the mutation not);
- timeout: they ran longer than ``--timeout``;
- error: pytest could not run them (a test named that does not exist, say).

Anything but caught fails the run. ``--sample SECONDS --seed COMMIT`` runs mutations in an order
that starts at a place chosen from the commit, until the time is spent (CI); a mutation cut off
by the budget's end is reported as unfinished and fails nothing. ``--control`` runs each set of
tests in a scratch copy left unchanged instead: there they must pass ("SURVIVED"), or the copy
itself fails them, and every mutation of theirs would look caught.

    python -m tools.mutants [--rows P09,D01] [--sample SECONDS --seed COMMIT] [--list] [--control]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = Path("tests") / "mutants"
TABLE = Path("docs") / "reliability.md"
ROW = re.compile(r"^\|\s*([A-Z][0-9]{2})\s*\|(.*)\|\s*$", re.MULTILINE)
TEST_NAME = re.compile(r"`(tests/[^`\s]+::[^`\s]+)`")
# The wiscat package as pyproject.toml's package-dir maps it: services/ is wiscat itself.
PACKAGE_FOLDERS = {"shared": "shared", "migrations": "migrations"}


@dataclass(frozen=True)
class Mutation:
    row: str
    name: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    source: str  # the TOML file it comes from
    also: tuple[tuple[str, str, str], ...] = ()  # more edits: (file, find, replace)

    def apply(self, root: Path) -> str | None:
        """Write the mutated files under root; the reason it is stale, if it is."""
        for file, find, replace in ((self.file, self.find, self.replace), *self.also):
            path = root / file
            if not path.is_file():
                return f"{file} does not exist"
            text = path.read_text()
            if (count := text.count(find)) != 1:
                return f"`find` occurs {count} times in {file}, not once"
            path.write_text(text.replace(find, replace))
        return None


@dataclass(frozen=True)
class Outcome:
    mutation: Mutation
    result: str  # caught, SURVIVED, stale, timeout, error, unfinished
    seconds: float
    detail: str = ""


def row_tests(root: Path) -> dict[str, tuple[str, ...]]:
    """The tests each row of docs/reliability.md names, in its order."""
    return {
        match.group(1): tuple(dict.fromkeys(TEST_NAME.findall(match.group(2))))
        for match in ROW.finditer((root / TABLE).read_text())
    }


def load_mutations(root: Path) -> list[Mutation]:
    """Every mutation of tests/mutants/*.toml, by row, in each file's order."""
    named = row_tests(root)
    mutations = []
    for path in sorted((root / MUTANTS).glob("*.toml")):
        for entry in tomllib.loads(path.read_text())["mutation"]:
            row = entry["row"]
            tests = entry.get("tests") or named.get(row, ())
            mutations.append(
                Mutation(
                    row,
                    entry["name"],
                    entry["file"],
                    entry["find"],
                    entry["replace"],
                    tuple(tests),
                    str(path.relative_to(root)),
                    tuple((e["file"], e["find"], e["replace"]) for e in entry.get("also", ())),
                )
            )
    return mutations


def checkout_files(root: Path) -> Iterator[Path]:
    """The checkout's files as they are now: tracked, or new and not ignored."""
    listed = subprocess.run(  # noqa: S603 - git's own arguments
        [
            shutil.which("git") or "git",
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout
    for name in listed.decode().split("\0"):
        if name and (root / name).is_file():  # a file deleted but not yet committed is gone
            yield Path(name)


def scratch_copy(root: Path, scratch: Path) -> Path:
    """Copy the checkout to scratch; return the folder to put first on PYTHONPATH."""
    for name in checkout_files(root):
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, scratch / name)
    package = scratch / ".mutant-path" / "wiscat"
    package.mkdir(parents=True)
    for entry in (scratch / "services").iterdir():
        (package / entry.name).symlink_to(entry)
    for subpackage, folder in PACKAGE_FOLDERS.items():
        (package / subpackage).symlink_to(scratch / folder)
    return package.parent


def run(root: Path, mutation: Mutation, timeout: float) -> Outcome:
    """Apply one mutation in a scratch copy of root and run its tests there."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="wiscat-mutant-") as folder:
        scratch = Path(folder)
        path = scratch_copy(root, scratch)
        if stale := mutation.apply(scratch):
            return Outcome(mutation, "stale", 0.0, stale)
        if not mutation.tests:
            return Outcome(mutation, "error", 0.0, f"row {mutation.row} names no tests")
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(path), str(scratch)]),
            WISCAT_HYPOTHESIS_PROFILE="mutants",  # a failure is enough: no shrinking
            WISCAT_TEST_PG_PARENT=str(scratch),  # where stop_servers finds the tests' server
        )
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x"]
        with subprocess.Popen(  # noqa: S603 - the test names of the checkout's own files
            [*command, *mutation.tests],
            cwd=scratch,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a group of its own, so that a timeout ends its servers too
        ) as pytest:
            output: str | None = None  # None: timed out
            try:
                output, _ = pytest.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            finally:
                if pytest.poll() is None:  # timed out, or this run was stopped
                    os.killpg(pytest.pid, signal.SIGKILL)
                    pytest.communicate()
                    stop_servers(scratch)
        if output is None:
            return Outcome(mutation, "timeout", time.monotonic() - started)
    seconds = time.monotonic() - started
    # pytest: 0 all passed, 1 some failed, 2 interrupted (an import error at collection).
    result = {0: "SURVIVED", 1: "caught", 2: "caught"}.get(pytest.returncode, "error")
    if result == "error":
        return Outcome(mutation, result, seconds, output[-2000:])
    lines = output.strip().splitlines() or [""]
    # -ra's summary names what failed: the evidence that the mutation, not the copy, failed it
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return Outcome(mutation, result, seconds, (failed[:1] or lines[-1:])[0][:200])


def stop_servers(folder: Path, wait: float = 30.0) -> list[int]:
    """Stop the PostgreSQL servers that killed tests left in ``folder`` (their embedded server,
    ``WISCAT_TEST_PG_PARENT``): pg_ctl starts a server in a session of its own, which the kill
    of the tests' process group does not reach. Each is told to shut down at once (SIGQUIT),
    which ends its own processes, and waited for up to ``wait`` seconds; the pids told."""
    told = []
    for pid_file in folder.glob("wiscat-test-pg-*/*/postmaster.pid"):
        try:
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGQUIT)
        except (OSError, ValueError, IndexError):
            continue  # stopped meanwhile, or a file half written
        told.append(pid)
    deadline = time.monotonic() + wait
    while told and time.monotonic() < deadline and any(running(pid) for pid in told):
        time.sleep(0.1)
    return told


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended, though its parent has not waited for it yet


def rotation(mutations: list[Mutation], seed: str) -> list[Mutation]:
    """The mutations in order, starting at a place chosen from seed (a commit hash)."""
    if not mutations:
        return []
    start = int(seed, 16) % len(mutations) if seed else 0
    return mutations[start:] + mutations[:start]


def run_all(
    root: Path, mutations: list[Mutation], timeout: float, budget: float | None
) -> list[Outcome]:
    outcomes = []
    started = time.monotonic()
    for mutation in mutations:
        left = None if budget is None else budget - (time.monotonic() - started)
        if left is not None and left <= 0:
            break
        outcome = run(root, mutation, timeout if left is None else min(timeout, left))
        if outcome.result == "timeout" and left is not None and left < timeout:
            outcome = Outcome(mutation, "unfinished", outcome.seconds, "the sample's time ran out")
        outcomes.append(outcome)
        print(
            f"{outcome.result:>10} {outcome.seconds:6.1f} s  {mutation.row} {mutation.name}"
            f"\n{'':18}{outcome.detail}",
            flush=True,
        )
    return outcomes


def summary(outcomes: list[Outcome]) -> str:
    lines = ["| row | mutation | result | seconds | detail |", "|---|---|---|---|---|"]
    for outcome in outcomes:
        detail = outcome.detail.splitlines()[-1].replace("|", "/") if outcome.detail else ""
        lines.append(
            f"| {outcome.mutation.row} | {outcome.mutation.name} | {outcome.result} "
            f"| {outcome.seconds:.0f} | {detail} |"
        )
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.result] = counts.get(outcome.result, 0) + 1
    total = sum(outcome.seconds for outcome in outcomes)
    tally = ", ".join(f"{n} {result}" for result, n in sorted(counts.items()))
    lines.append(f"\n{len(outcomes)} mutations in {total:.0f} s: {tally or 'none run'}")
    return "\n".join(lines)


def run_controls(mutations: list[Mutation], timeout: float) -> int:
    """Each distinct set of tests, in a scratch copy left unchanged: a test that fails there
    would make every mutation of its row look caught."""
    controls = {
        mutation.tests: dataclasses.replace(
            mutation, name="control: nothing changed", replace=mutation.find, also=()
        )
        for mutation in mutations
    }
    outcomes = run_all(ROOT, list(controls.values()), timeout, None)
    # here the tests must pass: "SURVIVED" is the good outcome, "caught" the bad one
    named = {"SURVIVED": "passed", "caught": "FAILED"}
    print(summary([dataclasses.replace(o, result=named.get(o.result, o.result)) for o in outcomes]))
    return 0 if all(o.result == "SURVIVED" for o in outcomes) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mutants", description=__doc__)
    parser.add_argument("--rows", help="only these rows, comma-separated (P09,D01)")
    parser.add_argument("--sample", type=float, metavar="SECONDS", help="a time budget (CI)")
    parser.add_argument("--seed", default="", help="a commit hash: where the sample starts")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a mutation (900)")
    parser.add_argument("--list", action="store_true", help="list the mutations, run nothing")
    parser.add_argument(
        "--control",
        action="store_true",
        help="run each set of tests in a scratch copy left unchanged: they must pass there",
    )
    options = parser.parse_args(argv)
    # stopped (CI's timeout, kill): end the tests running and remove the scratch copy on the way out
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    mutations = load_mutations(ROOT)
    if options.rows:
        rows = set(options.rows.split(","))
        mutations = [mutation for mutation in mutations if mutation.row in rows]
    if options.list:
        for mutation in mutations:
            print(
                f"{mutation.row}  {mutation.name}  ({mutation.file}; {len(mutation.tests)} tests)"
            )
        return 0
    if options.control:
        return run_controls(mutations, options.timeout)
    if options.sample is not None:
        mutations = rotation(mutations, options.seed)
    outcomes = run_all(ROOT, mutations, options.timeout, options.sample)
    print(summary(outcomes))
    return 0 if all(o.result in ("caught", "unfinished") for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
