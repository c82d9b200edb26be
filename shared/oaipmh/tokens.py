"""Stateless, signed, keyset resumptionTokens (OAI-PMH 2.0 §3.5).

A token carries everything needed to continue its list on any provider replica: the list's
arguments, the frozen upper bound of the list, the keyset position (datestamp and identifier of
the last record sent), the cursor, the complete list size and the expiry. Nothing is kept in
process memory, so a restart or a second replica loses no list.

It never holds an offset to seek by: the next page is "the records after this (datestamp,
identifier) key, up to the frozen bound", so records added, changed or deleted while a list is in
progress cannot make it skip or repeat one. ``cursor`` is informational only (§3.5: "a count of the
number of elements of the complete list thus far returned").

Wire form: base64url, without padding, of ``version byte | payload | mac``, where ``mac`` is the
first 16 bytes of HMAC-SHA256 under the node's secret over ``version byte | payload``, and the
payload is packed binary (fixed-width integers, microseconds since the epoch, length-prefixed
UTF-8 strings) to keep tokens short. A token that is garbage, altered, signed with another secret,
of an unknown version or expired is refused with :class:`BadResumptionToken`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from wiscat.shared.oaipmh.errors import BadResumptionToken

_VERSION = 1
# 128 bits of HMAC-SHA256 are ample against forgery (the truncation RFC 4868 uses) and keep
# tokens short.
_MAC_BYTES = 16
_MAX_TOKEN_CHARS = 4096
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ALPHABET = re.compile(r"[A-Za-z0-9_-]+")

# Only the list verbs are ever split (§3.5); one byte names the verb.
_VERB_CODES = {"ListIdentifiers": 1, "ListRecords": 2, "ListSets": 3}
_VERBS_BY_CODE = {code: verb for verb, code in _VERB_CODES.items()}

_HAS_SET, _HAS_FROM, _HAS_UNTIL, _HAS_LAST = 1, 2, 4, 8
# version, verb, flags, upper bound, expiry, cursor, complete list size
_FIXED = struct.Struct(">BBBqqqq")
_MOMENT = struct.Struct(">q")
_LENGTH = struct.Struct(">H")


@dataclass(frozen=True)
class ListPosition:
    """Where a list stands: its arguments, frozen bound, keyset position and counts.

    ``until_exclusive`` is the first instant after the request's inclusive ``until``;
    ``upper_bound`` is the bound frozen when the list began (microsecond precision), so later
    arrivals wait for the next list. ``last_datestamp`` and ``last_identifier`` are the key of the
    last record delivered (``last_datestamp`` None before the first page). ``cursor`` counts the
    records already delivered; ``complete_list_size`` may be negative for "not counted yet".
    ``expires`` None: the token never expires. Every datetime must be timezone-aware.
    """

    verb: str
    metadata_prefix: str
    set_spec: str | None
    from_: datetime | None
    until_exclusive: datetime | None
    upper_bound: datetime
    last_datestamp: datetime | None
    last_identifier: str
    cursor: int
    complete_list_size: int
    expires: datetime | None


@dataclass(frozen=True)
class RetiredSecret:
    """A secret that signed tokens before the current one: its tokens are still taken before
    ``taken_until`` (timezone-aware), and it never signs."""

    secret: bytes
    taken_until: datetime


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _micros(moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ValueError("resumptionToken datetimes must be timezone-aware")
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _moment(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _text(value: str) -> bytes:
    data = value.encode("utf-8")
    return _LENGTH.pack(len(data)) + data


class _Reader:
    def __init__(self, data: bytes, offset: int) -> None:
        self.data = data
        self.offset = offset

    def moment(self) -> datetime:
        (micros,) = _MOMENT.unpack_from(self.data, self.offset)
        self.offset += _MOMENT.size
        return _moment(micros)

    def text(self) -> str:
        (length,) = _LENGTH.unpack_from(self.data, self.offset)
        start = self.offset + _LENGTH.size
        self.offset = start + length
        if self.offset > len(self.data):
            raise ValueError("truncated string")
        return self.data[start : self.offset].decode("utf-8")


class TokenCodec:
    """Encodes resumptionTokens under one secret, and checks them under it and the retired ones.

    ``lifetime`` None: tokens never expire (a list can be continued at any time, by any
    provider of the node); else each token expires that long after it was issued.
    """

    def __init__(
        self,
        secret: bytes,
        *,
        lifetime: timedelta | None = None,
        retired: Sequence[RetiredSecret] = (),
    ) -> None:
        if not secret:
            raise ValueError("the token secret must not be empty")
        if lifetime is not None and lifetime <= timedelta(0):
            raise ValueError("the token lifetime must be positive")
        for old in retired:
            if not old.secret:
                raise ValueError("a retired token secret must not be empty")
            if old.taken_until.tzinfo is None:
                raise ValueError("a retired secret's end must be timezone-aware")
        self._secret = secret
        self._retired = tuple(retired)
        self.lifetime = lifetime

    def expiry(self, now: datetime) -> datetime | None:
        """When a token issued at ``now`` expires (the ``expirationDate`` of §3.5); None:
        never."""
        return None if self.lifetime is None else now + self.lifetime

    def _mac(self, signed: bytes, secret: bytes | None = None) -> bytes:
        key = self._secret if secret is None else secret
        return hmac.new(key, signed, hashlib.sha256).digest()[:_MAC_BYTES]

    def _check_mac(self, signed: bytes, mac: bytes, now: datetime) -> None:
        if hmac.compare_digest(mac, self._mac(signed)):
            return
        for old in self._retired:
            if hmac.compare_digest(mac, self._mac(signed, old.secret)):
                if now < old.taken_until:
                    return
                raise BadResumptionToken(
                    "this resumptionToken was signed with a key retired at "
                    f"{old.taken_until.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}; start the list again"
                )
        raise BadResumptionToken("this resumptionToken was not issued by this repository")

    def encode(self, position: ListPosition) -> str:
        """The resumptionToken for ``position``: URL-safe, signed, opaque to harvesters (§3.5).

        Raises ValueError for a verb that is never split, or a naive datetime.
        """
        verb = _VERB_CODES.get(position.verb)
        if verb is None:
            raise ValueError(f"{position.verb!r} lists are not split by resumptionTokens")
        flags = 0
        optional = b""
        if position.set_spec is not None:
            flags |= _HAS_SET
        if position.from_ is not None:
            flags |= _HAS_FROM
            optional += _MOMENT.pack(_micros(position.from_))
        if position.until_exclusive is not None:
            flags |= _HAS_UNTIL
            optional += _MOMENT.pack(_micros(position.until_exclusive))
        if position.last_datestamp is not None:
            flags |= _HAS_LAST
            optional += _MOMENT.pack(_micros(position.last_datestamp))
        signed = (
            _FIXED.pack(
                _VERSION,
                verb,
                flags,
                _micros(position.upper_bound),
                0 if position.expires is None else _micros(position.expires),
                position.cursor,
                position.complete_list_size,
            )
            + optional
            + _text(position.metadata_prefix)
            + (_text(position.set_spec) if position.set_spec is not None else b"")
            + _text(position.last_identifier)
        )
        return _b64(signed + self._mac(signed))

    def decode(self, token: str, *, now: datetime) -> ListPosition:
        """Check ``token`` and return its position.

        Raises :class:`BadResumptionToken` ("the value of the resumptionToken argument is invalid
        or expired", §3.6) for garbage, a token altered or signed under another secret (or under
        a retired one at or after its end), an unknown format version, or one whose expiry is not
        after ``now`` (timezone-aware).
        """
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        if len(token) > _MAX_TOKEN_CHARS or not _ALPHABET.fullmatch(token):
            raise BadResumptionToken("this resumptionToken is malformed")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError) as exc:
            raise BadResumptionToken("this resumptionToken is malformed") from exc
        # The decoder ignores the spare low bits of the last character; requiring the canonical
        # spelling makes every character of the token count.
        if _b64(raw) != token or len(raw) < _FIXED.size + _MAC_BYTES:
            raise BadResumptionToken("this resumptionToken is malformed")
        if raw[0] != _VERSION:
            raise BadResumptionToken("this resumptionToken has an unknown format version")
        signed, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        self._check_mac(signed, mac, now)
        try:
            position = self._unpack(signed)
        except (struct.error, ValueError, OverflowError, KeyError) as exc:
            raise BadResumptionToken("this resumptionToken is malformed") from exc
        if position.expires is not None and position.expires <= now:
            raise BadResumptionToken("this resumptionToken has expired; start the list again")
        return position

    @staticmethod
    def _unpack(signed: bytes) -> ListPosition:
        _, verb, flags, upper_bound, expires, cursor, size = _FIXED.unpack_from(signed)
        reader = _Reader(signed, _FIXED.size)
        from_ = reader.moment() if flags & _HAS_FROM else None
        until_exclusive = reader.moment() if flags & _HAS_UNTIL else None
        last_datestamp = reader.moment() if flags & _HAS_LAST else None
        prefix = reader.text()
        set_spec = reader.text() if flags & _HAS_SET else None
        last_identifier = reader.text()
        if reader.offset != len(signed):
            raise ValueError("trailing bytes")
        return ListPosition(
            verb=_VERBS_BY_CODE[verb],
            metadata_prefix=prefix,
            set_spec=set_spec,
            from_=from_,
            until_exclusive=until_exclusive,
            upper_bound=_moment(upper_bound),
            last_datestamp=last_datestamp,
            last_identifier=last_identifier,
            cursor=cursor,
            complete_list_size=size,
            expires=_moment(expires) if expires else None,
        )
