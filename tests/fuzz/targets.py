"""The fuzz targets of RELIABILITY F04, each the contract of one parser that takes hostile input.

A target takes the fuzzer's bytes, hands them to the real code and asserts its contract: only
the exceptions the code documents escape, and what it returns holds. Any other exception (an
IndexError, a ValueError of lxml, an AssertionError of the contract) is a finding: the fuzzer
stops, and ``tests/fuzz/test_fuzz.py`` prints the input that raised it.

- :func:`page`: a response body as the harvester reads it (``read_copy``, what its page workers
  run; ``read_identify``; ``announced_token``). Only the harvester's :class:`BadResponse` and the
  OAI-PMH errors a peer sends may escape, and ``announced_token`` never raises.
- :func:`token`: the provider's resumptionToken decoder, on any text and on any payload signed
  under its secret (so that the fuzzer gets past the MAC). Only :class:`BadResumptionToken`, and a
  position it reads is encoded again into a token that reads back as the same position.
- :func:`datestamp`: the request's from/until parser (only :class:`BadArgument`, and what it
  reads is written back as given) and the harvester's lenient one (only
  :class:`MalformedResponse`, and the instant is in UTC).
- :func:`arguments`: a query string as the provider takes it (``responses.query_pairs``, then
  ``parse_request``). Only OAI-PMH errors, and the answer the provider would render for either
  outcome is well-formed XML (an argument accepted must be one the ``request`` element can echo).

The functions are plain Python: ``tests/fuzz/test_fuzz.py`` also calls them on every file of the
seed corpus (``tests/fuzz/corpus/<target>/``) without atheris.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from lxml import etree

from wiscat.harvester.errors import BadResponse
from wiscat.harvester.page_content import read_copy
from wiscat.provider import oai, responses
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.arguments import echo_allowed, parse_request
from wiscat.shared.oaipmh.dates import (
    Granularity,
    format_datestamp,
    format_day,
    parse_datestamp,
    until_upper_bound,
)
from wiscat.shared.oaipmh.errors import BadResumptionToken, NoRecordsMatch, OAIError
from wiscat.shared.oaipmh.pages import (
    MalformedResponse,
    ResponseError,
    announced_token,
    parse_oai_date,
    read_identify,
)
from wiscat.shared.oaipmh.tokens import TokenCodec

PEER_URL = "http://127.0.0.1:9/oai"
BASE_URL = "http://127.0.0.1:8080/oai"
# the instant the token target decodes at; seed tokens expire a day later
NOW = datetime(2024, 6, 1, 12, 0, 0, tzinfo=UTC)
TOKEN_SECRET = b"fuzz-token-secret"
_CODEC = TokenCodec(TOKEN_SECRET, lifetime=timedelta(hours=24))
# a well-formed answer never needs a DTD or an entity: parsed back with nothing resolved
_STRICT = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)

# The first byte of a token input says how the rest is taken.
TOKEN_AS_TEXT = 0  # the rest, as UTF-8, is the resumptionToken argument
TOKEN_SIGNED = 1  # the rest is a payload, signed and encoded as the provider would


def page(data: bytes) -> None:
    """A peer's response body, read as the harvester reads it."""
    try:
        content, summary, items = read_copy(PEER_URL, data)
    except (BadResponse, OAIError):
        pass
    else:
        assert items >= len(content.sorter.batch) + len(content.deletions) + len(content.wanted)
        for moment in (content.greatest, summary.response_date, summary.expiration):
            assert moment is None or moment.utcoffset() == timedelta(0), moment
    with contextlib.suppress(ResponseError, OAIError):
        read_identify(data)
    token = announced_token(data)
    assert token is None or (token and token == token.strip()), repr(token)


def token(data: bytes) -> None:
    """The resumptionToken decoder, on text (mode 0) or on a signed payload (mode 1)."""
    if not data:
        return
    mode, rest = data[0] % 2, data[1:]
    if mode == TOKEN_SIGNED:
        # what the provider's own encoder would make of this payload: version byte first
        signed = bytes([1]) + rest
        text = _b64(signed + _CODEC._mac(signed))
    else:
        text = rest.decode("utf-8", "replace")
    try:
        position = _CODEC.decode(text, now=NOW)
    except BadResumptionToken:
        return
    assert position.expires is None or position.expires > NOW
    assert position.verb in ("ListIdentifiers", "ListRecords", "ListSets"), position.verb
    moments = (
        position.from_,
        position.until_exclusive,
        position.upper_bound,
        position.last_datestamp,
    )
    for moment in moments:
        assert moment is None or moment.utcoffset() == timedelta(0), moment
    # what the decoder took, the encoder gives back: a list goes on where the token says
    assert _CODEC.decode(_CODEC.encode(position), now=NOW) == position


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def datestamp(data: bytes) -> None:
    """A from/until value (strict) and a peer's datestamp (lenient)."""
    text = data.decode("utf-8", "replace")
    try:
        moment, granularity = parse_datestamp(text)
    except OAIError as exc:
        assert exc.code == "badArgument", exc.code
    else:
        # only the two forms of §3.3.1 are read, each exactly as it is written
        written = format_day(moment) if granularity is Granularity.DAY else format_datestamp(moment)
        assert written == text, (written, text)
        assert until_upper_bound(moment, granularity) > moment
    try:
        read = parse_oai_date(text)
    except MalformedResponse:
        pass
    else:
        assert read.utcoffset() == timedelta(0), read


def arguments(data: bytes) -> None:
    """A query string, taken as the provider takes it, and the answer rendered for it."""
    raw = data.decode("latin-1")  # what arrives is bytes; percent escapes carry the rest
    pairs: list[tuple[str, str]] = []
    try:
        pairs = responses.query_pairs(raw)
        asked = parse_request(pairs, formats=oai.FORMATS)
    except OAIError as error:
        echo = dict(pairs) if echo_allowed(error) else None
        _well_formed(render.render_error(NOW, BASE_URL, echo, [error]))
        return
    # an accepted request's arguments are echoed by every answer (§3.2): noRecordsMatch's here
    _well_formed(render.render_error(NOW, BASE_URL, asked.echo, [NoRecordsMatch()]))
    if asked.resumption_token is not None:
        with contextlib.suppress(BadResumptionToken):
            _CODEC.decode(asked.resumption_token, now=NOW)


def _well_formed(document: bytes) -> None:
    root = etree.fromstring(document, _STRICT)
    assert root.tag == "{http://www.openarchives.org/OAI/2.0/}OAI-PMH", root.tag


TARGETS: dict[str, Callable[[bytes], None]] = {
    "page": page,
    "token": token,
    "datestamp": datestamp,
    "arguments": arguments,
}


def canary(data: bytes) -> None:
    """Fails on an input that starts with ``FUZ``: proves that the harness reports a finding
    with its input (``tests/fuzz/test_fuzz.py``). Not one of :data:`TARGETS`."""
    if data.startswith(b"FUZ"):
        raise ValueError("the canary's input")
