"""ISO 19139 documents built to order for the record tests."""

from __future__ import annotations

import pytest

from wiscat.shared.iso19139 import (
    GCO,
    GMD,
    RecordError,
    parse_record,
)

NS_DECL = f'xmlns:gmd="{GMD}" xmlns:gco="{GCO}"'


def iso(body: str, *, root_attrs: str = NS_DECL) -> bytes:
    return f"<gmd:MD_Metadata {root_attrs}>{body}</gmd:MD_Metadata>".encode()


def file_id(value: str) -> str:
    return (
        f"<gmd:fileIdentifier><gco:CharacterString>{value}</gco:CharacterString>"
        "</gmd:fileIdentifier>"
    )


def date_stamp(kind: str, value: str) -> str:
    return f"<gmd:dateStamp><gco:{kind}>{value}</gco:{kind}></gmd:dateStamp>"


def reason(data: bytes | str) -> str:
    with pytest.raises(RecordError) as caught:
        parse_record(data)
    return str(caught.value)
