"""Which addresses a URL chosen by someone else may reach: global unicast ones only (SSRF).

An address is refused when

- the most specific entry of the IANA IPv4 or IPv6 Special-Purpose Address Registry (RFC 6890,
  updated by RFC 8190) that holds it is not "Globally Reachable" (False, or N/A for a deprecated
  block): :data:`SPECIAL_PURPOSE`, the registries as updated on 2024-10-22;
- it is in a range refused whatever the registry says (:data:`ALSO_REFUSED`): a translator or
  relay (NAT64, 6to4) reaches the IPv4 address it carries through someone's network, site-local
  addresses are private, and multicast is no single host;
- ``ipaddress`` does not call it global, or calls it multicast, reserved, unspecified or
  link-local (its own lists, which differ between Python versions, as a second opinion).

An IPv4-mapped (``::ffff:a.b.c.d``) or IPv4-compatible (``::a.b.c.d``) address is judged as the
IPv4 address it carries: the system connects to that address.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class SpecialRange:
    """One entry of the IANA special-purpose registries."""

    network: IPNetwork
    name: str
    rfc: str
    globally_reachable: bool | None  # the registry's column; None where it says N/A


@dataclass(frozen=True)
class RefusedRange:
    """A range refused whatever the registries say, and why."""

    network: IPNetwork
    name: str
    rfc: str
    why: str


def _special(rows: list[tuple[str, str, str, bool | None]]) -> tuple[SpecialRange, ...]:
    return tuple(SpecialRange(ipaddress.ip_network(n), name, rfc, g) for n, name, rfc, g in rows)


# (address block, name, RFC, Globally Reachable), in the registries' order
SPECIAL_PURPOSE = _special(
    [
        # https://www.iana.org/assignments/iana-ipv4-special-registry
        ("0.0.0.0/8", '"This network"', "RFC 791 §3.2", False),
        ("0.0.0.0/32", '"This host on this network"', "RFC 1122 §3.2.1.3", False),
        ("10.0.0.0/8", "Private-Use", "RFC 1918", False),
        ("100.64.0.0/10", "Shared Address Space", "RFC 6598", False),
        ("127.0.0.0/8", "Loopback", "RFC 1122 §3.2.1.3", False),
        ("169.254.0.0/16", "Link Local", "RFC 3927", False),
        ("172.16.0.0/12", "Private-Use", "RFC 1918", False),
        ("192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890 §2.1", False),
        ("192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335", False),
        ("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", False),
        ("192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723", True),
        ("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155", True),
        ("192.0.0.170/32", "NAT64/DNS64 Discovery", "RFC 8880", False),
        ("192.0.0.171/32", "NAT64/DNS64 Discovery", "RFC 8880", False),
        ("192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737", False),
        ("192.31.196.0/24", "AS112-v4", "RFC 7535", True),
        ("192.52.193.0/24", "AMT", "RFC 7450", True),
        ("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526", None),
        ("192.88.99.2/32", "6a44-relay anycast address", "RFC 6751", False),
        ("192.168.0.0/16", "Private-Use", "RFC 1918", False),
        ("192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534", True),
        ("198.18.0.0/15", "Benchmarking", "RFC 2544", False),
        ("198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737", False),
        ("203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737", False),
        ("240.0.0.0/4", "Reserved", "RFC 1112 §4", False),
        ("255.255.255.255/32", "Limited Broadcast", "RFC 8190, RFC 919 §7", False),
        # https://www.iana.org/assignments/iana-ipv6-special-registry
        ("::1/128", "Loopback Address", "RFC 4291", False),
        ("::/128", "Unspecified Address", "RFC 4291", False),
        ("::ffff:0:0/96", "IPv4-mapped Address", "RFC 4291", False),
        ("64:ff9b::/96", "IPv4-IPv6 Translat.", "RFC 6052", True),
        ("64:ff9b:1::/48", "IPv4-IPv6 Translat.", "RFC 8215", False),
        ("100::/64", "Discard-Only Address Block", "RFC 6666", False),
        ("2001::/23", "IETF Protocol Assignments", "RFC 2928", False),
        ("2001::/32", "TEREDO", "RFC 4380, RFC 8190", None),
        ("2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723", True),
        ("2001:1::2/128", "Traversal Using Relays around NAT Anycast", "RFC 8155", True),
        ("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", "RFC 9665", True),
        ("2001:2::/48", "Benchmarking", "RFC 5180", False),
        ("2001:3::/32", "AMT", "RFC 7450", True),
        ("2001:4:112::/48", "AS112-v6", "RFC 7535", True),
        ("2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843", None),
        ("2001:20::/28", "ORCHIDv2", "RFC 7343", True),
        ("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", True),
        ("2001:db8::/32", "Documentation", "RFC 3849", False),
        ("2002::/16", "6to4", "RFC 3056", None),
        ("2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534", True),
        ("3fff::/20", "Documentation", "RFC 9637", False),
        ("5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602", False),
        ("fc00::/7", "Unique-Local", "RFC 4193, RFC 8190", False),
        ("fe80::/10", "Link-Local Unicast", "RFC 4291", False),
    ]
)

_CARRIES = "on some network reaches the IPv4 address it carries"
ALSO_REFUSED = tuple(
    RefusedRange(ipaddress.ip_network(n), name, rfc, why)
    for n, name, rfc, why in [
        ("64:ff9b::/96", "IPv4-IPv6 translation", "RFC 6052", f"a NAT64 translator {_CARRIES}"),
        ("64:ff9b:1::/48", "local IPv4-IPv6 translation", "RFC 8215", f"a translator {_CARRIES}"),
        ("2002::/16", "6to4", "RFC 3056", f"a 6to4 relay {_CARRIES}"),
        ("192.88.99.0/24", "6to4 relay anycast", "RFC 7526", "a relay on some network"),
        ("fec0::/10", "deprecated site-local", "RFC 3879", "private to a site"),
        ("224.0.0.0/4", "multicast", "RFC 5771", "many hosts, not one"),
        ("ff00::/8", "multicast", "RFC 4291 §2.7", "many hosts, not one"),
    ]
)

# the most specific entry decides (192.0.0.9 is reachable inside 192.0.0.0/24, which is not)
_MOST_SPECIFIC_FIRST = sorted(SPECIAL_PURPOSE, key=lambda r: r.network.prefixlen, reverse=True)
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def address_refusal(address: str) -> str | None:
    """Why the IP literal ``address`` must not be connected to, or None for a global unicast
    address: ``192.0.0.8 is in 192.0.0.8/32, IPv4 dummy address (RFC 7600), not globally
    reachable``."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # a zone: fe80::1%eth0
    except ValueError:
        return f"{address!r} is not an IP address"
    carried = _carried_ipv4(ip)
    if carried is not None:
        why = _why(carried)
        return None if why is None else f"{address} carries {carried}, which is {why}"
    why = _why(ip)
    return None if why is None else f"{address} is {why}"


def address_allowed(address: str) -> bool:
    """Whether the IP literal ``address`` is a global unicast address (see
    :func:`address_refusal`)."""
    return address_refusal(address) is None


def _carried_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:  # :: and ::1 are IPv6's own
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _why(ip: IPAddress) -> str | None:
    for refused in ALSO_REFUSED:
        if ip in refused.network:
            return f"in {refused.network}, {refused.name} ({refused.rfc}): {refused.why}"
    for special in _MOST_SPECIFIC_FIRST:
        if ip in special.network:
            if special.globally_reachable:
                break
            return f"in {special.network}, {special.name} ({special.rfc}), not globally reachable"
    if (
        not ip.is_global
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or ip.is_link_local
    ):
        return "not a global unicast address"
    return None
