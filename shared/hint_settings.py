"""The settings of the change hints (docs/links.md#change-hints), a part of
:class:`wiscat.shared.settings.Settings` kept here for the size of that module."""

from __future__ import annotations

from pydantic import BaseModel, Field


class HintSettings(BaseModel):
    """The change hints' settings, fields of :class:`wiscat.shared.settings.Settings`."""

    listen_database_url: str | None = Field(
        default=None,
        description="libpq URL of a direct session with the primary database server, where "
        "each provider process LISTENs for change hints: not through PgBouncer in transaction "
        "mode (LISTEN there receives nothing), nor a hot standby (which refuses LISTEN); unset: "
        "DATABASE_SESSION_URL, else DATABASE_URL",
    )
    hints: bool = Field(
        default=True,
        description="change hints: the provider serves its stream (/oai/changes) and advertises "
        "it in Identify, the harvester subscribes to its peers' streams; false: neither (the "
        "route answers 404, and links run on their schedule alone)",
    )
    hints_heartbeat_seconds: float = Field(
        default=15.0,
        gt=0,
        le=15,
        description="a change-hint stream with nothing to send sends a heartbeat comment this "
        "often (at most 15 s: harvesters time a stream out after about three)",
    )
    hints_max_streams: int = Field(
        default=500,
        ge=1,
        le=100_000,
        description="change-hint streams one provider process holds open at once; more get "
        "503 with Retry-After",
    )
    hints_max_streams_per_client: int = Field(
        default=8,
        ge=1,
        le=10_000,
        description="change-hint streams one client address (an IPv6 /64) holds open at once "
        "in one provider process; more get 503 with Retry-After",
    )
