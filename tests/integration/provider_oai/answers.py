"""What the provider's OAI tests share: the node's own set, answers checked against the schema,
and requests made by hand."""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import UTC, datetime, timedelta

import aiohttp
from lxml import etree

from tests.support.oai_client import OAI
from tests.support.oai_validation import strict_checks, validate_oai
from tests.support.servers import RunningProvider
from wiscat.shared.oaipmh.errors import BadResumptionToken
from wiscat.shared.oaipmh.tokens import TokenCodec

OWN = "WIS-GISC-TEST"


def check(body: bytes) -> None:
    validate_oai(body)
    strict_checks(body)


#: RELIABILITY P02's error matrix: (query, the error code, whether ``request`` echoes it).
ERRORS = [
    ("", "badVerb", False),
    ("verb=Frobnicate", "badVerb", False),
    ("verb=Identify&verb=Identify", "badVerb", False),
    ("verb=Identify&extra=1", "badArgument", False),
    ("verb=ListRecords", "badArgument", False),
    ("verb=ListRecords&metadataPrefix=iso19139&metadataPrefix=iso19139", "badArgument", False),
    ("verb=ListRecords&metadataPrefix=iso19139&from=2024-13-01", "badArgument", False),
    ("verb=ListRecords&metadataPrefix=iso19139&from=2024-01-01T00:00:00", "badArgument", False),
    (
        "verb=ListRecords&metadataPrefix=iso19139&from=2024-01-01&until=2024-02-01T00:00:00Z",
        "badArgument",
        False,
    ),
    (
        "verb=ListRecords&metadataPrefix=iso19139&from=2024-02-01&until=2024-01-01",
        "badArgument",
        False,
    ),
    ("verb=ListRecords&metadataPrefix=iso19139&resumptionToken=x", "badArgument", False),
    ("verb=GetRecord&metadataPrefix=iso19139", "badArgument", False),
    ("verb=ListRecords&metadataPrefix=marc21", "cannotDisseminateFormat", True),
    ("verb=GetRecord&metadataPrefix=iso19139&identifier=unknown", "idDoesNotExist", True),
    # characters no identifier can hold (the database's text cannot, nor XML): no URI
    ("verb=GetRecord&metadataPrefix=iso19139&identifier=%00", "badArgument", False),
    ("verb=GetRecord&metadataPrefix=iso19139&identifier=a%00b%01", "badArgument", False),
    ("verb=ListMetadataFormats&identifier=%00", "badArgument", False),
    # no xs:anyURI: echoed in the request element, they made the answer invalid (P01, P02)
    ("verb=GetRecord&metadataPrefix=iso19139&identifier=a%5Bb%5D", "badArgument", False),
    ("verb=GetRecord&metadataPrefix=iso19139&identifier=a%23b%23c", "badArgument", False),
    ("verb=ListMetadataFormats&identifier=a%25zz", "badArgument", False),
    ("verb=ListMetadataFormats&identifier=1a:b", "badArgument", False),
    # a URI, if an odd one: looked up
    ("verb=ListMetadataFormats&identifier=a%20b%23c%5B1%5D", "idDoesNotExist", True),
    ("verb=ListIdentifiers&metadataPrefix=iso19139&from=2999-01-01", "noRecordsMatch", True),
    ("verb=ListIdentifiers&metadataPrefix=iso19139&set=no-such-set", "noRecordsMatch", True),
    ("verb=ListRecords&resumptionToken=garbage", "badResumptionToken", True),
    ("verb=ListSets&resumptionToken=anything", "badResumptionToken", True),
]


#: The rest of RELIABILITY P02's requests: until=junk, from=junk, GetRecord without
#: metadataPrefix, a token with until, ``identifier=invalid"id``, mixed granularity.
MORE_ERRORS = [
    ("verb=ListIdentifiers&metadataPrefix=iso19139&until=junk", "badArgument", False),
    ("verb=ListIdentifiers&metadataPrefix=iso19139&from=junk", "badArgument", False),
    ("verb=GetRecord&identifier=urn:x-wmo:md:int.wmo.wis::xx.0", "badArgument", False),
    ("verb=ListIdentifiers&resumptionToken=junk&until=2000-02-05", "badArgument", False),
    ("verb=ListRecords&resumptionToken=junk", "badResumptionToken", True),
    (
        "verb=ListIdentifiers&metadataPrefix=iso19139&from=2002-02-05&until=2002-02-06T05:35:00Z",
        "badArgument",
        False,
    ),
    # Rule: an xs:anyURI (OAI-PMH.xsd's type for identifiers, README "Put records in") is
    # looked up; §3.6 gives idDoesNotExist for an identifier "unknown or illegal"
    ('verb=GetRecord&metadataPrefix=iso19139&identifier=invalid"id', "idDoesNotExist", True),
    ("verb=ListRecords&metadataPrefix=iso19139&until=2000-02-05", "noRecordsMatch", True),
]


def _normalised(body: bytes, codec: TokenCodec) -> bytes:
    """``body`` less what names the moment it was made: its responseDate, and in its
    resumptionToken the expiry and the list's frozen upper bound (the token is replaced by the
    rest of its position, decoded)."""
    tree = etree.fromstring(body)
    for date in tree.findall(f"{OAI}responseDate"):
        date.text = "-"

    def timeless(token: str) -> str:
        position = codec.decode(token, now=datetime.now(UTC))
        return repr(dataclasses.replace(position, expires=_EPOCH, upper_bound=_EPOCH))

    for token in tree.iter(f"{OAI}resumptionToken"):
        token.attrib.pop("expirationDate", None)
        if token.text:
            token.text = timeless(token.text)
    for request in tree.findall(f"{OAI}request"):
        echoed = request.get("resumptionToken")
        if echoed and request.get("verb") in ("ListIdentifiers", "ListRecords"):
            with contextlib.suppress(BadResumptionToken):  # not one of ours: kept as it is
                request.set("resumptionToken", timeless(echoed))
    return etree.tostring(tree)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _codec(running: RunningProvider) -> TokenCodec:
    secret = running.settings.token_secret
    assert secret is not None
    return TokenCodec(secret.get_secret_value().encode(), lifetime=timedelta(hours=1))


async def _fetch(
    session: aiohttp.ClientSession, url: str, query: str, *, post: bool, encoding: str = "identity"
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Accept-Encoding": encoding}
    if post:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        request = session.post(url, data=query.encode(), headers=headers)
    else:
        request = session.get(url + "?" + query if query else url, headers=headers)
    async with request as response:
        return response.status, dict(response.headers), await response.read()
