"""Which addresses the registry (and a harvest of a link it added) may connect to: the IANA
special-purpose ranges that are not globally reachable are refused, and an IPv4 address in IPv6
clothing is judged as the IPv4 address it carries (RELIABILITY S02)."""

from __future__ import annotations

import pytest

from wiscat.shared.registry.addresses import address_allowed, address_refusal


@pytest.mark.parametrize(
    "address",
    [
        # S02's literals, as the socket sees them once the URL's host is resolved
        "127.0.0.1",
        "::1",
        "0.0.0.0",
        "::ffff:127.0.0.1",
        "::127.0.0.1",  # IPv4-compatible (RFC 4291 §2.5.5.1)
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "169.254.169.254",
        "100.64.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.0.1",
        "fc00::1",
        "fe80::1",
        "fe80::1%lo",
        "224.0.0.1",
        # what the check let through before (the review's defect 7)
        "fec0::1",  # deprecated site-local (RFC 3879)
        "192.88.99.1",  # the deprecated 6to4 relay anycast (RFC 7526)
        "192.0.0.8",  # the IPv4 dummy address (RFC 7600)
        # a translator or relay on someone's network reaches whatever it embeds
        "64:ff9b::808:808",
        "64:ff9b:1::808:808",
        "2002:808:808::1",
        # the rest of the registries' ranges that are not globally reachable
        "192.0.0.170",
        "192.0.2.1",
        "198.18.0.1",
        "198.51.100.1",
        "203.0.113.1",
        "240.0.0.1",
        "255.255.255.255",
        "100::1",
        "2001::1",  # Teredo
        "2001:2::1",
        "2001:db8::1",
        "3fff::1",
        "5f00::1",
        "ff02::1",
        "::",
        "::ffff:10.0.0.1",
        "::ffff:192.0.0.8",
        "not an address",
    ],
)
def test_special_purpose_addresses_are_refused(address: str) -> None:
    assert address_allowed(address) is False


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "2001:4860:4860::8888", "::ffff:8.8.8.8", "::8.8.8.8", "192.0.0.9"],
)
def test_global_unicast_addresses_are_allowed(address: str) -> None:
    # 192.0.0.9 (PCP anycast, RFC 7723) is globally reachable inside the IETF protocol block,
    # which is not: the registry's most specific entry decides
    assert (address_allowed(address), address_refusal(address)) == (True, None)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        (
            "192.0.0.8",
            "192.0.0.8 is in 192.0.0.8/32, IPv4 dummy address (RFC 7600), not globally reachable",
        ),
        (
            "64:ff9b::808:808",
            "64:ff9b::808:808 is in 64:ff9b::/96, IPv4-IPv6 translation (RFC 6052): a NAT64 "
            "translator on some network reaches the IPv4 address it carries",
        ),
        (
            "::ffff:127.0.0.1",
            "::ffff:127.0.0.1 carries 127.0.0.1, which is in 127.0.0.0/8, Loopback "
            "(RFC 1122 §3.2.1.3), not globally reachable",
        ),
        (
            "fec0::1",
            "fec0::1 is in fec0::/10, deprecated site-local (RFC 3879): private to a site",
        ),
        ("224.0.0.1", "224.0.0.1 is in 224.0.0.0/4, multicast (RFC 5771): many hosts, not one"),
        ("not an address", "'not an address' is not an IP address"),
    ],
)
def test_a_refusal_names_the_range_and_its_rfc(address: str, reason: str) -> None:
    assert address_refusal(address) == reason
