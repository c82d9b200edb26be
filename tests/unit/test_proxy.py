"""Which requests go through the outbound proxy, and how its setting is read."""

from __future__ import annotations

import base64

import pytest

from wiscat.shared.proxy import Proxy, proxy_url_problem


@pytest.mark.parametrize(
    ("url", "through"),
    [
        ("http://gisc.example.org/oai", False),  # the domain itself
        ("https://oai.gisc.example.org/oai", False),  # a subdomain
        ("http://notexample.org/oai", True),  # not a subdomain, only a suffix
        ("http://10.1.2.3:8080/oai", False),  # in the network
        ("http://10.2.0.1/oai", True),
        ("http://[fd00::5]/oai", False),
        ("http://[2001:db8::1]/oai", True),
        ("http://INTRANET/oai", False),  # names compare without case
        ("http://peer.other.org/oai", True),
    ],
)
def test_no_proxy_names_hosts_domains_and_networks(url: str, through: bool) -> None:
    proxy = Proxy.from_setting("http://gate:3128", "*.example.org, 10.1.0.0/16,fd00::/8, intranet")
    assert proxy.for_url(url) == ("http://gate:3128" if through else None)


def test_a_domain_is_written_three_ways() -> None:
    for written in ("example.org", ".example.org", "*.example.org"):
        proxy = Proxy.from_setting("http://gate:3128", written)
        assert proxy.for_url("https://a.example.org/oai") is None, written
        assert proxy.for_url("https://example.org/oai") is None, written


def test_a_star_sends_nothing_through_the_proxy() -> None:
    assert Proxy.from_setting("http://gate:3128", "*").for_url("http://a.b/oai") is None


def test_credentials_leave_the_url_for_a_header() -> None:
    proxy = Proxy.from_setting("http://harvester:p%40ss@[fd00::1]:3128")
    assert proxy.url == "http://[fd00::1]:3128"
    value = proxy.headers["Proxy-Authorization"]
    assert base64.b64decode(value.removeprefix("Basic ")) == b"harvester:p@ss"
    assert Proxy.from_setting("http://gate").url == "http://gate:80"
    assert Proxy.from_setting("http://gate").headers == {}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("http://gate:3128", None),
        ("http://u:p@gate:3128/", None),
        ("https://gate:3128", "an http:// URL"),
        ("gate:3128", "an http:// URL"),
        ("http://gate:3128/path", "the proxy's address only"),
        ("http://gate:port", "not a URL"),
    ],
)
def test_a_proxy_url_is_checked(value: str, problem: str | None) -> None:
    found = proxy_url_problem(value)
    assert found == problem if problem is None else problem in (found or "")
