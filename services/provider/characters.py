"""Stored records that hold characters XML 1.0 does not allow (RELIABILITY P14).

Every write path refuses them (lxml's parser does, by :func:`wiscat.shared.iso19139.parse_xml` and
the
harvester's page reader), but a row written by direct SQL, or by an older version, may still
hold one; sent as it is stored it would make the whole page not well-formed, and its oai_dc
crosswalk fail. Such a record is served with each of those characters replaced by U+FFFD, or,
when that still leaves it not well-formed (the character sat inside a tag), as its header alone;
either way counted in ``wiscat_oai_records_with_invalid_characters`` and logged with its
identifier. The database flags such a row as it is written (``xml_mend``, migration 0009's
trigger), so the provider looks only at the flagged rows: checking every record served cost
about 8 µs a record, a fifth of the provider's CPU.

A record whose identifier holds such a character is neither listed nor served: listed with
U+FFFD, it would name no record GetRecord could find. A setSpec that breaks OAI-PMH's pattern
(§2.7.1, OAI-PMH.xsd) is left out of ListSets and of every header. Both are counted and logged.
No write path makes either; only SQL does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from wiscat.provider.metrics import ProviderMetrics
from wiscat.shared.db.records import StoredRecord
from wiscat.shared.iso19139 import RecordError, parse_xml
from wiscat.shared.oaipmh import render
from wiscat.shared.oaipmh.arguments import SET_SPEC
from wiscat.shared.text import NOT_XML

log = logging.getLogger("wiscat.provider")


def servable(stored: StoredRecord, metrics: ProviderMetrics) -> StoredRecord:
    """``stored``, or, when its document holds characters XML 1.0 does not allow (the row
    flagged ``xml_mend``), the record as it is served instead: with U+FFFD in their place, or
    without its document."""
    if stored.xml is None or not stored.xml_mend:
        return stored
    mended, count, first = render.replace_invalid_characters(stored.xml)
    if first is None:  # flagged, but clean all the same
        return stored
    code = f"U+{ord(first):04X}"
    if count == 1:
        what, place = f"1 character XML 1.0 does not allow ({code})", "its place"
    else:
        what = f"{count} characters XML 1.0 does not allow (the first {code})"
        place = "their place"
    what = f"record {stored.identifier!r} holds {what}"
    try:
        parse_xml(mended)
    except RecordError as exc:
        metrics.records_with_invalid_characters.labels("withheld").inc()
        log.error(
            "%s, and is not well-formed with U+FFFD in %s either (%s): served without its metadata",
            what,
            place,
            exc,
        )
        return stored._replace(xml=None)
    metrics.records_with_invalid_characters.labels("replaced").inc()
    log.warning("%s: served with U+FFFD in %s", what, place)
    return stored._replace(xml=mended, xml_ids=None)  # searched again as it is served


def servable_rows(rows: list[StoredRecord], metrics: ProviderMetrics) -> None:
    """Make each of ``rows`` :func:`servable`, in place."""
    for index, stored in enumerate(rows):
        if stored.xml_mend:
            rows[index] = servable(stored, metrics)


def listable(rows: Sequence[StoredRecord], metrics: ProviderMetrics) -> Sequence[StoredRecord]:
    """``rows`` less those whose identifier holds a character XML 1.0 does not allow."""
    if not any(NOT_XML.search(stored.identifier) for stored in rows):
        return rows
    kept = []
    for stored in rows:
        if NOT_XML.search(stored.identifier):
            metrics.records_with_invalid_characters.labels("unlisted").inc()
            log.error(
                "record %r has an identifier holding a character XML 1.0 does not allow: "
                "neither listed nor served",
                stored.identifier,
            )
        else:
            kept.append(stored)
    return kept


def nameable_sets(specs: Iterable[str], metrics: ProviderMetrics, where: str) -> list[str]:
    """``specs`` less those that break OAI-PMH's setSpec pattern; ``where``: ListSets or
    header, the metric's label."""
    kept = []
    for spec in specs:
        if SET_SPEC.fullmatch(spec):
            kept.append(spec)
        else:
            metrics.set_specs_unlisted.labels(where).inc()
            log.error("set %r breaks OAI-PMH's setSpec pattern: left out of the %s", spec, where)
    return kept
