"""tools/module_weights.py: each module's seconds from pytest's --durations=0 lines, which
tests/conftest.py orders the suite's modules by."""

from __future__ import annotations

import json

from tests.conftest import MODULE_SECONDS
from tools.module_weights import module_seconds


def test_a_modules_setup_call_and_teardown_add_up_and_the_slowest_come_first() -> None:
    lines = [
        "============================== slowest durations ===============================",
        "12.50s call     tests/e2e/test_a.py::test_one",
        "3.00s setup    tests/e2e/test_a.py::test_two[x-y]",
        "20.00s call     tests/integration/test_b.py::TestB::test_three",
        "0.40s teardown tests/unit/test_c.py::test_four",
        "(12 durations < 0.005s hidden.  Use -vv to show these durations.)",
    ]
    assert module_seconds(lines) == {
        "tests/integration/test_b.py": 20.0,
        "tests/e2e/test_a.py": 15.5,
    }
    assert list(module_seconds(lines)) == ["tests/integration/test_b.py", "tests/e2e/test_a.py"]


def test_the_suites_weights_name_modules_that_exist() -> None:
    weights = json.loads(MODULE_SECONDS.read_text())
    root = MODULE_SECONDS.parent.parent
    missing = [module for module in weights if not (root / module).is_file()]
    assert not missing, f"tests/module_seconds.json names modules that are gone: {missing}"
