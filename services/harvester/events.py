"""Server-sent events (the WHATWG HTML "event stream" format), read from chunks as they come,
each event capped: what a peer's stream of change hints is made of (:mod:`wiscat.harvester.hints`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from wiscat.shared.oaipmh.pages import MalformedResponse, parse_oai_date


class EventTooLong(Exception):
    """An event, or a line of one, longer than the cap: the stream is closed."""


@dataclass(frozen=True)
class Event:
    kind: str  # the event field; "message" when it has none
    data: str
    id: str | None  # the last event id the stream set, as of this event


@dataclass(frozen=True)
class Change:
    """A change event's data: the sets that changed (None: any set) and the datestamp bound up
    to which the change is listable."""

    sets: frozenset[str] | None
    until: datetime


def read_change(data: str) -> Change | None:
    """The change an event's data names; None when it is not one (a malformed event is taken
    as a catch-up by its reader: a hint is a doorbell, and ringing once too often costs one
    incremental run)."""
    try:
        value = json.loads(data)
        sets = value["sets"]
        if sets is not None and not (
            isinstance(sets, list) and all(isinstance(s, str) for s in sets)
        ):
            return None
        until = parse_oai_date(value["until"])
    except (ValueError, TypeError, KeyError, MalformedResponse):
        return None
    return Change(None if sets is None else frozenset(sets), until)


class EventReader:
    """Events out of the chunks of a stream, as they arrive. An event of more than ``cap`` bytes
    (its lines and their ends, comments included) raises :class:`EventTooLong`: a peer cannot
    make the harvester hold more than that."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.partial = b""  # the line begun, not yet ended
        self.size = 0  # bytes of the event being read, its ended lines
        self.kind = ""
        self.data: list[str] = []
        self.last_id: str | None = None
        self.retry: int | None = None  # milliseconds the peer asks to wait before reconnecting

    @property
    def in_event(self) -> bool:
        """Whether an event has begun and not ended (a stream cut there lost it)."""
        return bool(self.partial or self.size)

    def feed(self, chunk: bytes) -> list[Event]:
        events: list[Event] = []
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        for raw in lines:
            self.size += len(raw) + 1
            if self.size > self.cap:
                raise EventTooLong(f"an event longer than {self.cap} bytes")
            event = self._line(raw.removesuffix(b"\r").decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
        if self.size + len(self.partial) > self.cap:
            raise EventTooLong(f"an event longer than {self.cap} bytes")
        return events

    def _line(self, line: str) -> Event | None:
        if not line:  # the end of an event
            event = None
            if self.data:
                event = Event(self.kind or "message", "\n".join(self.data), self.last_id)
            self.kind, self.data, self.size = "", [], 0
            return event
        if line.startswith(":"):  # a comment: a heartbeat
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self.kind = value
        elif name == "data":
            self.data.append(value)
        elif name == "id" and "\0" not in value:
            self.last_id = value or None
        elif name == "retry" and value.isdigit():
            self.retry = int(value)
        return None
