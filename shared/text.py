"""Text from outside (a peer's message, a record's value, an operator's input) as wiscat quotes it
in logs, stored reasons and error messages: never longer than the place it goes to."""

from __future__ import annotations


def clipped(text: str, limit: int) -> str:
    """``text``, or, when it is longer than ``limit``, its beginning and "..." in ``limit``
    characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
