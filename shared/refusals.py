"""Why a harvest refused a record: a closed vocabulary of reason codes (stored with each refused
record and counted on its run), each with a short label for run summaries and the sentence an
operator reads. The decision itself is :func:`wiscat.shared.db.records.upsert_records`'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

Reason = Literal["own_set", "older", "deleted", "conflict"]

#: Each refusing outcome of ``upsert_records``, by its reason code.
OUTCOMES: Final[dict[str, Reason]] = {
    "refused_protected": "own_set",
    "refused_older": "older",
    "refused_deleted": "deleted",
    "refused_conflict": "conflict",
}

#: The reason codes, in the order summaries list them, with their short labels.
LABELS: Final[dict[Reason, str]] = {
    "own_set": "own set",
    "older": "older",
    "deleted": "deleted here",
    "conflict": "conflict",
}


def explain(reason: str, own_set: str) -> str:
    """The sentence that says why a record was refused (``reason`` a code of :data:`LABELS`)."""
    if reason == "own_set":
        return f"it belongs to the own set {own_set}, which no link may change"
    if reason == "older":
        return (
            "its gmd:dateStamp is older than the stored copy's (or it has none and the stored "
            "copy has one)"
        )
    if reason == "deleted":
        return "it was deleted here, and its gmd:dateStamp is not newer than the deleted copy's"
    if reason == "conflict":
        return (
            "the copy stored from another link or set has the same gmd:dateStamp and other "
            "content; that copy is kept"
        )
    return f"refused ({reason})"


def summary(refused: int, by_reason: Mapping[str, int]) -> str:
    """``refused 50: own set 50``: a count of refusals with its reasons (those known)."""
    parts = [f"{LABELS[code]} {by_reason[code]}" for code in LABELS if by_reason.get(code)]
    return f"refused {refused}" + (f": {', '.join(parts)}" if parts else "")
