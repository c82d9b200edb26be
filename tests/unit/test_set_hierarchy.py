"""The set hierarchy of OAI-PMH 2.0 §2.6 (RELIABILITY P16)."""

from __future__ import annotations

from wiscat.shared.oaipmh.hierarchy import ancestors, minimal, with_ancestors


def test_ancestors_are_the_paths_above() -> None:
    assert ancestors("a:b:c") == ["a", "a:b"]
    assert ancestors("WIS-GISC-X") == []
    # a level is no pattern: '_' and '%' are letters in it
    assert ancestors("a_%:b") == ["a_%"]


def test_the_sets_served_are_the_stored_ones_and_every_one_above() -> None:
    assert with_ancestors(["a:b:c", "a:d", "ab", "WIS-GISC-X"]) == {
        "a", "a:b", "a:b:c", "a:d", "ab", "WIS-GISC-X",
    }  # fmt: skip
    assert with_ancestors([]) == set()


def test_a_header_names_only_the_sets_not_implied_by_another() -> None:
    assert minimal(["a", "a:b", "WIS-CATALOGUE"]) == ("WIS-CATALOGUE", "a:b")
    assert minimal(["a:b", "a:c", "a:b:d", "ab"]) == ("a:b:d", "a:c", "ab")
    # 'ab' is not below 'a': only a whole level makes a parent
    assert minimal(["a", "ab"]) == ("a", "ab")
    assert minimal([]) == ()
