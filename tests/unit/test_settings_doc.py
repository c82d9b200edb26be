"""docs/settings.md is generated from the field descriptions of ``Settings``: it must be current."""

from __future__ import annotations

from tools import settings_doc
from wiscat.shared.settings import Settings


def test_the_settings_page_is_what_the_generator_writes() -> None:
    assert settings_doc.PAGE.read_text() == settings_doc.render(), (
        "docs/settings.md is stale: run `python -m tools.settings_doc` (or `make settings-doc`)"
    )


def test_every_setting_has_a_row_of_one_or_two_sentences() -> None:
    page = settings_doc.PAGE.read_text()
    for name, field in Settings.model_fields.items():
        assert field.description, f"{name} has no description in shared/settings.py"
        assert len(field.description) <= 300, f"{name}: a row of at most two sentences"
        assert f"| `WISCAT_{name.upper()}` |" in page
