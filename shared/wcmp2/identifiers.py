"""A WCMP2 id, ``urn:wmo:md:{centre-id}:{local-id}``, made from a fileIdentifier, and back.

WCMP2 §7.1 (and pywcmp's identifier test) want an ASCII id, without spaces, whose last
``:``-separated part is not empty. fileIdentifiers of WCMP 1.3 are mostly
``urn:x-wmo:md:{authority}::{local}``; some carry spaces, non-ASCII letters or a trailing ``:``.
The local-id is therefore the fileIdentifier percent-encoded (RFC 3986, upper-case hex, UTF-8),
with the ``urn:x-wmo:md:`` prefix left out and every other identifier marked by a leading ``~``
(which the encoding never writes otherwise), so that:

- the local-id keeps only ``A-Z a-z 0-9 - . _ :`` and ``%XX`` (a ``:`` at the end is encoded);
- :func:`from_wcmp2_id` inverts :func:`wcmp2_id` exactly, so no two fileIdentifiers of one
  centre share an id, and the id is the record's for its whole life (it depends on nothing else).
"""

from __future__ import annotations

import re

WCMP2_PREFIX = "urn:wmo:md:"
# WCMP 1.3's identifiers (WMO Core 1.3 §9.2.1): urn:x-wmo:md:{authority}::{local}
WCMP1_PREFIX = "urn:x-wmo:md:"
# what marks a local-id made from an identifier without WCMP1_PREFIX
_OTHER = "~"

# a WIS2 centre-id (WIS2 Topic Hierarchy, level 4): lower-case letters and digits in parts
# joined by "-", the first the country code or "int"
CENTRE_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)+")

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._:")
_LOCAL = re.compile(r"(?:[A-Za-z0-9._:-]|%[0-9A-F]{2})+")


class IdentifierError(ValueError):
    """A WCMP2 id that no fileIdentifier gives; ``str()`` is the reason."""


def wcmp2_id(centre_id: str, file_identifier: str) -> str:
    """The WCMP2 id of the record ``file_identifier`` announced by ``centre_id``."""
    if not CENTRE_ID.fullmatch(centre_id):
        raise IdentifierError(f"{centre_id!r} is not a WIS2 centre-id (such as de-dwd)")
    if not file_identifier:
        raise IdentifierError("an empty fileIdentifier has no WCMP2 id")
    if file_identifier.startswith(WCMP1_PREFIX) and len(file_identifier) > len(WCMP1_PREFIX):
        local = _encode(file_identifier[len(WCMP1_PREFIX) :])
    else:
        local = _OTHER + _encode(file_identifier)
    return f"{WCMP2_PREFIX}{centre_id}:{local}"


def from_wcmp2_id(identifier: str) -> tuple[str, str]:
    """The centre-id and the fileIdentifier of a WCMP2 id that :func:`wcmp2_id` made;
    :class:`IdentifierError` for any other."""
    if not identifier.startswith(WCMP2_PREFIX):
        raise IdentifierError(f"does not begin with {WCMP2_PREFIX}")
    centre_id, colon, local = identifier[len(WCMP2_PREFIX) :].partition(":")
    if not colon or not CENTRE_ID.fullmatch(centre_id):
        raise IdentifierError("no centre-id after urn:wmo:md:")
    other = local.startswith(_OTHER)
    encoded = local[len(_OTHER) :] if other else local
    if not _LOCAL.fullmatch(encoded) or encoded.endswith(":"):
        raise IdentifierError("its local-id is not one this node writes")
    try:
        decoded = _decode(encoded)
    except UnicodeDecodeError as exc:
        raise IdentifierError("its local-id is not percent-encoded UTF-8") from exc
    if _encode(decoded) != encoded:  # %41 for "A": another spelling of an id, not ours
        raise IdentifierError("its local-id is not one this node writes")
    return centre_id, decoded if other else WCMP1_PREFIX + decoded


def _encode(text: str) -> str:
    encoded = "".join(
        char if char in _SAFE else "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))
        for char in text
    )
    if encoded.endswith(":"):  # pywcmp: the part after the last ":" must not be empty
        encoded = encoded[:-1] + "%3A"
    return encoded


def _decode(encoded: str) -> str:
    raw = bytearray()
    index = 0
    while index < len(encoded):
        if encoded[index] == "%":
            raw.append(int(encoded[index + 1 : index + 3], 16))
            index += 3
        else:
            raw.extend(encoded[index].encode("ascii"))
            index += 1
    return raw.decode("utf-8")
