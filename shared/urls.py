"""URLs as wiscat shows them: in logs, stored reasons, pages and command output, never with a
password (a link's base URL may carry ``user:password@`` for a peer behind basic auth)."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit, urlunsplit


def http_url(url: str) -> SplitResult | None:
    """``url``'s parts if it is an http(s) URL with a host and a usable port, else None."""
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return None
    try:
        parts = urlsplit(url)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port out of range or not a number, "http://[::1/oai"
        return None
    return parts if usable else None


def safe_url(url: str) -> str:
    """``url`` with its password, if it has one, shown as ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
