"""Node settings, read from the environment (prefix ``WISCAT_``) or a ``.env`` file.

Settings are built once at start-up by the command that starts a service and passed down; nothing
reads them at import time. Each field's description is its row in docs/settings.md, which
``python -m tools.settings_doc`` writes.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from wiscat.shared import tls
from wiscat.shared.hint_settings import HintSettings
from wiscat.shared.oaipmh.arguments import SET_LEVEL
from wiscat.shared.proxy import Proxy, proxy_url_problem
from wiscat.shared.text import NOT_XML
from wiscat.shared.urls import http_url, url_host

UNION_SET = "WIS-CATALOGUE"
_DAY = 86400.0  # the longest wait or timeout a setting in seconds may give

# OAI-PMH.xsd's emailType
_EMAIL = re.compile(r"\S+@(\S+\.)+\S+")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _every_address(host: str) -> bool:
    """Whether a provider on ``host`` listens on every address (0.0.0.0, ::)."""
    try:
        return not host or ipaddress.ip_address(host).is_unspecified
    except ValueError:  # a name
        return False


def _local_endpoint(host: str, port: int) -> str:
    """The /oai URL of a provider listening on ``host`` and ``port``: on every address (0.0.0.0,
    ::), this machine's loopback one."""
    if _every_address(host):
        host = "127.0.0.1"
    return f"http://{url_host(host)}:{port}/oai"


class Settings(HintSettings, BaseSettings):
    """Everything a node reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="WISCAT_", env_file=".env", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="libpq URL of the database; unset starts an embedded PostgreSQL in DATA_DIR",
    )
    database_session_url: str | None = Field(
        default=None,
        description="libpq URL of the database server itself, for what needs a session of its "
        "own (the schema migration's lock, harvest leases) when DATABASE_URL goes through a "
        "transaction pooler; unset: DATABASE_URL",
    )
    database_statement_cache: int = Field(
        default=100,
        ge=0,
        le=10_000,
        description="prepared statements kept per database connection; 0 behind a transaction "
        "pooler that cannot keep them (PgBouncer before 1.21, or without max_prepared_statements)",
    )
    database_read_url: str | None = Field(
        default=None,
        description="libpq URL of a hot standby of DATABASE_URL's server, one host: the "
        "provider reads lists and GetRecord there (writes stay on DATABASE_URL); unset: "
        "everything on DATABASE_URL",
    )
    read_replay_wait_seconds: float = Field(
        default=2.0,
        ge=0,
        le=60,
        description="how long a list read from DATABASE_READ_URL waits for the standby to "
        "replay what the primary has committed; past it, a new list stops at an older bound "
        "the standby has replayed, and a continued one gets 503 with Retry-After",
    )
    data_dir: Path = Field(
        default=Path("./var"),
        description="folder of the embedded PostgreSQL (DATA_DIR/postgres); not used when "
        "DATABASE_URL is set",
    )
    gisc_name: str = Field(
        default="LOCAL",
        description="the node's name: its own set is WIS-GISC-<GISC_NAME>; letters, digits and "
        "-_.!~*'() (a setSpec); a database holds one node",
    )
    base_url: str = Field(
        default="",
        description="the /oai URL as peers reach it, echoed in every response; unset, it "
        "follows PROVIDER_PORT (and PROVIDER_HOST when that names one address)",
        json_schema_extra={"documented_default": "`http://127.0.0.1:PROVIDER_PORT/oai`"},
    )
    repository_name: str = Field(
        default="wiscat catalogue node", description="the repository name Identify shows"
    )
    admin_email: str = Field(
        default="wis-admin@example.org",
        description="shown by Identify and sent as the From header of every harvest request",
    )
    admin_token: SecretStr | None = Field(
        default=None,
        description="bearer token of /admin/...; unset or empty: the admin API answers 403",
    )
    page_size: int = Field(
        default=500,
        ge=1,
        le=10_000,
        description="records or headers per ListRecords or ListIdentifiers page",
    )
    token_secret: SecretStr | None = Field(
        default=None,
        description="key that signs resumptionTokens; unset: a random key kept in the "
        "database, made on first use",
    )
    token_lifetime_hours: float = Field(
        default=0,
        ge=0,
        le=24 * 366,
        description="how long a resumptionToken stays valid (its expirationDate); 0: for ever, "
        "so any provider of the node continues a list at any time",
    )
    token_secret_previous: SecretStr | None = Field(
        default=None,
        description="the TOKEN_SECRET before the last rotation: tokens it signed are still taken "
        "until TOKEN_SECRET_PREVIOUS_UNTIL; it never signs",
    )
    token_secret_previous_until: datetime | None = Field(
        default=None,
        validate_default=True,
        description="end of the rotation's grace period, with its time zone (e.g. "
        "2026-12-01T00:00:00Z): tokens of TOKEN_SECRET_PREVIOUS are refused from then on",
    )
    deleted_retention_days: float = Field(
        default=90,
        ge=0,
        le=3660,
        description="days tombstones are kept (fractions allowed); 0: forever",
    )
    history_retention_days: float = Field(
        default=90,
        ge=0,
        le=3660,
        description="days harvest runs, quarantined and refused records and check reports are "
        "kept (each "
        "link's last run and each check's latest report always); 0: forever",
    )
    settle_seconds: float = Field(
        default=0.5,
        ge=0,
        le=3600,
        description="a fresh write stays out of lists this long and until its whole second has "
        "passed: a margin for the database clock stepping back (docs/design.md); the same "
        "value in every process of a node, 0 for tests only",
    )
    provider_host: str = Field(
        default="127.0.0.1",
        description="address the provider and the harvester's health port bind to; 0.0.0.0 "
        "in containers",
    )
    provider_port: int = Field(
        default=8080, ge=1, le=65535, description="the provider's port (provider --port wins)"
    )
    harvester_port: int = Field(
        default=8081,
        ge=1,
        le=65535,
        description="the harvester's health and metrics port (harvester --port wins)",
    )
    harvester_url: str | None = Field(
        default=None,
        description="the harvester's health port as the provider reaches it, whose /healthz the "
        "dashboard probes (e.g. http://harvester:8081); unset: PROVIDER_HOST and HARVESTER_PORT",
    )
    allow_private_fetch: bool = Field(
        default=False,
        description="let the registry fetch private, loopback and other non-global addresses "
        "(a closed network, tests)",
    )
    registry_allow_private_peers: bool = Field(
        default=False,
        description="let the registry contact peers a tracker names at private, loopback and "
        "other non-global addresses (a closed network on a private network, tests); their "
        "fetches need WISCAT_ALLOW_PRIVATE_FETCH too",
    )
    proxy_url: SecretStr | None = Field(
        default=None,
        description="http://[user:password@]host:port of the proxy harvests and checks go "
        "through; unset: directly",
    )
    no_proxy: str = Field(
        default="",
        description="hosts, domains, addresses and networks reached directly (comma-separated)",
    )
    ca_file: Path | None = Field(
        default=None,
        description="PEM certificates trusted for https peers besides the system's (a private CA)",
    )
    max_concurrent_lists: int = Field(
        default=16,
        ge=1,
        le=10_000,
        description="list pages one provider process serves at once; more get 503 with Retry-After",
    )
    overload_retry_after_seconds: int = Field(
        default=10,
        ge=1,
        le=300,
        description="the Retry-After, in seconds, of a list request refused because "
        "MAX_CONCURRENT_LISTS lists are in progress (1 to 300, the range harvesters honour)",
    )
    database_timeout_seconds: float = Field(
        default=30,
        gt=0,
        le=3600,
        description="a request the database has not answered in this long gets 503 with "
        "Retry-After (/readyz and /metrics wait at most 5 s)",
    )
    header_timeout_seconds: float = Field(
        default=30,
        gt=0,
        le=3600,
        description="a connection that has not sent a whole request head in this long is closed",
    )
    send_timeout_seconds: float = Field(
        default=300,
        gt=0,
        le=_DAY,
        description="a client that takes no piece of a list page in this long is cut off",
    )
    read_ahead_pages: int = Field(
        default=8,
        ge=0,
        le=1000,
        description="list pages read ahead for the tokens just sent; 0: none",
    )
    harvest_concurrency: int = Field(
        default=16, ge=1, le=10_000, description="links harvested at once"
    )
    harvest_per_host: int = Field(
        default=2,
        ge=1,
        le=1000,
        description="links at once per peer host, by all the harvester processes of one database",
    )
    harvest_lease_seconds: float = Field(
        default=300,
        gt=0,
        le=_DAY,
        description="lease of a running link or scheduled check, renewed every third of it",
    )
    harvest_poll_seconds: float = Field(
        default=2.0, gt=0, le=3600, description="how often the harvester looks for due links"
    )
    harvest_timeout_seconds: float = Field(
        default=120,
        gt=0,
        le=_DAY,
        description="how long a peer may send nothing within a response; a whole response "
        "takes at most 15 minutes, or this if longer",
    )
    harvest_max_retries: int = Field(
        default=5,
        ge=0,
        le=100,
        description="retries of a request after a connection error, timeout, 408, 429 or 5xx",
    )
    harvest_max_page_bytes: int = Field(
        default=64 * 1024 * 1024,
        gt=0,
        le=2**31,
        description="largest response accepted, after decompression (gzip bombs)",
        json_schema_extra={"documented_default": "`67108864` (64 MiB)"},
    )
    harvest_max_empty_pages: int = Field(
        default=5,
        ge=0,
        le=10**6,
        description="pages in a row with a resumptionToken and no item before a list is given up",
    )
    harvest_max_requests_per_list: int = Field(
        default=100_000,
        ge=1,
        le=10**9,
        description="requests one list may take before it is given up (a list that never ends)",
    )
    harvest_retry_after_cap_seconds: float = Field(
        default=300,
        ge=0,
        le=_DAY,
        description="the longest wait a peer's Retry-After is honoured for",
    )
    harvest_page_workers: int = Field(
        default_factory=lambda: min(4, os.cpu_count() or 1),
        ge=0,
        le=256,
        description="processes that parse and hash harvested pages; 0: a thread",
        json_schema_extra={"documented_default": "the number of cores, at most 4"},
    )
    mass_delete_share: float = Field(
        default=0.10,
        ge=0,
        le=1,
        description="share of a link's live records one run may delete (mass-deletion breaker)",
    )
    mass_delete_min: int = Field(
        default=50,
        ge=0,
        le=10**9,
        description="records a run may always delete; a run stops when it would delete more "
        "than both limits",
    )
    registry_key_file: Path | None = Field(
        default=None, description="the registry network key file; unset: no registry network"
    )
    registry_private_key_file: Path | None = Field(
        default=None, description="this node's Ed25519 private key (PEM) to sign registry blocks"
    )
    registry_node_url: str | None = Field(
        default=None, description="this node's root URL as peers reach it (default: BASE_URL's)"
    )
    registry_auto_enable_links: bool = Field(
        default=False,
        description="add accepted registry URLs as enabled links, not disabled candidates",
    )
    registry_register_self: bool = Field(
        default=False,
        description="submit this node's own BASE_URL to the registry network at start-up, "
        "retried every REGISTRY_SYNC_SECONDS until it is accepted or known",
    )
    registry_sync_seconds: float = Field(
        default=60.0, gt=0, le=_DAY, description="interval between syncs with registry peers"
    )
    registry_rate_limit_per_minute: int = Field(
        default=10, ge=1, le=1000, description="POST /urls per client address and minute"
    )
    registry_announce_rate_limit_per_minute: int = Field(
        default=30,
        ge=1,
        le=1000,
        description="announces (POST /registry/announce, GET with an info_hash) per client "
        "address and minute (as a tracker, this node asks for one every REGISTRY_SYNC_SECONDS)",
    )
    registry_fetch_timeout_seconds: float = Field(
        default=10.0, gt=0, le=3600, description="timeout of the registry's outbound fetches"
    )
    registry_fetch_ports: Annotated[tuple[int, ...], NoDecode] = Field(
        default=(80, 443, 8080, 8443),
        description="the only ports the registry connects to (comma-separated): submitted URLs, "
        "peers, the tracker and their redirects",
    )
    registry_submit_wait_seconds: float = Field(
        default=5.0, ge=0, le=600, description="how long POST /urls waits for the URL's block"
    )
    progress_seconds: float = Field(
        default=5.0,
        ge=0,
        le=3600,
        description="wiscat ingest and check print a progress line on stderr this often, and a "
        "long harvest (wiscat harvest, or the harvester) logs one; 0: none",
    )
    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING, ERROR or CRITICAL")
    log_format: Literal["text", "json"] = Field(
        default="text", description="text, or json for one JSON object per line"
    )

    @field_validator("gisc_name")
    @classmethod
    def _gisc_name_is_a_set_name(cls, value: str) -> str:
        if not SET_LEVEL.fullmatch(value):  # the own set's name is one level, no ':'
            raise ValueError(
                "the own set is named WIS-GISC-<GISC_NAME>, so the name is letters, digits "
                "and -_.!~*'() (an OAI-PMH setSpec), e.g. OFFENBACH"
            )
        return value

    @field_validator(
        "database_url", "database_session_url", "database_read_url", "listen_database_url"
    )
    @classmethod
    def _database_url_is_libpq(cls, value: str | None) -> str | None:
        if not value:
            return None  # set empty (`WISCAT_DATABASE_URL=` in .env): the embedded server
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("a libpq URL: postgresql://user@host:port/database")
        return value

    @field_validator("token_secret_previous_until", mode="wrap")
    @classmethod
    def _rotation_is_complete(
        cls, given: object, parse: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> datetime | None:
        # checked on the value as given, so that an error quotes it as the operator wrote it
        value: datetime | None = None if given in (None, "") else parse(given)
        previous = info.data.get("token_secret_previous")
        if previous is None or not previous.get_secret_value():
            if value is not None:
                raise ValueError("set only with WISCAT_TOKEN_SECRET_PREVIOUS")
            return None
        secret = info.data.get("token_secret")
        if secret is None or not secret.get_secret_value():
            raise ValueError(
                "WISCAT_TOKEN_SECRET_PREVIOUS is the secret WISCAT_TOKEN_SECRET replaced: set "
                "WISCAT_TOKEN_SECRET too"
            )
        if value is None:
            raise ValueError(
                "WISCAT_TOKEN_SECRET_PREVIOUS needs the end of its grace period, e.g. "
                "2026-12-01T00:00:00Z"
            )
        if value.tzinfo is None:
            raise ValueError("give the time zone, e.g. 2026-12-01T00:00:00Z")
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url_is_an_endpoint(cls, value: str) -> str:
        if not value:
            return value  # unset: derived from where the provider listens (model_post_init)
        parts = http_url(value)
        if parts is None or parts.query or parts.fragment:
            raise ValueError(
                "the full http(s) URL peers use to reach /oai, without a query, "
                "e.g. http://gisc.example.org:8080/oai"
            )
        return value

    @field_validator("registry_node_url")
    @classmethod
    def _node_url_is_http(cls, value: str | None) -> str | None:
        if not value:
            return None  # set empty: BASE_URL's
        if http_url(value) is None:
            raise ValueError("this node's http(s) root URL, e.g. http://gisc.example.org:8080")
        return value

    @field_validator("harvester_url")
    @classmethod
    def _harvester_url_is_http(cls, value: str | None) -> str | None:
        if not value:
            return None  # set empty: PROVIDER_HOST's and HARVESTER_PORT's
        parts = http_url(value)
        if parts is None or parts.path.strip("/") or parts.query or parts.fragment:
            raise ValueError("the harvester's http(s) root URL, e.g. http://harvester:8081")
        return value.rstrip("/")

    @field_validator("proxy_url", "ca_file", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("proxy_url")
    @classmethod
    def _proxy_url_is_a_proxy(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            problem = proxy_url_problem(value.get_secret_value())
            if problem:
                raise ValueError(problem)  # the value itself is not shown: it may hold a password
        return value

    @field_validator("ca_file")
    @classmethod
    def _ca_file_holds_certificates(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                tls.client_context(value)
            except OSError as exc:  # ssl.SSLError among them: no certificate in it
                raise ValueError(f"a PEM file of CA certificates ({tls.message(exc)})") from None
        return value

    @field_validator("registry_fetch_ports", mode="before")
    @classmethod
    def _ports_are_a_list(cls, value: object) -> object:
        parts: Iterable[object] = ()
        if isinstance(value, str):  # the environment's 80,443,8080,8443
            parts = value.split(",")
        elif isinstance(value, Iterable):
            parts = value
        try:
            ports = tuple(int(str(part).strip()) for part in parts)
        except ValueError:
            ports = ()
        if not ports or not all(1 <= port <= 65535 for port in ports):
            raise ValueError("port numbers from 1 to 65535, comma-separated, e.g. 80,443,8080,8443")
        return ports

    @field_validator("admin_email")
    @classmethod
    def _admin_email_is_an_address(cls, value: str) -> str:
        if not _EMAIL.fullmatch(value):
            raise ValueError("an e-mail address, e.g. wis-admin@example.org (Identify shows it)")
        return value

    @field_validator("repository_name")
    @classmethod
    def _repository_name_is_text(cls, value: str) -> str:
        if not value.strip() or NOT_XML.search(value):
            raise ValueError("a name, not empty, without control characters (Identify shows it)")
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level_is_known(cls, value: str) -> str:
        if value.upper() not in _LOG_LEVELS:
            raise ValueError(f"one of {', '.join(_LOG_LEVELS)}")
        return value.upper()

    # whether BASE_URL was left unset, and so follows where the provider listens
    _derived_base_url: bool = PrivateAttr(default=False)

    def model_post_init(self, context: object) -> None:
        """Derive the base URL from the provider's host and port when none is set."""
        if not self.base_url:
            self._derived_base_url = True
            self.base_url = _local_endpoint(self.provider_host, self.provider_port)

    def listening_on(self, host: str | None, port: int | None) -> Settings:
        """These settings with the provider on ``host`` and ``port`` where given (the command
        line's ``--host`` and ``--port``), and BASE_URL following them unless it was set."""
        changed: dict[str, object] = {}
        if host:
            changed["provider_host"] = host
        if port:
            changed["provider_port"] = port
        if not changed:
            return self
        moved = self.model_copy(update=changed)
        if self._derived_base_url:
            moved.base_url = _local_endpoint(moved.provider_host, moved.provider_port)
        return moved

    @property
    def base_url_set(self) -> bool:
        """Whether BASE_URL was set, rather than derived from where the provider listens."""
        return not self._derived_base_url

    @property
    def base_url_unreachable(self) -> bool:
        """Whether peers are told a URL they cannot reach: BASE_URL unset, and the provider on
        every address, so that Identify and every response name 127.0.0.1."""
        return self._derived_base_url and _every_address(self.provider_host)

    def session_url(self, url: str) -> str:
        """The URL for what needs a database session of its own (a session-level advisory
        lock, held across transactions), where ``url`` is the one in use: DATABASE_SESSION_URL
        when ``url`` is DATABASE_URL and a transaction pooler may stand behind it."""
        if self.database_session_url and url == self.database_url:
            return self.database_session_url
        return url

    @property
    def proxy(self) -> Proxy | None:
        """The outbound proxy of harvests and checks, or None."""
        if self.proxy_url is None:
            return None
        return Proxy.from_setting(self.proxy_url.get_secret_value(), self.no_proxy)

    @property
    def own_set(self) -> str:
        """The node's own set, ``WIS-GISC-<NAME>``: the records of its own area."""
        return f"WIS-GISC-{self.gisc_name}"

    @property
    def probe_timeout_seconds(self) -> float:
        """How long /readyz and /metrics wait for the database: monitors probe often, and
        expect an answer within seconds."""
        return min(5.0, self.database_timeout_seconds)

    @property
    def write_timeout_seconds(self) -> float:
        """Bound on one harvester write statement: a page held up (on a lock held elsewhere)
        fails its run, retried at the next, rather than hold every list back (a list stops
        before the oldest write transaction in progress, invariant 2); at least 2.5 s, which a
        page of 1000 records may take on a busy node."""
        return max(self.settle_seconds / 2, 2.5)
