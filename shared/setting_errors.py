"""What a node says about its settings before it runs: one line per bad setting
(:func:`explain`), and one per ``WISCAT_`` variable that is no setting (:func:`unknown`)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path

from dotenv import dotenv_values
from pydantic import SecretStr, ValidationError

from wiscat.shared.settings import Settings


def explain(error: ValidationError) -> list[str]:
    """One line per bad setting, named as the operator sets it (``WISCAT_...``).

    The value is quoted unless the setting is a secret or may hold one (the database URL).
    """
    secret = {"database_url", "database_session_url", "database_read_url"} | {
        name
        for name, field in Settings.model_fields.items()
        if field.annotation in (SecretStr, SecretStr | None)
    }
    lines = []
    for problem in error.errors():
        name = str(problem["loc"][0]) if problem["loc"] else ""
        reason = problem["msg"].removeprefix("Value error, ")
        shown = "" if name in secret else f"={problem['input']!r}"
        lines.append(f"WISCAT_{name.upper()}{shown}: {reason}")
    return lines


# WISCAT_ variables that are the project's tests' and benchmarks', not a node's settings
_NOT_SETTINGS = {"WISCAT_TEST_DATABASE_URL", "WISCAT_BENCH_DATABASE_URL"}


def unknown(environ: Mapping[str, str], env_file: Path = Path(".env")) -> list[str]:
    """A line for each ``WISCAT_`` variable, in ``environ`` or ``env_file``, that is no setting
    (a typo is otherwise ignored without a word), with the setting it may have meant."""
    names = {f"WISCAT_{name.upper()}" for name in Settings.model_fields}
    given = {key.upper() for key in environ if key.upper().startswith("WISCAT_")}
    if env_file.is_file():
        given |= {
            key.upper() for key in dotenv_values(env_file) if key.upper().startswith("WISCAT_")
        }
    lines = []
    for name in sorted(given - names - _NOT_SETTINGS):
        # compared without the prefix every name shares, which made any short name "close"
        close = difflib.get_close_matches(name[7:], [known[7:] for known in names], n=1)
        hint = f" (did you mean WISCAT_{close[0]}?)" if close else ""
        lines.append(f"{name} is not a setting: ignored{hint}")
    return lines
