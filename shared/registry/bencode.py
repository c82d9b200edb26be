"""Bencoding (BEP 3, "The BitTorrent Protocol Specification", section "bencoding"), strict.

The registry's key file is a BitTorrent metainfo file and its trackers answer in bencoding, so
both are read here. Values map to Python as: integer ``int``, byte string ``bytes``, list
``list``, dictionary ``dict`` with ``bytes`` keys. :func:`encode` also takes ``str`` (written as
its UTF-8 bytes) and tuples.

Decoding is strict, because the network's identity is the SHA-1 of a bencoded dictionary
(BEP 3: "info_hash ... the 20 byte sha1 hash of the bencoded form of the info value"): one value
must have exactly one encoding, or two nodes could read one key file as two networks. So
:func:`decode` refuses

- integers that are not canonical: a leading zero (``i03e``), negative zero (``i-0e``), an
  empty one (``ie``), a plus sign (BEP 3: "i-0e is invalid. All encodings with a leading zero,
  such as i03e, are invalid, other than i0e");
- string lengths with a leading zero (``03:abc``) or a sign;
- dictionary keys out of order or repeated (BEP 3: "Keys must be strings and appear in sorted
  order (sorted as raw strings, not alphanumerics)");
- integers of more than 20 digits (no key file or tracker needs one; BEP 3 sets no limit);
- anything after the first value, and input longer than ``max_bytes`` or nested deeper than
  ``max_depth``.

Every refusal is a :class:`BencodeError` naming the offset where it was found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Value = int | bytes | list["Value"] | dict[bytes, "Value"]

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
# a length of 20 digits is far past MAX_BYTES: refused before int() is asked to read it
_MAX_DIGITS = 20


class BencodeError(ValueError):
    """Not a canonical bencoded value, with the offset where decoding stopped."""


def encode(value: object) -> bytes:
    """The bencoding of ``value`` (dictionary keys sorted as raw bytes, as BEP 3 asks)."""
    out: list[bytes] = []
    _encode(value, out)
    return b"".join(out)


def _encode(value: object, out: list[bytes]) -> None:
    if isinstance(value, bool):  # a bool is an int to Python, and a mistake here
        raise TypeError("bencoding has no booleans")
    if isinstance(value, int):
        out.append(b"i%de" % value)
    elif isinstance(value, bytes | str):
        raw = value.encode("utf-8") if isinstance(value, str) else value
        out.append(b"%d:" % len(raw))
        out.append(raw)
    elif isinstance(value, Mapping):
        keys: dict[bytes, object] = {}
        for key, item in value.items():
            raw_key = key.encode("utf-8") if isinstance(key, str) else key
            if not isinstance(raw_key, bytes):
                raise TypeError(f"a dictionary key must be bytes or str, not {type(key).__name__}")
            if raw_key in keys:
                raise ValueError(f"the key {raw_key!r} is given twice")
            keys[raw_key] = item
        out.append(b"d")
        for raw_key in sorted(keys):
            _encode(raw_key, out)
            _encode(keys[raw_key], out)
        out.append(b"e")
    elif isinstance(value, Sequence):
        out.append(b"l")
        for item in value:
            _encode(item, out)
        out.append(b"e")
    else:
        raise TypeError(f"cannot bencode a {type(value).__name__}")


def decode(data: bytes, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Value:
    """The one value ``data`` encodes; :class:`BencodeError` unless it is canonical bencoding
    of exactly one value."""
    if len(data) > max_bytes:
        raise BencodeError(f"{len(data)} bytes: more than the {max_bytes} accepted")
    value, end = _Decoder(data, max_depth).value(0, 0)
    if end != len(data):
        raise BencodeError(f"offset {end}: data after the value")
    return value


class _Decoder:
    def __init__(self, data: bytes, max_depth: int) -> None:
        self.data = data
        self.max_depth = max_depth

    def _byte(self, at: int) -> int:
        if at >= len(self.data):
            raise BencodeError(f"offset {at}: the data ends inside a value")
        return self.data[at]

    def value(self, at: int, depth: int) -> tuple[Value, int]:
        lead = self._byte(at)
        if lead == ord("i"):
            end = self.data.find(b"e", at + 1, at + 3 + _MAX_DIGITS)  # i, sign, digits, e
            if end < 0:
                raise BencodeError(
                    f"offset {at}: an integer without its end within {_MAX_DIGITS} digits"
                )
            return _integer(self.data[at + 1 : end], at), end + 1
        if ord("0") <= lead <= ord("9"):
            return self.string(at)
        if lead in (ord("l"), ord("d")):
            if depth >= self.max_depth:
                raise BencodeError(f"offset {at}: nested deeper than {self.max_depth}")
            return (self.list if lead == ord("l") else self.dict)(at, depth + 1)
        raise BencodeError(f"offset {at}: {bytes([lead])!r} starts no value")

    def string(self, at: int) -> tuple[bytes, int]:
        colon = self.data.find(b":", at, at + _MAX_DIGITS + 1)
        if colon < 0:
            raise BencodeError(f"offset {at}: a string length without its ':'")
        digits = self.data[at:colon]
        if not digits.isdigit() or (digits.startswith(b"0") and digits != b"0"):
            raise BencodeError(f"offset {at}: the string length {digits!r} is not canonical")
        end = colon + 1 + int(digits)
        if end > len(self.data):
            raise BencodeError(f"offset {at}: a string of {int(digits)} bytes runs past the end")
        return self.data[colon + 1 : end], end

    def list(self, at: int, depth: int) -> tuple[Value, int]:
        items: list[Value] = []
        at += 1
        while self._byte(at) != ord("e"):
            item, at = self.value(at, depth)
            items.append(item)
        return items, at + 1

    def dict(self, at: int, depth: int) -> tuple[Value, int]:
        items: dict[bytes, Value] = {}
        previous: bytes | None = None
        at += 1
        while self._byte(at) != ord("e"):
            if not ord("0") <= self._byte(at) <= ord("9"):
                raise BencodeError(f"offset {at}: a dictionary key must be a string")
            key_at = at
            key, at = self.string(at)
            if previous is not None and key <= previous:
                what = "repeated" if key == previous else "out of sorted order"
                raise BencodeError(f"offset {key_at}: the key {key!r} is {what}")
            items[key], at = self.value(at, depth)
            previous = key
        return items, at + 1


def _integer(digits: bytes, at: int) -> int:
    body = digits[1:] if digits.startswith(b"-") else digits
    if len(body) > _MAX_DIGITS:
        raise BencodeError(f"offset {at}: an integer of more than {_MAX_DIGITS} digits")
    if not body.isdigit() or (body.startswith(b"0") and body != b"0") or digits == b"-0":
        raise BencodeError(f"offset {at}: the integer {digits!r} is not canonical")
    return int(digits)
