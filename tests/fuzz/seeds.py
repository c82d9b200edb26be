"""Write the seed corpus of the fuzz targets (``tests/fuzz/corpus/<target>/``) from the test
fixtures: ``python -m tests.fuzz.seeds``. The corpus is kept in the repository; this says where
each seed comes from, and remakes them after a fixture or the token format changes. Files whose
name begins ``regression-`` are findings of the fuzzer, kept by hand, and never rewritten here.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path

from tests.fuzz import targets
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.oaipmh.tokens import ListPosition

HERE = Path(__file__).parent
CORPUS = HERE / "corpus"
FIXTURES = HERE.parent / "data" / "oai"
OAI = "http://www.openarchives.org/OAI/2.0/"


def _list_records_page() -> bytes:
    """A ListRecords page of two whole WMO Core records, one deletion and a token."""
    records = b"".join(
        b"<record><header><identifier>" + identifier_for(n).encode() + b"</identifier>"
        b"<datestamp>2024-05-0" + str(n).encode() + b"T10:00:00Z</datestamp>"
        b"<setSpec>WIS-CATALOGUE</setSpec></header><metadata>"
        + generate_record(n).split(b"?>", 1)[1].strip()
        + b"</metadata></record>"
        for n in (1, 2)
    )
    deleted = (
        b'<record><header status="deleted"><identifier>urn:x-wmo:md:int.wmo.wis::gone'
        b"</identifier><datestamp>2024-05-03T10:00:00Z</datestamp></header></record>"
    )
    return (
        b'<?xml version="1.0" encoding="UTF-8"?>\n<OAI-PMH xmlns="' + OAI.encode() + b'">'
        b"<responseDate>2024-06-01T12:00:00Z</responseDate>"
        b'<request verb="ListRecords" metadataPrefix="iso19139">http://127.0.0.1:9/oai</request>'
        b"<ListRecords>" + records + deleted + b'<resumptionToken cursor="0" completeListSize="5"'
        b' expirationDate="2024-06-02T12:00:00Z">abc</resumptionToken></ListRecords></OAI-PMH>\n'
    )


def page() -> dict[str, bytes]:
    seeds = {path.name: path.read_bytes() for path in sorted(FIXTURES.iterdir())}
    seeds["ListRecords-whole-records.xml"] = _list_records_page()
    return seeds


def _positions() -> list[ListPosition]:
    now, later = targets.NOW, targets.NOW + timedelta(hours=24)
    day = timedelta(days=1)
    return [
        ListPosition("ListRecords", "iso19139", None, None, None, now, None, "", 0, 250, later),
        ListPosition(
            "ListIdentifiers",
            "oai_dc",
            "WIS-CATALOGUE:A",
            now - 30 * day,
            now - day,
            now,
            now - 2 * day,
            "urn:x-wmo:md:int.wmo.wis::xx.100",
            100,
            -1,
            later,
        ),
        ListPosition("ListSets", "", None, None, None, now, None, "A:B", 2, 4, later),
    ]


def token() -> dict[str, bytes]:
    seeds: dict[str, bytes] = {}
    for n, position in enumerate(_positions()):
        text = targets._CODEC.encode(position)
        seeds[f"text-{n}"] = bytes([targets.TOKEN_AS_TEXT]) + text.encode()
        # version byte and payload, without the 16 bytes of MAC
        signed = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))[:-16]
        seeds[f"signed-{n}"] = bytes([targets.TOKEN_SIGNED]) + signed[1:]
    for name, text in {"garbage": "garbage", "quote": "' OR 1=1 --", "empty": ""}.items():
        seeds[f"text-{name}"] = bytes([targets.TOKEN_AS_TEXT]) + text.encode()
    return seeds


def datestamp() -> dict[str, bytes]:
    texts = [
        "2024-01-01",
        "2024-01-01T00:00:00Z",
        "0001-01-01",
        "9999-12-31T23:59:59Z",
        "2024-13-01",
        "2024-02-30",
        "2024-01-01T00:00:00",
        "2024-01-01T24:00:00Z",
        "2024-02-29T12:00:00.123+05:30",
        "2024-02-29T12:00:00-00:30",
        "2024-02-29Z",
        "2026-11-25T14:23:2\u0662Z",
    ]
    return {f"{n:02d}": text.encode() for n, text in enumerate(texts)}


def arguments() -> dict[str, bytes]:
    queries = [
        "verb=Identify",
        "verb=ListSets",
        "verb=ListMetadataFormats&identifier=urn:x-wmo:md:int.wmo.wis::xx.1",
        "verb=GetRecord&metadataPrefix=iso19139&identifier=urn:x-wmo:md:int.wmo.wis::xx.1",
        "verb=ListRecords&metadataPrefix=oai_dc&set=WIS-CATALOGUE:A&from=2024-01-01"
        "&until=2024-02-01",
        "verb=ListIdentifiers&metadataPrefix=iso19139&from=2024-01-01T00:00:00Z"
        "&until=2024-02-01T00:00:00Z",
        "verb=ListRecords&resumptionToken=" + targets._CODEC.encode(_positions()[0]),
        # the error matrix of tests/integration/provider_oai/test_verbs.py::test_errors
        "",
        "verb=Frobnicate",
        "verb=Identify&verb=Identify",
        "verb=Identify&extra=1",
        "verb=ListRecords&metadataPrefix=iso19139&metadataPrefix=iso19139",
        "verb=ListRecords&metadataPrefix=iso19139&from=2024-01-01&until=2024-02-01T00:00:00Z",
        "verb=ListRecords&metadataPrefix=iso19139&from=2024-02-01&until=2024-01-01",
        "verb=ListRecords&metadataPrefix=iso19139&resumptionToken=x",
        "verb=ListRecords&metadataPrefix=marc21",
        "verb=GetRecord&metadataPrefix=iso19139&identifier=a%00b%01",
        "verb=GetRecord&metadataPrefix=iso19139&identifier=a%5Bb%5D",
        "verb=ListMetadataFormats&identifier=a%25zz",
        "verb=ListMetadataFormats&identifier=a%20b%23c%5B1%5D",
        "verb=ListIdentifiers&metadataPrefix=iso19139&set=no-such-set",
        "verb=ListRecords&resumptionToken=garbage",
        "verb=Identify&x=%FF",
    ]
    return {f"{n:02d}": query.encode() for n, query in enumerate(queries)}


SEEDS = {"page": page, "token": token, "datestamp": datestamp, "arguments": arguments}


def main() -> None:
    for name, make in SEEDS.items():
        folder = CORPUS / name
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            if not old.name.startswith("regression-"):
                old.unlink()
        for file_name, data in make().items():
            (folder / file_name).write_bytes(data)


if __name__ == "__main__":
    main()
