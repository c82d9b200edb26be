"""The event-stream reader of change hints: events split anywhere, CRLF, comments, ids, the cap,
and what a change event's data must hold."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from wiscat.harvester.events import Change, EventReader, EventTooLong, read_change

STREAM = (
    b"retry: 2000\n\n: heartbeat\n\n"
    b'id: 2026-11-28T14:00:05Z\r\nevent: change\r\ndata: {"sets": ["A"], '
    b'"until": "2026-11-28T14:00:05Z"}\r\n\r\n'
    b'event: catch-up\ndata: {"reason": "restart"}\n\n'
)


@pytest.mark.parametrize("size", [1, 2, 7, 64, len(STREAM)])
def test_events_are_read_however_the_stream_is_cut(size: int) -> None:
    reader = EventReader(4096)
    events = []
    for start in range(0, len(STREAM), size):
        events += reader.feed(STREAM[start : start + size])
    assert [(e.kind, e.id) for e in events] == [
        ("change", "2026-11-28T14:00:05Z"),
        ("catch-up", "2026-11-28T14:00:05Z"),  # the last id stays the stream's
    ]
    assert read_change(events[0].data) == Change(
        frozenset({"A"}), datetime(2026, 11, 28, 14, 0, 5, tzinfo=UTC)
    )
    assert reader.retry == 2000 and not reader.in_event


def test_an_event_over_the_cap_is_refused_even_before_its_line_ends() -> None:
    reader = EventReader(100)
    reader.feed(b"event: change\n")
    with pytest.raises(EventTooLong, match="longer than 100 bytes"):
        reader.feed(b"data: " + b"x" * 95)
    reader = EventReader(100)
    for _ in range(20):  # many short events: each within the cap
        reader.feed(b'event: change\ndata: {"sets": null}\n\n')


def test_a_stream_cut_mid_event_is_seen() -> None:
    reader = EventReader(4096)
    assert reader.feed(b'id: x\nevent: change\ndata: {"se') == []
    assert reader.in_event


@pytest.mark.parametrize(
    "data",
    [
        "not json",
        "{}",
        '{"sets": "A", "until": "2026-11-28T14:00:05Z"}',
        '{"sets": [1], "until": "2026-11-28T14:00:05Z"}',
        '{"sets": null, "until": "yesterday"}',
        '{"sets": null}',
    ],
)
def test_a_change_without_sets_and_until_is_none(data: str) -> None:
    assert read_change(data) is None


def test_null_sets_mean_any_set() -> None:
    change = read_change('{"sets": null, "until": "2026-11-28T14:00:05Z"}')
    assert change is not None and change.sets is None
