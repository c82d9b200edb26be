"""WCMP2 rows as the WIS2 renderer stores them (migration 0012), made by the real mapping from
generated records, for tests of what reads them (the provider's collection, the dashboard)."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

from wiscat.shared.db.links import Executor
from wiscat.shared.generator import generate_record, identifier_for
from wiscat.shared.wcmp2.centres import parse_rules
from wiscat.shared.wcmp2.convert import convert

RULES = parse_rules(
    "de-dwd=prefix:urn:x-wmo:md:int.wmo.wis::;de-dwd=licence:https://www.dwd.de/terms"
)


@dataclass(frozen=True, slots=True)
class Row:
    """One rendered record: its id, revision and the bytes stored; ``sha512`` as a WIS2
    notification's integrity gives it (base64)."""

    wcmp2_id: str
    identifier: str
    revision: str
    content: bytes

    @property
    def sha512(self) -> str:
        return base64.b64encode(hashlib.sha512(self.content).digest()).decode("ascii")


def rendered(n: int, version: int = 0, oai_base_url: str | None = None) -> Row:
    """Generated record ``n`` (``version``) as the real mapping renders it."""
    conversion = convert(generate_record(n, version=version), RULES, oai_base_url=oai_base_url)
    assert conversion.valid, conversion.invalid
    content = conversion.content()
    revision = hashlib.sha512(content).hexdigest()[:16]
    return Row(conversion.record["id"], identifier_for(n), revision, content)


async def store(db: Executor, row: Row, *, wcmp2_id: str | None = None) -> Row:
    """Keep ``row`` as the record's current revision, and as one of its revisions; ``wcmp2_id``
    stores it under another id (a hostile one)."""
    if wcmp2_id is not None:
        row = Row(wcmp2_id, row.identifier, row.revision, row.content)
    await db.execute(
        """insert into wis2_records
               (wcmp2_id, identifier, centre_id, revision, content, source_datestamp)
           values ($1, $2, 'de-dwd', $3, $4, $5)
           on conflict (wcmp2_id) do update
           set revision = excluded.revision, content = excluded.content, deleted = false""",
        row.wcmp2_id,
        row.identifier,
        row.revision,
        row.content,
        datetime.now(UTC),
    )
    await db.execute(
        "insert into wis2_revisions (wcmp2_id, revision, content) values ($1, $2, $3)"
        " on conflict do nothing",
        row.wcmp2_id,
        row.revision,
        row.content,
    )
    return row


async def delete(db: Executor, wcmp2_id: str) -> None:
    """Mark the record deleted, as the renderer does (its revisions stay)."""
    await db.execute(
        "update wis2_records set deleted = true, content = null where wcmp2_id = $1", wcmp2_id
    )
