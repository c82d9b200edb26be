"""WIS2 Notification Messages (WNM 1.3.0, valid against the 1.4.0 draft too) for WCMP2 records.

Pure: :func:`revision` and :func:`integrity` name a record's content bytes, :func:`message`
builds the message an outbox row stands for, :func:`topic` is where it goes. A message has
exactly one link: ``canonical`` (a record new to the catalogue) or ``update`` (changed, or the
daily re-announcement) naming the revision's own URL, or ``deletion`` naming the item.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from wiscat.shared.wcmp2.identifiers import WCMP2_PREFIX
from wiscat.shared.wcmp2.urls import item_url

CONFORMANCE = "http://wis.wmo.int/spec/wnm/1/conf/core"
MEDIA_TYPE = "application/geo+json"
Relation = Literal["canonical", "update", "deletion"]


def revision(content: bytes) -> str:
    """The revision name of a record's content: the first 16 hex characters of its SHA-512."""
    return hashlib.sha512(content).hexdigest()[:16]


def integrity(content: bytes) -> str:
    """The WNM integrity value of ``content``: base64 of its SHA-512."""
    return base64.b64encode(hashlib.sha512(content).digest()).decode("ascii")


def topic(centre_id: str) -> str:
    """The topic a centre announces its discovery metadata on."""
    return f"origin/a/wis2/{centre_id}/metadata"


def data_id(wcmp2_id: str, centre_id: str) -> str:
    """``{centre-id}/metadata/{local-id}`` of a record ``urn:wmo:md:{centre-id}:{local-id}``."""
    local = wcmp2_id.removeprefix(f"{WCMP2_PREFIX}{centre_id}:")
    return f"{centre_id}/metadata/{local}"


@dataclass(frozen=True, slots=True)
class Announcement:
    """One outbox row: what a message says (``content`` the revision's bytes, None for a
    deletion)."""

    message_id: str
    wcmp2_id: str
    centre_id: str
    relation: Relation
    revision: str | None
    length: int | None
    sha512: str | None
    content: bytes | None


def message(row: Announcement, collection: str, *, now: datetime | None = None) -> dict[str, Any]:
    """The WNM message of ``row``; ``collection`` the records collection's URL."""
    pubtime = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    properties: dict[str, Any] = {
        "data_id": data_id(row.wcmp2_id, row.centre_id),
        "metadata_id": row.wcmp2_id,
        "pubtime": pubtime,
        "datetime": pubtime,
    }
    geometry = None
    if row.relation == "deletion":
        link: dict[str, Any] = {
            "rel": "deletion",
            "href": item_url(collection, row.wcmp2_id),
            "type": MEDIA_TYPE,
        }
    else:
        if row.content is None or row.revision is None or row.sha512 is None:
            raise ValueError(f"{row.wcmp2_id}: a {row.relation} message without its revision")
        properties["integrity"] = {"method": "sha512", "value": row.sha512}
        geometry = _geometry(json.loads(row.content))
        link = {
            "rel": row.relation,
            "href": item_url(collection, row.wcmp2_id, row.revision),
            "type": MEDIA_TYPE,
            "length": row.length,
        }
    return {
        "id": row.message_id,
        "conformsTo": [CONFORMANCE],
        "type": "Feature",
        "geometry": geometry,
        "properties": properties,
        "links": [link],
    }


def _geometry(record: dict[str, Any]) -> dict[str, Any] | None:
    """The record's geometry when WNM can carry it (a Point or a Polygon), else None."""
    geometry = record.get("geometry")
    if isinstance(geometry, dict) and geometry.get("type") in ("Point", "Polygon"):
        return geometry
    return None
