"""A change-hint stream holds at most one hint it has not sent: a client that never reads
costs bounded memory (docs/links.md#change-hints)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from wiscat.provider.hints import MAX_EVENT_BYTES, Stream, change_event

T0 = datetime(2026, 11, 28, 14, 0, 5, 999999, tzinfo=UTC)


def test_a_stream_never_read_coalesces_its_hints() -> None:
    stream = Stream(frozenset({"A", "B", "C:D"}), "127.0.0.1")
    for n in range(10_000):
        stream.offer(frozenset({"A" if n % 2 else "B:x", "Z"}), T0 + timedelta(seconds=n))
    assert stream.sets == {"A", "B"}  # of those asked for, a subset's change its set's
    chunk, kinds = stream.take()
    assert kinds == ["change"]
    assert chunk.count(b"event: change") == 1
    data = json.loads(chunk.split(b"data: ")[1])
    assert data == {"sets": ["A", "B"], "until": "2026-11-28T16:46:44Z"}
    assert stream.take() == (b"", [])


def test_a_change_of_no_set_asked_for_is_not_offered() -> None:
    stream = Stream(frozenset({"A:B"}), "c")
    assert not stream.offer(frozenset({"A", "WIS-CATALOGUE"}), T0)
    assert stream.take() == (b"", [])


def test_sets_past_an_event_s_room_become_any() -> None:
    stream = Stream(None, "c")
    for n in range(2000):
        stream.offer(frozenset({f"WIS-GISC-CENTRE-{n:05d}"}), T0)
    assert stream.any_set and not stream.sets  # bounded, whatever changed
    chunk, _ = stream.take()
    assert len(chunk) <= MAX_EVENT_BYTES
    assert json.loads(chunk.split(b"data: ")[1])["sets"] is None


def test_a_catch_up_and_a_change_are_each_sent_once() -> None:
    stream = Stream(None, "c")
    for _ in range(100):
        stream.tell_catch_up("reconnected")
        stream.offer(frozenset({"A"}), T0)
    chunk, kinds = stream.take()
    assert kinds == ["catch-up", "change"]
    assert chunk == (
        b'event: catch-up\ndata: {"reason": "reconnected"}\n\n'
        + b'id: 2026-11-28T14:00:05Z\nevent: change\ndata: {"sets": ["A"], '
        b'"until": "2026-11-28T14:00:05Z"}\n\n'
    )


def test_an_event_is_at_most_512_bytes() -> None:
    sets = [f"S{n:03d}" for n in range(200)]
    event = change_event(sets, T0)
    assert len(event) <= MAX_EVENT_BYTES
    assert b'"sets": null' in event
