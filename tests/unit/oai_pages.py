"""OAI-PMH pages for the page reader's tests: recorded ones and ones built to order."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent.parent / "data" / "oai"


GMD = "{http://www.isotc211.org/2005/gmd}"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()
