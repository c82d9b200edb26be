"""Bencoding (BEP 3), strict: round trips, and every non-canonical form refused by name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wiscat.shared.registry.bencode import BencodeError, Value, decode, encode

values: st.SearchStrategy[Value] = st.recursive(
    # at most 20 digits: the longest integer decode() reads
    st.integers(min_value=-(10**20) + 1, max_value=10**20 - 1) | st.binary(max_size=40),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.binary(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)


@given(values)
def test_every_value_survives_a_round_trip(value: Value) -> None:
    assert decode(encode(value)) == value


@given(values)
def test_the_encoding_is_the_one_canonical_form(value: Value) -> None:
    encoded = encode(value)
    assert encode(decode(encoded)) == encoded


def test_the_examples_of_bep_3() -> None:
    assert encode(b"spam") == b"4:spam"
    assert encode(3) == b"i3e"
    assert encode(-3) == b"i-3e"
    assert encode(0) == b"i0e"
    assert encode([b"spam", b"eggs"]) == b"l4:spam4:eggse"
    assert encode({b"cow": b"moo", b"spam": b"eggs"}) == b"d3:cow3:moo4:spam4:eggse"
    assert encode({"spam": [b"a", b"b"]}) == b"d4:spaml1:a1:bee"
    assert decode(b"d3:cow3:moo4:spam4:eggse") == {b"cow": b"moo", b"spam": b"eggs"}
    assert decode(b"0:") == b""
    assert decode(b"le") == []


def test_keys_are_sorted_as_raw_bytes_when_encoding() -> None:
    assert encode({"b": 1, "a": 2, "B": 3}) == b"d1:Bi3e1:ai2e1:bi1ee"


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"i03e", "offset 0: the integer b'03' is not canonical"),
        (b"i-0e", "offset 0: the integer b'-0' is not canonical"),
        (b"ie", "offset 0: the integer b'' is not canonical"),
        (b"i+3e", "offset 0: the integer b'+3' is not canonical"),
        (b"i-e", "offset 0: the integer b'-' is not canonical"),
        (b"i3", "offset 0: an integer without its end within 20 digits"),
        (b"03:abc", "offset 0: the string length b'03' is not canonical"),
        (b"5:abc", "offset 0: a string of 5 bytes runs past the end"),
        (b"3abc", "offset 0: a string length without its ':'"),
        (b"d1:bi1e1:ai2ee", "offset 7: the key b'a' is out of sorted order"),
        (b"d1:ai1e1:ai2ee", "offset 7: the key b'a' is repeated"),
        (b"di1ei2ee", "offset 1: a dictionary key must be a string"),
        (b"i1ei2e", "offset 3: data after the value"),
        (b"4:spamx", "offset 6: data after the value"),
        (b"l4:spam", "offset 7: the data ends inside a value"),
        (b"", "offset 0: the data ends inside a value"),
        (b"x", "offset 0: b'x' starts no value"),
    ],
)
def test_non_canonical_input_is_refused(data: bytes, error: str) -> None:
    with pytest.raises(BencodeError) as caught:
        decode(data)
    assert str(caught.value) == error


def test_long_integers_are_refused() -> None:
    assert decode(b"i-" + b"9" * 20 + b"e") == -(10**20) + 1
    with pytest.raises(BencodeError) as caught:
        decode(b"i" + b"9" * 21 + b"e")
    assert str(caught.value) == "offset 0: an integer of more than 20 digits"
    with pytest.raises(BencodeError) as caught:
        decode(b"i" + b"9" * 30 + b"e")
    assert str(caught.value) == "offset 0: an integer without its end within 20 digits"


def test_overlong_and_deep_input_is_refused() -> None:
    with pytest.raises(BencodeError) as caught:
        decode(b"0:", max_bytes=1)
    assert str(caught.value) == "2 bytes: more than the 1 accepted"
    with pytest.raises(BencodeError) as caught:
        decode(b"l" * 65 + b"e" * 65)
    assert str(caught.value) == "offset 64: nested deeper than 64"
    assert decode(b"l" * 64 + b"e" * 64, max_depth=64) is not None


def test_what_cannot_be_encoded_is_refused() -> None:
    with pytest.raises(TypeError, match="bencoding has no booleans"):
        encode(True)
    with pytest.raises(TypeError, match="cannot bencode a float"):
        encode(1.5)
    with pytest.raises(ValueError, match="the key b'a' is given twice"):
        encode({"a": 1, b"a": 2})
