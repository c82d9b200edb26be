"""Node settings, read from the environment (prefix ``WISCAT_``) or a ``.env`` file.

Settings are built once at start-up by the command that starts a service and passed down; nothing
reads them at import time. Names follow the interface contract (DESIGN §8).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

UNION_SET = "WIS-CATALOGUE"


class Settings(BaseSettings):
    """Everything a node reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="WISCAT_", env_file=".env", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="libpq URL of the database; unset starts an embedded PostgreSQL in DATA_DIR",
    )
    data_dir: Path = Path("./var")
    gisc_name: str = "LOCAL"
    base_url: str = "http://127.0.0.1:8080/oai"
    repository_name: str = "wiscat catalogue node"
    admin_email: str = "wis-admin@example.org"
    admin_token: SecretStr | None = None
    page_size: int = Field(default=500, ge=1, le=10_000)
    token_secret: SecretStr | None = None
    token_lifetime_hours: float = Field(default=24.0, gt=0)
    deleted_retention_days: float = Field(
        default=90, ge=0, description="days tombstones are kept (fractions allowed); 0: forever"
    )
    settle_seconds: float = Field(default=5.0, ge=0)
    provider_host: str = "127.0.0.1"
    provider_port: int = 8080
    harvester_port: int = 8081
    allow_private_fetch: bool = False
    max_concurrent_lists: int = Field(default=16, ge=1)
    read_ahead_pages: int = Field(
        default=8, ge=0, description="list pages read ahead for the tokens just sent; 0: none"
    )
    harvest_concurrency: int = Field(default=16, ge=1, description="links harvested at once")
    harvest_per_host: int = Field(default=2, ge=1, description="links at once per peer host")
    harvest_lease_seconds: float = Field(default=300, gt=0)
    harvest_poll_seconds: float = Field(default=2.0, gt=0)
    harvest_timeout_seconds: float = Field(default=120, gt=0, description="per response")
    harvest_max_retries: int = Field(default=5, ge=0)
    harvest_max_page_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    harvest_page_workers: int = Field(
        default_factory=lambda: min(4, os.cpu_count() or 1),
        ge=0,
        description="processes that parse and hash harvested pages; 0: a thread",
    )
    mass_delete_share: float = Field(default=0.10, ge=0, le=1)
    mass_delete_min: int = Field(default=50, ge=0)
    registry_key_file: Path | None = Field(
        default=None, description="the registry network key file; unset: no registry network"
    )
    registry_private_key_file: Path | None = Field(
        default=None, description="this node's Ed25519 private key (PEM) to sign registry blocks"
    )
    registry_node_url: str | None = Field(
        default=None, description="this node's root URL as peers reach it (default: BASE_URL's)"
    )
    registry_auto_enable_links: bool = False
    registry_sync_seconds: float = Field(default=60.0, gt=0)
    registry_rate_limit_per_minute: int = Field(default=10, ge=1, description="POST /urls")
    registry_fetch_timeout_seconds: float = Field(default=10.0, gt=0)
    registry_submit_wait_seconds: float = Field(
        default=5.0, ge=0, description="how long POST /urls waits for the URL's block"
    )
    log_level: str = "INFO"
    log_format: Literal["text", "json"] = "text"

    @field_validator("gisc_name")
    @classmethod
    def _gisc_name_is_a_set_name(cls, value: str) -> str:
        if not value or any(ch.isspace() or ch == ":" for ch in value):
            raise ValueError("GISC_NAME must be non-empty, without spaces or ':'")
        return value

    @property
    def own_set(self) -> str:
        """The node's own set, ``WIS-GISC-<NAME>`` (seed 002)."""
        return f"WIS-GISC-{self.gisc_name}"

    @property
    def write_timeout_seconds(self) -> float:
        """Bound on one write transaction; kept well inside the settle window (invariant 2)."""
        return max(self.settle_seconds / 2, 0.5)
