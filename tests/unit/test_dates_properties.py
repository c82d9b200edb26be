"""F01: properties of the datestamps OAI-PMH 2.0 writes and reads (§3.3), found by Hypothesis.

Written datestamps read back as the instant they were made from, in the granularity's form;
the strict parser takes the two forms of §3.3.1 and nothing else, however close: the forms
``datetime.fromisoformat`` (or ``strptime`` with the very pattern, case-blind and reading any
Unicode digit) would take are each refused with the exact badArgument.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from wiscat.shared.oaipmh.arguments import parse_request
from wiscat.shared.oaipmh.dates import Granularity, format_datestamp, format_day, parse_datestamp
from wiscat.shared.oaipmh.errors import BadArgument

# §3.3.1's two forms, ASCII digits only (OAI-PMH.xsd's UTCdatetimeType)
SECONDS_FORM = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z", re.ASCII)
DAY_FORM = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)
FORMATS = {"iso19139"}

#: UTC instants at second precision, over every year a datestamp can write
utc_seconds = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)
).map(lambda moment: moment.replace(microsecond=0, tzinfo=UTC))

#: fixed offsets other than UTC's, to the minute, as a peer or a client may give them
offsets = st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).filter(bool)


def form_error(text: str) -> str:
    return f"{text!r} is not a UTC datestamp of the form YYYY-MM-DD or YYYY-MM-DDThh:mm:ssZ"


def refused(text: str) -> str:
    """The message of the BadArgument ``parse_datestamp(text)`` raises (fails if none)."""
    with pytest.raises(BadArgument) as raised:
        parse_datestamp(text)
    assert raised.value.code == "badArgument"
    return raised.value.message


def request_refused(**arguments: str) -> str:
    """The message of the BadArgument a ListRecords request with ``arguments`` gets."""
    pairs = [("verb", "ListRecords"), ("metadataPrefix", "iso19139"), *arguments.items()]
    with pytest.raises(BadArgument) as raised:
        parse_request(pairs, formats=FORMATS)
    return raised.value.message


@given(utc_seconds)
def test_f01_a_written_datestamp_reads_back_as_the_same_instant(moment: datetime) -> None:
    """F01: ``parse(format(d)) == d`` for UTC datetimes at second precision, and what is
    written has the seconds granularity's form."""
    text = format_datestamp(moment)
    assert SECONDS_FORM.fullmatch(text), text
    assert parse_datestamp(text) == (moment, Granularity.SECONDS)


@given(utc_seconds)
def test_f01_a_written_day_reads_back_as_its_midnight(moment: datetime) -> None:
    """F01: a day written is that day's form, and reads back as midnight UTC of that day."""
    text = format_day(moment)
    assert DAY_FORM.fullmatch(text), text
    midnight = moment.replace(hour=0, minute=0, second=0)
    assert parse_datestamp(text) == (midnight, Granularity.DAY)


@given(st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)), offsets)
def test_f01_an_instant_in_any_zone_is_written_in_utc_to_the_second(
    local: datetime, minutes: int
) -> None:
    """F01: an aware datetime in another zone, with microseconds, is written as its UTC
    instant truncated to the second."""
    moment = local.replace(tzinfo=timezone(timedelta(minutes=minutes)))
    text = format_datestamp(moment)
    assert SECONDS_FORM.fullmatch(text), text
    expected = moment.astimezone(UTC).replace(microsecond=0)
    assert parse_datestamp(text) == (expected, Granularity.SECONDS)


@given(utc_seconds, utc_seconds)
def test_f01_request_bounds_read_as_written_and_in_order(first: datetime, second: datetime) -> None:
    """F01: from/until of a request, written by :func:`format_datestamp`, are read as those
    instants; from later than until, or the two granularities mixed, is a badArgument."""
    low, high = sorted((first, second))
    request = parse_request(
        [
            ("verb", "ListRecords"),
            ("metadataPrefix", "iso19139"),
            ("from", format_datestamp(low)),
            ("until", format_datestamp(high)),
        ],
        formats=FORMATS,
    )
    assert (request.from_, request.until, request.until_granularity) == (
        low,
        high,
        Granularity.SECONDS,
    )
    if low != high:
        assert request_refused(
            **{"from": format_datestamp(high), "until": format_datestamp(low)}
        ) == ("from is later than until (§2.7.1)")
    assert request_refused(**{"from": format_day(low), "until": format_datestamp(high)}) == (
        "from and until must have the same granularity (§3.3.1)"
    )


# Near misses: (what they are, a text made from a UTC instant, a lenient reader that takes it).
# Each reader is there to show the form is one a careless parser would let through.
def from_iso(text: str) -> datetime:
    return datetime.fromisoformat(text)


def strptime_seconds(text: str) -> datetime:
    # its literals are case-blind: why parse_datestamp checks the form first
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")


def unicode_pattern(text: str) -> re.Match[str] | None:
    # Python's \d is any Unicode digit, which strptime's %Y (and int()) read too
    return re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", text)


def day(moment: datetime) -> str:
    # not strftime's %Y, which writes the year 999 as "999"
    return moment.date().isoformat()


def offset_form(moment: datetime, minutes: int) -> str:
    sign = "+" if minutes >= 0 else "-"
    hours, rest = divmod(abs(minutes), 60)
    return f"{day(moment)}T{moment:%H:%M:%S}{sign}{hours:02d}:{rest:02d}"


def iso_week_form(moment: datetime) -> str:
    year, week, day = moment.isocalendar()
    return f"{year:04d}-W{week:02d}-{day}"


near_misses: st.SearchStrategy[tuple[str, str, Callable[[str], object]]] = st.one_of(
    st.tuples(
        st.just("an offset instead of Z"),
        st.builds(offset_form, utc_seconds, offsets | st.just(0)),
        st.just(from_iso),
    ),
    st.tuples(
        st.just("a fraction of a second"),
        st.builds(
            lambda moment, digits: f"{day(moment)}T{moment:%H:%M:%S}.{digits}Z",
            utc_seconds,
            st.from_regex(r"[0-9]{1,6}", fullmatch=True),
        ),
        st.just(from_iso),
    ),
    st.tuples(
        st.just("a lower-case z"),
        st.builds(lambda moment: f"{day(moment)}T{moment:%H:%M:%S}z", utc_seconds),
        st.just(strptime_seconds),
    ),
    st.tuples(
        st.just("a separator other than T"),
        st.builds(
            lambda moment, separator: f"{day(moment)}{separator}{moment:%H:%M:%S}Z",
            utc_seconds,
            st.sampled_from([" ", "t", "_", "/"]),
        ),
        st.just(from_iso),
    ),
    st.tuples(
        st.just("no time zone"),
        st.builds(lambda moment: f"{day(moment)}T{moment:%H:%M:%S}", utc_seconds),
        st.just(from_iso),
    ),
    st.tuples(
        st.just("minutes or hours only"),
        st.builds(
            lambda moment, pattern: f"{day(moment)}T{moment.strftime(pattern)}Z",
            utc_seconds,
            st.sampled_from(["%H", "%H:%M", "%H%M"]),
        ),
        st.just(from_iso),
    ),
    st.tuples(
        st.just("the basic format"),
        st.builds(
            lambda moment, pattern: f"{moment.year:04d}{moment.strftime(pattern)}",
            utc_seconds,
            st.sampled_from(["%m%d", "%m%dT%H%M%SZ"]),
        ),
        st.just(from_iso),
    ),
    st.tuples(
        st.just("a week date"),
        st.builds(
            iso_week_form, utc_seconds.filter(lambda moment: moment.isocalendar()[0] >= 1000)
        ),
        st.just(from_iso),
    ),
    st.tuples(
        st.just("a digit that is not ASCII"),
        st.builds(
            lambda moment, index, digit: unicode_digit(format_datestamp(moment), index, digit),
            utc_seconds,
            st.integers(min_value=0, max_value=13),
            st.characters(categories=["Nd"], min_codepoint=0x80),
        ),
        st.just(unicode_pattern),
    ),
)


def unicode_digit(text: str, index: int, digit: str) -> str:
    """``text`` with its ``index``-th digit written with the digit of another script (or of
    full width) that has the same value."""
    positions = [i for i, c in enumerate(text) if c.isdigit()]
    at = positions[index % len(positions)]
    value = int(text[at])
    zero = ord(digit) - unicodedata.digit(digit)
    same = chr(zero + value)
    assume(unicodedata.digit(same, None) == value)
    return text[:at] + same + text[at + 1 :]


@given(near_misses)
def test_f01_the_forms_lenient_parsers_take_are_a_bad_argument(
    miss: tuple[str, str, Callable[[str], object]],
) -> None:
    """F01: offsets, fractions, a lower-case z, other separators, no zone, hours or minutes
    only, the basic format, week dates and non-ASCII digits: a lenient reader takes each, and
    the strict parser, in a request's from or until too, refuses it with the exact error."""
    _, text, lenient = miss
    assert lenient(text)  # the form is a real near miss
    assert refused(text) == form_error(text)
    assert request_refused(**{"from": text}) == form_error(text)
    assert request_refused(**{"until": text}) == form_error(text)


@given(
    st.integers(0, 9999),
    st.integers(0, 99),
    st.integers(0, 99),
    st.integers(0, 99),
    st.integers(0, 99),
    st.integers(0, 99),
)
def test_f01_a_datestamp_of_the_right_form_is_read_if_and_only_if_it_is_a_date(
    year: int, month: int, day: int, hour: int, minute: int, second: int
) -> None:
    """F01: a text of the right form but no date (year 0, month 13, 30 February, 24:00:00, a
    leap second) is a badArgument saying so; every real one is read as written."""
    text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        assert refused(text) == f"{text!r} is not a valid date"
    else:
        assert parse_datestamp(text) == (moment, Granularity.SECONDS)


@st.composite
def edited_datestamps(draw: st.DrawFn) -> str:
    """A written datestamp or day with one character changed, inserted or deleted (the new
    character any at all but a surrogate)."""
    moment = draw(utc_seconds)
    text = draw(st.sampled_from([format_datestamp(moment), format_day(moment)]))
    at = draw(st.integers(min_value=0, max_value=len(text)))
    character = draw(st.characters(exclude_categories=["Cs"]))
    edit = draw(st.sampled_from(["replace", "insert", "delete"]))
    if edit == "insert":
        return text[:at] + character + text[at:]
    if edit == "delete":
        return text[:at] + text[at + 1 :]
    return text[:at] + character + text[at + 1 :]


@given(edited_datestamps())
def test_f01_whatever_is_read_is_in_its_one_written_form(text: str) -> None:
    """F01: a near miss by one character is either refused with a badArgument or is itself a
    datestamp in the one form that would write it (no other text is read)."""
    try:
        moment, granularity = parse_datestamp(text)
    except BadArgument as exc:
        assert exc.message in (form_error(text), f"{text!r} is not a valid date")
    else:
        written = format_day if granularity is Granularity.DAY else format_datestamp
        assert written(moment) == text
