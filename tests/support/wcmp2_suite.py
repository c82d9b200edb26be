"""WMO's WCMP2 test suite (pywcmp 0.13.2) run offline on the records wiscat renders.

pywcmp reads WMO's schema, code lists and topic tables from ``$HOME/.pywcmp/`` (what ``pywcmp
bundle sync`` downloads), and fixes the schema's path when it is first imported: HOME points at
a folder laid out here, from ``../shared/reference/wis2/`` and the IANA link relations of
``tests/data/wis2/``, before pywcmp is imported and while it runs. No network.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT.parent / "shared" / "reference" / "wis2"
SCHEMA = REFERENCE / "wcmp2" / "wcmp2-bundled.json"
LINK_RELATIONS = ROOT / "tests" / "data" / "wis2" / "link-relations-1.csv"
# the suite's tests (test_requirement_* but the schema's validation, which it runs first)
TESTS = 12


def lay_out(home: Path) -> None:
    """Put WMO's files where pywcmp 0.13.2 looks for them under ``home``."""
    wcmp = home / ".pywcmp" / "wcmp-2"
    (wcmp / "codelists").mkdir(parents=True)
    shutil.copy(SCHEMA, wcmp / "wcmp2-bundled.json")
    for table in (REFERENCE / "wcmp2" / "codelists").glob("*.csv"):
        shutil.copy(table, wcmp / "codelists" / table.name)
    shutil.copy(LINK_RELATIONS, wcmp / "link-relations-1.csv")
    shutil.copytree(REFERENCE / "wth", home / ".pywcmp" / "wis2-topic-hierarchy")


class Suite:
    """The test suite on a laid-out HOME; :meth:`run` gives pywcmp's report of one record."""

    def __init__(self, home: Path) -> None:
        lay_out(home)
        self.home = home
        with self._home(), warnings.catch_warnings():
            # pywcmp.bundle makes two temporary folders as it is imported, and lets one go at
            # once (a ResourceWarning); the other is cleaned here, not at some later collection
            warnings.simplefilter("ignore", ResourceWarning)
            # (pywcmp's package names a click group "bundle" too: the module by its full name)
            bundle = importlib.import_module("pywcmp.bundle")
            ets = importlib.import_module("pywcmp.wcmp2.ets")
            bundle.TEMPDIR.cleanup()
        expected = home / ".pywcmp" / "wcmp-2"
        assert expected == bundle.WCMP2_FILES, "pywcmp was imported before, with another HOME"
        self._suite = ets.WMOCoreMetadataProfileTestSuite2

    @contextlib.contextmanager
    def _home(self) -> Iterator[None]:
        before = os.environ.get("HOME")
        os.environ["HOME"] = str(self.home)
        try:
            yield
        finally:
            if before is None:
                del os.environ["HOME"]
            else:
                os.environ["HOME"] = before

    def run(self, record: dict[str, Any]) -> dict[str, Any]:
        with self._home():
            suite = self._suite(record)
            report: dict[str, Any] = suite.run_tests()
            report["validation"] = suite.test_requirement_validation()
        return report


# pywcmp fixes its files' folder as it is first imported: one suite a test process
_SUITES: list[Suite] = []


def session_suite(factory: pytest.TempPathFactory) -> Suite:
    """The process's suite, on a HOME that lasts the test session."""
    if not _SUITES:
        _SUITES.append(Suite(factory.mktemp("pywcmp-home")))
    return _SUITES[0]


def failures(report: dict[str, Any]) -> list[str]:
    """What pywcmp says is wrong with a record: [] when the schema and all 12 tests pass."""
    problems = [
        f"{test['id'].rsplit('/', 1)[-1]}: {test['code']} {test.get('message', '')}"
        for test in report["tests"]
        if test["code"] != "PASSED"
    ]
    if report["validation"]["code"] != "PASSED":
        problems += report["validation"]["errors"]
    if report["summary"]["PASSED"] != TESTS:
        problems.append(f"{report['summary']['PASSED']} of {TESTS} tests passed")
    return problems
