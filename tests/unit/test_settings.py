"""Settings: what an empty value means, and how a bad one is reported."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.settings import Settings, explain, unknown


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg, arg-type]


def test_an_empty_url_is_unset() -> None:
    # `WISCAT_DATABASE_URL=` in a .env file has always meant the embedded server
    chosen = settings(database_url="", registry_node_url="")
    assert (chosen.database_url, chosen.registry_node_url) == (None, None)


def test_a_bad_setting_is_named_and_no_secret_is_shown() -> None:
    with pytest.raises(ValidationError) as caught:
        settings(database_url="mysql://op:pw@db/x", page_size=0, admin_email="nobody")
    assert sorted(explain(caught.value)) == [
        "WISCAT_ADMIN_EMAIL='nobody': an e-mail address, e.g. wis-admin@example.org "
        "(Identify shows it)",
        "WISCAT_DATABASE_URL: a libpq URL: postgresql://user@host:port/database",
        "WISCAT_PAGE_SIZE=0: Input should be greater than or equal to 1",
    ]


def test_a_variable_that_is_no_setting_is_named_with_the_likely_one(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("WISCAT_ADMIN_TOKNE=x\nWISCAT_GISC_NAME=OFFENBACH\nOTHER=1\n")
    environ = {"WISCAT_PAGESIZE": "5", "wiscat_page_size": "5", "WISCAT_TEST_DATABASE_URL": "x"}
    assert unknown(environ, env_file) == [
        "WISCAT_ADMIN_TOKNE is not a setting: ignored (did you mean WISCAT_ADMIN_TOKEN?)",
        "WISCAT_PAGESIZE is not a setting: ignored (did you mean WISCAT_PAGE_SIZE?)",
    ]
    assert unknown({"WISCAT_XYZZY": "1"}, tmp_path / "none") == [
        "WISCAT_XYZZY is not a setting: ignored"
    ]
