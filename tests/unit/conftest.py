"""The fixtures of the WCMP2 mapping's tests (test_wcmp2_*.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from jsonschema.protocols import Validator

from tests.support.wcmp2_documents import checker
from tests.support.wcmp2_suite import SCHEMA, Suite, session_suite
from wiscat.shared.wcmp2.convert import Conversion
from wiscat.shared.wcmp2.validation import load_schema


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    return session_suite(tmp_path_factory)


@pytest.fixture(scope="module")
def schema() -> Validator:
    return load_schema(SCHEMA)


@pytest.fixture
def announceable(suite: Suite, schema: Validator) -> Callable[[bytes], Conversion]:
    """Convert a document, and check it valid by the mapping, the schema and pywcmp."""
    return checker(suite, schema)
