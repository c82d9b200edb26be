"""UTC datestamps as OAI-PMH 2.0 writes them (specification §3.3).

The protocol knows two granularities, ``YYYY-MM-DD`` and ``YYYY-MM-DDThh:mm:ssZ``. Responses always
use seconds; requests may use either, and from/until must then share one granularity.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import Enum

from wiscat.shared.oaipmh.errors import BadArgument


class Granularity(Enum):
    """The two datestamp granularities of OAI-PMH 2.0 (§3.3), by their spec names."""

    DAY = "YYYY-MM-DD"
    SECONDS = "YYYY-MM-DDThh:mm:ssZ"


_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_SECONDS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def format_datestamp(moment: datetime) -> str:
    """Write ``moment`` as ``YYYY-MM-DDThh:mm:ssZ`` (truncated to the second, in UTC).

    isoformat, not strftime, here and in :func:`format_day`: strftime writes year 1 as "1",
    where the form needs "0001".
    """
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat("T", "seconds") + "Z"


def format_day(moment: datetime) -> str:
    """Write ``moment`` as ``YYYY-MM-DD`` (UTC)."""
    return moment.astimezone(UTC).date().isoformat()


def parse_datestamp(text: str) -> tuple[datetime, Granularity]:
    """Parse a request's from/until value; raise :class:`BadArgument` on anything else.

    Only the two forms of §3.3.1 are legal; a day value means midnight UTC of that day.
    """
    try:
        if _SECONDS.fullmatch(text):
            moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            return moment, Granularity.SECONDS
        if _DAY.fullmatch(text):
            return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC), Granularity.DAY
    except ValueError as exc:
        raise BadArgument(f"{text!r} is not a valid date") from exc
    raise BadArgument(
        f"{text!r} is not a UTC datestamp of the form YYYY-MM-DD or YYYY-MM-DDThh:mm:ssZ"
    )


# The first and last instants a datetime holds, in UTC.
START_OF_TIME = datetime.min.replace(tzinfo=UTC)
END_OF_TIME = datetime.max.replace(tzinfo=UTC)


def shifted(moment: datetime, delta: timedelta) -> datetime:
    """``moment + delta``, held at the first or last instant a datetime can hold (the day after
    ``until=9999-12-31``, a peer's high-water mark in year 1 less an overlap) rather than
    raising OverflowError."""
    try:
        return moment + delta
    except OverflowError:
        return END_OF_TIME if delta > timedelta(0) else START_OF_TIME


def until_upper_bound(moment: datetime, granularity: Granularity) -> datetime:
    """The first instant *after* an inclusive ``until`` value of the given granularity (or the
    last instant of all, after the last day or second a date can hold)."""
    step = timedelta(days=1) if granularity is Granularity.DAY else timedelta(seconds=1)
    return shifted(moment, step)
