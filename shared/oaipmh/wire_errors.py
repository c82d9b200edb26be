"""Why a harvest from a peer failed, apart from the OAI-PMH error conditions of :mod:`errors`.

Exception tree::

    HarvestError                    the peer's answer or behaviour ended the run
     +-- NotOAIResponse             not an OAI-PMH 2.0 document: HTML, JSON, wrong root namespace
     +-- MalformedResponse          an OAI-PMH document that is not well-formed or not usable:
     |                              truncated, invalid characters, a DTD, a missing responseDate
     +-- ResponseTooLarge           the decompressed body passed the configured cap
     +-- PeerTimeout                connect or read timeout, after the allowed retries
     +-- PeerUnreachable            connection refused, reset or closed, after the allowed retries
     +-- PeerHTTPError              an HTTP status that is neither 2xx nor an OAI-PMH error document
     +-- RepeatedResumptionToken    the peer sent a resumptionToken already used in this list
     +-- TooManyEmptyPages          too many pages in a row with no item but a resumptionToken
     +-- TooManyRequests            the list needed more requests than the configured maximum

OAI-PMH error conditions (``<error code="...">``) are raised as the classes of
:mod:`shared.oaipmh.errors`, not as ``HarvestError``: they are the peer's well-formed answer.

Every ``HarvestError`` carries a ``reason``: one short line, safe to store in the database and to
show to an operator (it never holds credentials or a whole response body).
"""

from __future__ import annotations

REASON_LIMIT = 300


class HarvestError(Exception):
    """The peer's answer or behaviour ended the run; ``reason`` says why in one short line."""

    def __init__(self, reason: str) -> None:
        reason = " ".join(reason.split())
        if len(reason) > REASON_LIMIT:
            reason = reason[: REASON_LIMIT - 3] + "..."
        super().__init__(reason)
        self.reason = reason


class NotOAIResponse(HarvestError):
    """The body is not an OAI-PMH 2.0 response (an HTML page, another format, another root)."""


class MalformedResponse(HarvestError):
    """The body claims to be OAI-PMH but is not well-formed XML or lacks what the protocol
    requires; the message names lxml's finding and its line."""


class ResponseTooLarge(HarvestError):
    """The decompressed body of one response passed ``max_decompressed_bytes``."""


class PeerTimeout(HarvestError):
    """The peer did not connect or answer within the configured timeouts."""


class PeerUnreachable(HarvestError):
    """The connection to the peer failed or broke."""


class PeerHTTPError(HarvestError):
    """The peer answered with an HTTP status the harvester does not accept."""

    def __init__(self, status: int, reason: str = "") -> None:
        super().__init__(reason or f"peer answered HTTP {status}")
        self.status = status


class RepeatedResumptionToken(HarvestError):
    """The peer sent a resumptionToken it had already sent in this list (a paging loop)."""


class TooManyEmptyPages(HarvestError):
    """The peer sent too many pages in a row with no header or record but a resumptionToken."""


class TooManyRequests(HarvestError):
    """One list needed more requests than ``max_requests_per_list``."""
