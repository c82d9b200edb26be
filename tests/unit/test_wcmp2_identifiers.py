"""WCMP2 ids from fileIdentifiers and back, and the centre rules of WISCAT_WIS2_CENTRES."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wiscat.shared.wcmp2.centres import CentreRule, centres, licence, matching_rule, parse_rules
from wiscat.shared.wcmp2.identifiers import IdentifierError, from_wcmp2_id, wcmp2_id

HOSTILE = [
    "urn:x-wmo:md:int.wmo.wis::SMRA01RUMS",
    "urn:x-wmo:md:de.dwd.pamore::FX_GLOBAL",
    "urn:x-wmo:md:int.wmo.wis::",  # ends with ':'
    "urn:x-wmo:md:",  # the prefix alone
    "urn:x-wmo:md:~tilde",
    "~urn:x-wmo:md:x",
    "x-wmo::ABCD01",
    "urn:x-wmo:md:int.wmo.wis::with space",
    "urn:x-wmo:md:fr.meteofrance::prévision/été",
    "urn:x-wmo:md:jp.jma::気象",
    "urn:x-wmo:md:a%41b",  # a percent sign of its own
    "urn:x-wmo:md:a:b:c:",
    "http://example.org/record?id=1&x=2#frag",
    "plain",
]


def pywcmp_identifier_problem(identifier: str) -> str | None:
    """The identifier test of pywcmp 0.13.2's suite, its centre-id check aside."""
    tokens = identifier.split(":")
    if len(tokens) < 5 or not identifier.startswith("urn:wmo:md:"):
        return "form"
    if " " in tokens[-1] or not identifier.isascii() or not tokens[-1]:
        return "characters"
    return None


@pytest.mark.parametrize("fid", HOSTILE)
def test_hostile_identifiers_round_trip_to_a_valid_id(fid: str) -> None:
    made = wcmp2_id("de-dwd", fid)
    assert pywcmp_identifier_problem(made) is None, made
    assert made.split(":")[3] == "de-dwd"
    assert " " not in made and made.isascii()
    assert from_wcmp2_id(made) == ("de-dwd", fid)


def test_no_two_identifiers_share_an_id() -> None:
    ids = {wcmp2_id("de-dwd", fid) for fid in HOSTILE}
    assert len(ids) == len(HOSTILE)
    # what leaving out the prefix could have confused
    assert wcmp2_id("de-dwd", "urn:x-wmo:md:foo") != wcmp2_id("de-dwd", "foo")


def test_a_wcmp_1_3_identifier_reads_well() -> None:
    made = wcmp2_id("ru-roshydromet", "urn:x-wmo:md:int.wmo.wis::SMRA01RUMS")
    assert made == "urn:wmo:md:ru-roshydromet:int.wmo.wis::SMRA01RUMS"
    assert wcmp2_id("de-dwd", "with space") == "urn:wmo:md:de-dwd:~with%20space"
    assert wcmp2_id("de-dwd", "urn:x-wmo:md:a::") == "urn:wmo:md:de-dwd:a:%3A"


@given(st.text(min_size=1).filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)))
def test_any_text_round_trips(fid: str) -> None:
    made = wcmp2_id("int-wmo-test", fid)
    assert pywcmp_identifier_problem(made) is None
    assert from_wcmp2_id(made) == ("int-wmo-test", fid)


@pytest.mark.parametrize(
    "identifier",
    [
        "urn:x-wmo:md:int.wmo.wis::A",  # WCMP 1.3's, not WCMP2's
        "urn:wmo:md:DE-DWD:x",  # not a centre-id
        "urn:wmo:md:de-dwd",  # no local-id
        "urn:wmo:md:de-dwd:%41",  # another spelling of "A"
        "urn:wmo:md:de-dwd:%3a",  # lower-case hex
        "urn:wmo:md:de-dwd:a:",  # this node encodes a last ':'
        "urn:wmo:md:de-dwd:a b",
        "urn:wmo:md:de-dwd:~",
        "urn:wmo:md:de-dwd:%FF",  # not UTF-8
    ],
)
def test_ids_this_node_does_not_write_are_refused(identifier: str) -> None:
    with pytest.raises(IdentifierError):
        from_wcmp2_id(identifier)


def test_a_bad_centre_id_or_an_empty_identifier_is_refused() -> None:
    with pytest.raises(IdentifierError, match="centre-id"):
        wcmp2_id("DWD", "x")
    with pytest.raises(IdentifierError, match="empty"):
        wcmp2_id("de-dwd", "")


# --- centre rules ------------------------------------------------------------------------------


def test_rules_parse_and_print_as_written() -> None:
    text = (
        " de-dwd=prefix:urn:x-wmo:md:de.dwd. ; de-dwd = originator: Deutscher  Wetterdienst;"
        "de-dwd=licence:https://www.dwd.de/terms;;ru-roshydromet"
    )
    rules = parse_rules(text)
    assert [str(rule) for rule in rules] == [
        "de-dwd=prefix:urn:x-wmo:md:de.dwd.",
        "de-dwd=originator:Deutscher  Wetterdienst",
        "de-dwd=licence:https://www.dwd.de/terms",
        "ru-roshydromet",
    ]
    assert centres(rules) == ["de-dwd", "ru-roshydromet"]
    assert licence(rules, "de-dwd") == "https://www.dwd.de/terms"
    assert licence(rules, "ru-roshydromet") is None
    assert parse_rules("") == ()
    assert parse_rules(rules) == rules


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("DWD=prefix:x", "not a WIS2 centre-id"),
        ("de-dwd=prefix", "CENTRE-ID=prefix"),
        ("de-dwd=suffix:x", "CENTRE-ID=prefix"),
        ("de-dwd=prefix:", "CENTRE-ID=prefix"),
        ("de-dwd=licence:www.dwd.de", "http"),
    ],
)
def test_bad_rules_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_rules(text)


def test_the_first_matching_rule_wins() -> None:
    rules = parse_rules(
        "de-dwd=licence:https://x.example;de-dwd=prefix:urn:x-wmo:md:de.dwd.;"
        "fr-meteofrance=originator:Météo-France;int-wmo-test"
    )
    assert matching_rule(rules, "urn:x-wmo:md:de.dwd.x", ["Météo-France"]) == CentreRule(
        "de-dwd", "prefix", "urn:x-wmo:md:de.dwd."
    )
    by_name = matching_rule(rules, "urn:x-wmo:md:fr::x", ["  météo-france "])
    assert by_name is not None and by_name.centre_id == "fr-meteofrance"
    rest = matching_rule(rules, "other", [])
    assert rest is not None and rest.centre_id == "int-wmo-test"
    assert matching_rule(rules[:3], "other", ["Someone"]) is None


def test_the_setting_reads_the_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from wiscat.shared.settings import Settings

    monkeypatch.setenv("WISCAT_WIS2_CENTRES", "de-dwd=prefix:urn:x-wmo:md:de.dwd.;ru-roshydromet")
    assert [str(rule) for rule in Settings(_env_file=None).wis2_centres] == [  # type: ignore[call-arg]
        "de-dwd=prefix:urn:x-wmo:md:de.dwd.",
        "ru-roshydromet",
    ]
    monkeypatch.setenv("WISCAT_WIS2_CENTRES", "de-dwd=suffix:x")
    with pytest.raises(ValidationError, match="CENTRE-ID=prefix"):
        Settings(_env_file=None)  # type: ignore[call-arg]
    monkeypatch.delenv("WISCAT_WIS2_CENTRES")
    assert Settings(_env_file=None).wis2_centres == ()  # type: ignore[call-arg]
