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
import uuid
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
    link: dict[str, Any]
    if row.relation == "deletion":
        link = {
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


def message_errors(message: dict[str, Any]) -> list[str]:
    """Why ``message`` breaks what WNM 1.3.0 and the 1.4.0 draft require, or what wiscat's own
    rules ask of a metadata message (one link, of one of the three relations; integrity and
    length on canonical and update; the record's centre-id that of the topic's data_id)."""
    errors = []
    try:
        uuid.UUID(str(message.get("id")))
    except ValueError:
        errors.append("id is no UUID")
    if CONFORMANCE not in (message.get("conformsTo") or []):
        errors.append(f"conformsTo lacks {CONFORMANCE}")
    if message.get("type") != "Feature":
        errors.append("type is not Feature")
    geometry = message.get("geometry")
    if geometry is not None and geometry.get("type") not in ("Point", "Polygon"):
        errors.append("geometry is neither null, a Point nor a Polygon")
    properties = message.get("properties") or {}
    for key in ("pubtime", "data_id", "metadata_id", "datetime"):
        if not isinstance(properties.get(key), str) or not properties[key]:
            errors.append(f"properties.{key} is missing")
    metadata_id = str(properties.get("metadata_id", ""))
    centre = metadata_id.removeprefix(WCMP2_PREFIX).partition(":")[0]
    if not metadata_id.startswith(WCMP2_PREFIX) or not str(
        properties.get("data_id", "")
    ).startswith(f"{centre}/metadata/"):
        errors.append("metadata_id and data_id name different centres")
    links = message.get("links") or []
    if len(links) != 1:
        return [*errors, f"{len(links)} links, not exactly one"]
    [link] = links
    if link.get("rel") not in ("canonical", "update", "deletion") or not link.get("href"):
        errors.append("the link is not canonical, update or deletion, with an href")
    if link.get("rel") != "deletion":
        check = properties.get("integrity") or {}
        if check.get("method") != "sha512" or not check.get("value"):
            errors.append("no sha512 integrity")
        if not isinstance(link.get("length"), int):
            errors.append("the link has no length")
    return errors
