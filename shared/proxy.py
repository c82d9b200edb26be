"""The outbound proxy of harvests and checks (``WISCAT_PROXY_URL``, ``WISCAT_NO_PROXY``).

A node on a network whose only way out is a proxy sends its requests to peers through it:
``http`` requests in absolute form, ``https`` ones through a ``CONNECT`` tunnel (the peer's
certificate is checked end to end as without a proxy). Hosts named in ``WISCAT_NO_PROXY`` are
reached directly.

The proxy's credentials (``http://user:password@proxy:3128``) go in a ``Proxy-Authorization``
header; they are never part of a URL that is logged or stored. The standard ``HTTPS_PROXY`` and
``NO_PROXY`` variables are not read: a proxy that an environment happens to carry must not
route peers' traffic unannounced.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit


@dataclass(frozen=True)
class Proxy:
    """Where requests go: through ``url`` (no credentials in it) but to the hosts of ``bypass``."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    bypass: tuple[str, ...] = ()

    @classmethod
    def from_setting(cls, proxy_url: str, no_proxy: str = "") -> Proxy:
        """From ``WISCAT_PROXY_URL`` (validated: :func:`proxy_url_problem`) and
        ``WISCAT_NO_PROXY``."""
        parts = urlsplit(proxy_url)
        headers = {}
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            headers["Proxy-Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
        return cls(f"http://{host}:{parts.port or 80}", headers, bypass_list(no_proxy))

    def for_url(self, url: str) -> str | None:
        """The proxy to send a request for ``url`` through, or None: directly."""
        host = (urlsplit(url).hostname or "").lower()
        return None if bypassed(host, self.bypass) else self.url


def bypass_list(no_proxy: str) -> tuple[str, ...]:
    """``WISCAT_NO_PROXY``'s entries: comma-separated host names, domains (``example.org``,
    ``.example.org`` and ``*.example.org`` alike: it and its subdomains), addresses and
    networks, ``*`` for all."""
    entries = (entry.strip().lower() for entry in no_proxy.split(","))
    return tuple(entry if entry == "*" else entry.lstrip("*.") for entry in entries if entry)


def bypassed(host: str, bypass: tuple[str, ...]) -> bool:
    """Whether ``host`` is reached directly: named in ``bypass``, a subdomain of a domain in it,
    or an address in one of its networks."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        address = None
    for entry in bypass:
        if entry == "*" or host == entry or host.endswith("." + entry):
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False


def proxy_url_problem(value: str) -> str | None:
    """What is wrong with a ``WISCAT_PROXY_URL`` value, or None."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme != "http" or not parts.hostname:
        return "an http:// URL of the proxy, e.g. http://proxy.example.org:3128"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "the proxy's address only: http://[user:password@]host:port"
    return None
