"""The settings of the WIS 2.0 broker (``WISCAT_WIS2_BROKER_*``), a part of
:class:`wiscat.shared.settings.Settings` kept here."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings


class Wis2BrokerSettings(BaseSettings):
    """Where WIS 2.0 notification messages are published (docs/wis2.md)."""

    wis2_broker_url: str | None = Field(
        default=None,
        description="mqtt://host:port or mqtts://host:port of the MQTT broker WIS 2.0 "
        "notification messages are published to (docs/wis2.md); unset: none are (with "
        "WIS2_CENTRES set, the harvester renders and announces when it is set)",
    )
    wis2_broker_user: str | None = Field(
        default=None, description="user name of the WIS 2.0 broker; unset: none"
    )
    wis2_broker_password: SecretStr | None = Field(
        default=None, description="password of WIS2_BROKER_USER (a secret: never logged)"
    )
    wis2_broker_ca_file: Path | None = Field(
        default=None,
        description="PEM certificates trusted for an mqtts:// broker besides the system's",
    )
    wis2_poll_seconds: float = Field(
        default=2.0,
        gt=0,
        le=3600,
        description="how often the harvester renders changed records and sends queued WIS 2.0 "
        "messages",
    )
    wis2_republish_rate: float = Field(
        default=10.0,
        gt=0,
        le=10_000,
        description="messages a second the daily re-announcement of every record queues, at most",
    )

    @field_validator(
        "wis2_broker_url",
        "wis2_broker_user",
        "wis2_broker_password",
        "wis2_broker_ca_file",
        mode="before",
    )
    @classmethod
    def _wis2_unset_when_empty(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("wis2_broker_url")
    @classmethod
    def _wis2_broker_is_mqtt(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname or parts.path.strip("/"):
                raise ValueError("mqtt://host:port or mqtts://host:port, e.g. mqtt://broker:1883")
            if parts.username or parts.password:
                raise ValueError("the user and password go in WIS2_BROKER_USER and _PASSWORD")
            parts.port  # noqa: B018 (raises ValueError for a port out of range)
        return value
