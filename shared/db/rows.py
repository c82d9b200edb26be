"""What the record store's writes take, as plain values: no asyncpg here.

Apart from :mod:`shared.db.records` so that a harvester's page workers, which make these, do
not import the database driver.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple


class IncomingRecord(NamedTuple):
    """A record ready to store: identifier, gmd:dateStamp, canonical hash and serialized XML.

    A named tuple, not a dataclass: a harvester's page workers send pages of these back to
    the harvester, and a tuple unpickles about four times faster than a frozen dataclass.
    """

    identifier: str
    md_datestamp: datetime | None
    content_hash: bytes
    xml: str
