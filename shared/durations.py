"""Durations as operators write them: ``90s``, ``15m``, ``1h``, ``7d``, ``2w`` or ``1h30m``."""

from __future__ import annotations

import re
from datetime import timedelta

_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# far beyond any interval a node uses, far inside what a date can be moved by
LONGEST = timedelta(days=3650)


def parse_duration(text: str) -> timedelta:
    """Parse ``text``; raise ValueError with an example on anything else."""
    compact = text.strip().lower().replace(" ", "")
    if not compact or _PART.sub("", compact):
        raise ValueError(f"{text!r} is not a duration (examples: 90s, 15m, 1h, 7d, 1h30m)")
    seconds = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(compact))
    if seconds > LONGEST.total_seconds():
        raise ValueError(f"{text!r} is longer than {LONGEST.days} days")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest exact form, e.g. ``1h30m``; ``0s`` for zero."""
    seconds = int(value.total_seconds())
    if seconds == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)
