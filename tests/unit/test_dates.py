"""Datestamps at the ends of the range a date can hold (§3.3.1: four-digit years)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from wiscat.shared.oaipmh.dates import (
    END_OF_TIME,
    START_OF_TIME,
    Granularity,
    format_datestamp,
    format_day,
    parse_datestamp,
    shifted,
    until_upper_bound,
)
from wiscat.shared.oaipmh.errors import BadArgument


def test_years_before_1000_keep_four_digits() -> None:
    # a peer's earliestDatestamp of 0001-01-01 becomes the from= of a window slice
    assert format_datestamp(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00Z"
    assert format_day(datetime(999, 12, 31, 23, 0, tzinfo=UTC)) == "0999-12-31"
    for text in ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"):
        assert format_datestamp(parse_datestamp(text)[0]) == text


def test_formats_are_utc_and_truncated_to_the_second() -> None:
    moment = datetime(2024, 3, 1, 0, 30, 5, 999_999, tzinfo=timezone(timedelta(hours=2)))
    assert format_datestamp(moment) == "2024-02-29T22:30:05Z"
    assert format_day(moment) == "2024-02-29"


def test_shifts_past_the_ends_of_time_stop_there() -> None:
    last_day, _ = parse_datestamp("9999-12-31")
    assert until_upper_bound(last_day, Granularity.DAY) == END_OF_TIME
    last_second, _ = parse_datestamp("9999-12-31T23:59:59Z")
    assert until_upper_bound(last_second, Granularity.SECONDS) == END_OF_TIME
    first, _ = parse_datestamp("0001-01-01T00:00:00Z")
    assert shifted(first, -timedelta(days=1)) == START_OF_TIME
    assert shifted(first, timedelta(days=1)) == datetime(1, 1, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        "\uff12\uff10\uff12\uff16-11-25",  # full-width digits
        "2026-11-25T14:23:2\u0662Z",  # an Arabic-Indic digit
        "2026-11-2\u0665",
    ],
)
def test_digits_are_ascii_digits(text: str) -> None:
    # Python's \d and strptime take any Unicode digit; §3.3.1's forms (and OAI-PMH.xsd's
    # UTCdatetimeType, which the request element echoing them must satisfy) do not
    with pytest.raises(BadArgument):
        parse_datestamp(text)
