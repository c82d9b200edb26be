"""Text from outside (a peer's message, a record's value, an operator's input) as wiscat quotes it
in logs, stored reasons and error messages: never longer than the place it goes to; and which of
its characters no XML document can carry."""

from __future__ import annotations

import re

# XML 1.0 §2.2: characters outside these ranges cannot appear in a document at all. The renderer
# replaces them; settings that Identify echoes refuse them.
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def clipped(text: str, limit: int) -> str:
    """``text``, or, when it is longer than ``limit``, its beginning and "..." in ``limit``
    characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
