"""The pure part of a run: which mode it runs in, which slice of the rolling window it reads,
the high-water mark its list earns, and whose records it may not change. No I/O here."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from wiscat.shared.model import Link, RunMode
from wiscat.shared.oaipmh.pages import IdentifyInfo
from wiscat.shared.settings import Settings


def choose_mode(link: Link, *, now: datetime, requested: str | None, full: bool) -> RunMode:
    """Full when asked, when the link has no high-water mark yet, or when its full re-harvest
    is due; incremental otherwise."""
    if full or requested == "full" or link.high_water_mark is None or link.last_full_at is None:
        return "full"
    if now - link.last_full_at >= link.full_every:
        return "full"
    return "incremental"


def window_slice(
    link: Link, earliest: datetime, *, now: datetime
) -> tuple[datetime, datetime, int] | None:
    """The from/until slice the rolling windowed re-harvest reads this time, and the next index.

    The peer's range, from its earliestDatestamp to our high-water mark, is cut into
    ``window_slices`` equal slices; one run reads one slice, cycling ("a re-harvester
    works for the first year of the archive on Monday, the second on Tuesday").
    """
    if link.window_slices <= 0 or link.high_water_mark is None:
        return None
    end = min(link.high_water_mark, now)
    if end < earliest:
        return None
    span = (end - earliest) / link.window_slices
    index = link.window_index % link.window_slices
    start = earliest + span * index
    stop = end if index == link.window_slices - 1 else start + span
    return start, stop, (index + 1) % link.window_slices


def protected_set(link: Link, own_set: str) -> str | None:
    # Invariant 6: only writes into the own set (local ingest, area and recovery links) may change
    # a record of the own set; every other link is refused such records.
    return None if link.local_set == own_set else own_set


def high_water_mark(
    greatest: datetime | None, first_response: datetime | None, mode: RunMode
) -> datetime | None:
    """The greatest datestamp of the list, never later than its first responseDate."""
    if mode == "window" or greatest is None:
        return None
    if first_response is not None and greatest > first_response:
        return first_response
    return greatest


def is_this_node(settings: Settings, url: str, identify: IdentifyInfo) -> bool:
    """Whether the peer at ``url`` is this node. Its Identify's baseURL is compared only with
    a BASE_URL set for this node: a derived one (``http://127.0.0.1:8080/oai``) is also what
    any node left unconfigured announces, wherever it runs."""
    if url == settings.base_url:
        return True
    return settings.base_url_set and identify.base_url == settings.base_url


def nothing_but_quarantined(counts: Counter[str]) -> bool:
    kept = ("added", "updated", "unchanged", "refused")
    return counts["quarantined"] > 0 and not any(counts[name] for name in kept)
