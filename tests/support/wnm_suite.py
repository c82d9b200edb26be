"""WMO's notification message test suite (pywis-pubsub 0.12.0) run offline on the messages
wiscat publishes.

pywis-pubsub validates against the WNM schema at ``$HOME/.pywis-pubsub/`` (what ``pywis-pubsub
schema sync`` downloads), a path it fixes when it is first imported: HOME points at a folder
laid out here with WNM 1.3's bundled schema from ``../shared/reference/wis2/wnm/`` (the version
wiscat publishes), before pywis-pubsub is imported. No network.
"""

from __future__ import annotations

import importlib
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.support.wcmp2_suite import REFERENCE

SCHEMA = REFERENCE / "wnm" / "wis2-notification-message-bundled-1.3.json"
# the suite's tests (test_requirement_* but the schema's validation, which it runs first)
TESTS = 7


class Suite:
    """pywis-pubsub's test suite on a laid-out HOME; :meth:`failures` of one message."""

    def __init__(self, home: Path) -> None:
        expected = home / ".pywis-pubsub" / "wis2-notification-message"
        expected.mkdir(parents=True)
        shutil.copy(SCHEMA, expected / "wis2-notification-message-bundled.json")
        before = os.environ.get("HOME")
        os.environ["HOME"] = str(home)
        try:
            with warnings.catch_warnings():
                # pywis_pubsub.schema makes two temporary folders as it is imported, and lets
                # one go at once (a ResourceWarning); the other is cleaned here
                warnings.simplefilter("ignore", ResourceWarning)
                ets = importlib.import_module("pywis_pubsub.ets")
                importlib.import_module("pywis_pubsub.schema").TEMPDIR.cleanup()
        finally:
            if before is None:
                del os.environ["HOME"]
            else:
                os.environ["HOME"] = before
        schema: Path = ets.MESSAGE_SCHEMA
        assert schema.parent == expected, "pywis-pubsub was imported before, with another HOME"
        self._suite = ets.WNMTestSuite

    def failures(self, message: dict[str, Any]) -> list[str]:
        """What pywis-pubsub says is wrong with ``message``: [] when the schema and all its
        tests pass."""
        suite = self._suite(message)
        report = suite.run_tests()["ets-report"]
        problems = [
            f"{test['id'].rsplit('/', 1)[-1]}: {test['code']} {test.get('message', '')}"
            for test in report["tests"]
            if test["code"] != "PASSED"
        ]
        validation = suite.test_requirement_validation()
        if validation["code"] != "PASSED":
            problems += validation["errors"]
        if report["summary"]["PASSED"] != TESTS:
            problems.append(f"{report['summary']['PASSED']} of {TESTS} tests passed")
        return problems


# pywis-pubsub fixes its schema's path as it is first imported: one suite a test process
_SUITES: list[Suite] = []


def session_suite(factory: pytest.TempPathFactory) -> Suite:
    """The process's suite, on a HOME that lasts the test session."""
    if not _SUITES:
        _SUITES.append(Suite(factory.mktemp("pywis-pubsub-home")))
    return _SUITES[0]
