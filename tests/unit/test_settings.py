"""Settings: what an empty value means, and how a bad one is reported."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from wiscat.cli.settings import settings_rows
from wiscat.shared.setting_errors import explain, unknown
from wiscat.shared.settings import Settings


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
    # a short name is not "close" to a setting for the prefix they share
    assert unknown({"WISCAT_FOO": "1", "WISCAT_CAFILE": "x"}, tmp_path / "none") == [
        "WISCAT_CAFILE is not a setting: ignored (did you mean WISCAT_CA_FILE?)",
        "WISCAT_FOO is not a setting: ignored",
    ]


def test_an_unset_base_url_follows_where_the_provider_listens() -> None:
    """Identify's baseURL and every response's request URL must name this provider: with only
    its port changed, it named port 8080 still (and the registry refuses a URL whose Identify
    names another)."""
    assert settings().base_url == "http://127.0.0.1:8080/oai"
    assert settings(provider_port=8190).base_url == "http://127.0.0.1:8190/oai"
    assert settings(base_url="", provider_port=8190).base_url == "http://127.0.0.1:8190/oai"
    assert settings(provider_host="0.0.0.0", provider_port=81).base_url == "http://127.0.0.1:81/oai"
    assert settings(provider_host="::1", provider_port=81).base_url == "http://[::1]:81/oai"
    assert settings(provider_host="10.1.2.3").base_url == "http://10.1.2.3:8080/oai"
    # the command line's --host and --port move it too; a BASE_URL that was set stays
    moved = settings().listening_on("0.0.0.0", 7000)
    assert (moved.provider_host, moved.provider_port) == ("0.0.0.0", 7000)
    assert moved.base_url == "http://127.0.0.1:7000/oai"
    assert settings().listening_on(None, None).base_url == "http://127.0.0.1:8080/oai"
    public = settings(base_url="https://gisc.example.org/oai", provider_port=9000)
    assert public.base_url == "https://gisc.example.org/oai"
    assert public.listening_on(None, 7000).base_url == "https://gisc.example.org/oai"


def test_a_peer_is_this_node_by_its_url_or_by_the_base_url_set_here() -> None:
    from wiscat.harvester.plan import is_this_node
    from wiscat.shared.oaipmh.pages import IdentifyInfo

    def identify(base_url: str) -> IdentifyInfo:
        return IdentifyInfo("peer", base_url, "2.0", datetime.now(UTC), "persistent", "", ())

    public = "https://gisc.example.org/oai"
    mine = settings(base_url=public)
    assert is_this_node(mine, public, identify(public))
    assert is_this_node(mine, "http://10.0.0.5:8080/oai", identify(public))  # another name
    assert not is_this_node(mine, "https://other.example.org/oai", identify("https://o/oai"))
    # a node that left BASE_URL unset announces the same local endpoint as any other such node
    derived = settings()
    assert derived.base_url == "http://127.0.0.1:8080/oai" and not derived.base_url_set
    assert is_this_node(derived, derived.base_url, identify(derived.base_url))
    assert not is_this_node(derived, "https://other.example.org/oai", identify(derived.base_url))


@pytest.mark.parametrize(
    ("values", "unreachable"),
    [
        ({}, False),  # a node for this machine alone
        ({"provider_host": "0.0.0.0"}, True),  # peers are told 127.0.0.1
        ({"provider_host": "::"}, True),
        ({"provider_host": "10.1.2.3"}, False),  # told 10.1.2.3: they can use it
        ({"provider_host": "0.0.0.0", "base_url": "https://gisc.example/oai"}, False),
    ],
)
def test_a_provider_for_peers_without_a_base_url_is_warned_of(
    values: dict[str, str], unreachable: bool
) -> None:
    assert settings(**values).base_url_unreachable is unreachable


def test_the_registry_fetches_from_a_list_of_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    """S07: the registry connects to these ports only; the default is the web's usual four."""
    assert settings().registry_fetch_ports == (80, 443, 8080, 8443)
    monkeypatch.setenv("WISCAT_REGISTRY_FETCH_PORTS", " 443, 8443")
    assert settings().registry_fetch_ports == (443, 8443)
    for bad in ("", "0", "https", "80,,443", "80,65536"):
        monkeypatch.setenv("WISCAT_REGISTRY_FETCH_PORTS", bad)
        with pytest.raises(ValidationError) as caught:
            settings()
        assert explain(caught.value) == [
            f"WISCAT_REGISTRY_FETCH_PORTS={bad!r}: port numbers from 1 to 65535, "
            "comma-separated, e.g. 80,443,8080,8443"
        ]


def test_the_port_list_is_shown_as_it_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """`wiscat settings` shows 443,8443, not a Python tuple."""
    monkeypatch.setenv("WISCAT_REGISTRY_FETCH_PORTS", "443, 8443")
    rows = settings_rows(settings(), {"WISCAT_REGISTRY_FETCH_PORTS": "443, 8443"}, Path("/none"))
    assert [r for r in rows if r["setting"] == "WISCAT_REGISTRY_FETCH_PORTS"] == [
        {"setting": "WISCAT_REGISTRY_FETCH_PORTS", "value": "443,8443", "from": "environment"}
    ]


def test_a_token_secret_rotation_is_set_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """WISCAT_TOKEN_SECRET_PREVIOUS needs the end of its grace period, with its time zone, and
    a current WISCAT_TOKEN_SECRET; neither secret is ever shown."""
    monkeypatch.setenv("WISCAT_TOKEN_SECRET", "new-secret")
    monkeypatch.setenv("WISCAT_TOKEN_SECRET_PREVIOUS", "old-secret")
    monkeypatch.setenv("WISCAT_TOKEN_SECRET_PREVIOUS_UNTIL", "2026-12-01T00:00:00Z")
    rotated = settings()
    assert rotated.token_secret_previous_until == datetime(2026, 12, 1, tzinfo=UTC)
    for values, problem in (
        (
            {"WISCAT_TOKEN_SECRET_PREVIOUS_UNTIL": ""},
            "WISCAT_TOKEN_SECRET_PREVIOUS_UNTIL='': WISCAT_TOKEN_SECRET_PREVIOUS needs the end "
            "of its grace period, e.g. 2026-12-01T00:00:00Z",
        ),
        (
            {"WISCAT_TOKEN_SECRET_PREVIOUS_UNTIL": "2026-12-01T00:00:00"},
            "WISCAT_TOKEN_SECRET_PREVIOUS_UNTIL='2026-12-01T00:00:00': give the "
            "time zone, e.g. 2026-12-01T00:00:00Z",
        ),
        (
            {"WISCAT_TOKEN_SECRET": ""},
            "WISCAT_TOKEN_SECRET_PREVIOUS_UNTIL='2026-12-01T00:00:00Z': "
            "WISCAT_TOKEN_SECRET_PREVIOUS is the secret "
            "WISCAT_TOKEN_SECRET replaced: set WISCAT_TOKEN_SECRET too",
        ),
        (
            {"WISCAT_TOKEN_SECRET_PREVIOUS": ""},
            "WISCAT_TOKEN_SECRET_PREVIOUS_UNTIL='2026-12-01T00:00:00Z': set only with "
            "WISCAT_TOKEN_SECRET_PREVIOUS",
        ),
    ):
        with monkeypatch.context() as changed:
            for name, value in values.items():
                changed.setenv(name, value)
            with pytest.raises(ValidationError) as caught:
                settings()
            assert explain(caught.value) == [problem]
            shown = str(caught.value)
            assert "old-secret" not in shown and "new-secret" not in shown
