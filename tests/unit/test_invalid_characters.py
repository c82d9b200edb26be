"""P14: finding and replacing the characters XML 1.0 does not allow in a stored document's bytes,
and why no record written by wiscat holds one."""

from __future__ import annotations

import pytest
from lxml import etree

from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import RecordError, parse_record
from wiscat.shared.oaipmh.render import replace_invalid_characters


def allowed(code: int) -> bool:
    """XML 1.0 §2.2: Char ::= #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] |
    [#x10000-#x10FFFF]."""
    return (
        code in (0x9, 0xA, 0xD)
        or 0x20 <= code <= 0xD7FF
        or 0xE000 <= code <= 0xFFFD
        or 0x10000 <= code <= 0x10FFFF
    )


# every character of the BMP but the surrogates (no UTF-8 holds one), and the other planes'
# first and last, and their last two (allowed there, unlike U+FFFE and U+FFFF)
CODES = [c for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF] + [
    c
    for plane in range(1, 17)
    for c in (plane << 16, (plane << 16) | 0xFFFE, (plane << 16) | 0xFFFF)
]


def test_p14_the_bytes_check_is_xml_1_0s_rule_for_every_character() -> None:
    """P14: a character in a UTF-8 document is found, and replaced by U+FFFD, exactly when
    XML 1.0 does not allow it."""
    for code in CODES:
        document = f"<a>x{chr(code)}y</a>".encode()
        mended, count, first = replace_invalid_characters(document)
        if allowed(code):
            assert (mended, count, first) == (document, 0, None), hex(code)
        else:
            assert (mended, count, first) == ("<a>x\ufffdy</a>".encode(), 1, chr(code)), hex(code)


def test_p14_every_such_character_is_replaced_and_the_first_named() -> None:
    document = "<a b='\uffff'>\x0b\U0001fffe\x1f\ufffd\ufffe\t</a>".encode()
    assert replace_invalid_characters(document) == (
        "<a b='\ufffd'>\ufffd\U0001fffe\ufffd\ufffd\ufffd\t</a>".encode(),
        4,
        "\uffff",
    )


@pytest.mark.parametrize("character", ["\x00", "\x0b", "\x1f", "\ufffe", "\uffff", "\ud800"])
def test_p14_no_lxml_element_holds_one_so_no_record_written_does(character: str) -> None:
    """P14: every record stored is the serialization of an lxml element (wiscat.shared.iso19139
    .record_from_element), and no lxml element can hold such a character: its parser refuses
    one, literal or by a character reference (tests/integration/test_invalid_characters.py),
    and so does its API, in text, a tail, an attribute or a comment."""
    element = etree.fromstring(b"<a><b/></a>")
    with pytest.raises(ValueError):
        element.text = character
    with pytest.raises(ValueError):
        element[0].tail = character
    with pytest.raises(ValueError):
        element.set("c", character)
    with pytest.raises(ValueError):
        etree.Comment(character)
    with pytest.raises(RecordError):
        parse_record(
            generate_record(1).replace(
                b"</gmd:MD_Metadata>",
                character.encode("utf-8", "surrogatepass") + b"</gmd:MD_Metadata>",
            )
        )
