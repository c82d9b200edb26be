"""What a harvest run can fail with, besides the OAI-PMH errors a peer sends.

Exception tree::

    HarvestError                 a run failed because of the peer or the network; ``reason`` is
     |                           short, says what happened, and holds no secret
     +-- PeerHTTPError           an HTTP status that is neither 200 nor retried to success
     +-- PeerTimeout             no answer within the timeouts, after the retries
     +-- PeerUnreachable         connection refused or reset, after the retries
     +-- ResponseTooLarge        a page larger than the cap once decompressed (gzip bombs)
     +-- RepeatedResumptionToken the peer sent a token it had sent before in this list
     +-- TooManyEmptyPages       too many pages in a row with a token and no item
     +-- TooManyRequests         the list needed more requests than allowed
     +-- BadResponse             not OAI-PMH, or not well-formed (wraps pages.ResponseError)
     |    +-- MalformedRecord     a GetRecord answer that is not well-formed (its record's fault)
     +-- LinkToItself            the peer's Identify names this node's own base URL
     +-- LinkRemoved             the link was removed while it ran (its runs went with it)
     +-- RunTakenOver            another worker took the link over while this run was held up
     +-- PagesLost               the database lost pages the run wrote (a failover)

Its own module, without aiohttp, so that the harvester's page workers can raise them.
"""

from __future__ import annotations

from wiscat.shared.oaipmh.errors import OAIError


class HarvestError(Exception):
    """A run failed because of the peer or the network."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    @property
    def kind(self) -> str:
        """The failure's kind, as runs and metrics tell it."""
        return type(self).__name__


class PeerHTTPError(HarvestError):
    def __init__(self, status: int, url: str, detail: str = "") -> None:
        super().__init__(f"HTTP {status} from {url}{detail}")
        self.status = status
        self.url = url
        self.detail = detail

    def __reduce__(self) -> tuple[type[PeerHTTPError], tuple[int, str, str]]:
        return type(self), (self.status, self.url, self.detail)


class PeerTimeout(HarvestError):
    pass


class PeerUnreachable(HarvestError):
    pass


class ResponseTooLarge(HarvestError):
    pass


class RepeatedResumptionToken(HarvestError):
    pass


class TooManyEmptyPages(HarvestError):
    pass


class TooManyRequests(HarvestError):
    pass


class BadResponse(HarvestError):
    pass


class BadIdentify(BadResponse):
    """An Identify answer that cannot be used: the peer's endpoint is at fault, not a record.
    Its kind, in runs and metrics, is that of any unusable answer."""

    @property
    def kind(self) -> str:
        return "BadResponse"


class LinkToItself(HarvestError):
    pass


class MalformedRecord(BadResponse):
    """A GetRecord answer that is not well-formed XML, kept as received (``body``). The fault
    is its record's, as a rule (a character XML does not allow, nesting too deep to parse), not
    its peer's: the list that named the record came from the same peer, well-formed."""

    def __init__(self, reason: str, body: bytes) -> None:
        super().__init__(reason)
        self.body = body

    def __reduce__(self) -> tuple[type[MalformedRecord], tuple[str, bytes]]:
        return type(self), (self.reason, self.body)


class LinkRemoved(HarvestError):
    """The run's link was removed while it ran: the run stops at its next page, unwritten."""


class PagesLost(HarvestError):
    """The database no longer holds pages this run wrote (a failover to a standby that had not
    received them, under asynchronous replication): the run stops at its next write, unwritten,
    and the high-water mark stays where the database has it."""


class RunTakenOver(HarvestError):
    """Another worker leased the link and closed this run as abandoned (this worker's lease
    ran out unrenewed: the process was paused, or cut off from the database, for longer than a
    lease): the run stops at its next page, unwritten, so the link never runs twice at once."""


def reason_of(exc: Exception) -> str:
    """What went wrong, in one line: a failed run's reason, an OAI-PMH error with its code, or
    what a response error says."""
    if isinstance(exc, HarvestError):
        return exc.reason
    if isinstance(exc, OAIError):
        return f"OAI-PMH error {exc.code}: {exc}"
    return str(exc)
