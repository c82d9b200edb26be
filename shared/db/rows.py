"""What the record store's writes take, as plain values: no asyncpg here.

Apart from :mod:`wiscat.shared.db.records` so that a harvester's page workers, which make these, do
not import the database driver.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple


class IncomingRecord(NamedTuple):
    """A record ready to store: identifier, gmd:dateStamp, canonical hash and serialized XML.

    ``xml`` is lxml's serialization of a parsed record
    (:func:`wiscat.shared.iso19139.parse_record`),
    so it holds no character XML 1.0 does not allow: the store's writes say so to the database,
    which then does not check it (migration 0009).

    A named tuple, not a dataclass: a harvester's page workers send pages of these back to
    the harvester, and a tuple unpickles about four times faster than a frozen dataclass.
    """

    identifier: str
    md_datestamp: datetime | None
    content_hash: bytes
    xml: str
