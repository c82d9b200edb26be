"""URLs as wiscat shows them: in logs, stored reasons, pages and command output, never with a
password (a link's base URL may carry ``user:password@`` for a peer behind basic auth)."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit, urlunsplit

# RFC 3986 §3.2: the authority follows "//" and ends at the first "/", "?" or "#"
_AUTHORITY = re.compile(r"(?P<scheme>[^:/?#]*:)//(?P<authority>[^/?#]*)")


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
    """``url`` with its password, if it has one, shown as ``***``.

    Any text is taken, a URL stored before it was checked included (a bad port, a broken IPv6
    host): the password is found in the authority as written, not through a parse that may fail.
    """
    found = _AUTHORITY.match(url)
    if found is None or "@" not in found["authority"]:
        return url
    userinfo, _, host = found["authority"].rpartition("@")
    if ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return f"{found['scheme']}//{user}:***@{host}{url[found.end() :]}"


def url_host(host: str) -> str:
    """``host`` as it stands in a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def every_address(host: str) -> bool:
    """Whether a provider on ``host`` listens on every address (0.0.0.0, ::)."""
    try:
        return not host or ipaddress.ip_address(host).is_unspecified
    except ValueError:  # a name
        return False


def local_endpoint(host: str, port: int) -> str:
    """The /oai URL of a provider listening on ``host`` and ``port``: on every address (0.0.0.0,
    ::), this machine's loopback one."""
    if every_address(host):
        host = "127.0.0.1"
    return f"http://{url_host(host)}:{port}/oai"


def node_root(base_url: str) -> str:
    """A node's root URL from its OAI-PMH base URL (``.../oai`` dropped)."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/oai"):
        path = path[: -len("/oai")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))
