"""A network namespace of its own for a test's processes: inside it the only network is its own
loopback, so whatever a process there is asked to fetch (a generated host name, a public
address) cannot leave the machine: a DNS query or a connection beyond loopback finds no route.

PostgreSQL is reached there through its Unix socket, a file, which is the same in every
namespace (the embedded server listens on nothing else)."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from urllib.parse import parse_qs, urlsplit

# <linux/sockios.h>, <net/if.h>; a struct ifreq is 40 bytes: a 16-byte name, then a union
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
IFREQ = "16sh22x"


def isolated(argv: list[str]) -> list[str]:
    """``argv``, run in a new network namespace by util-linux's ``unshare`` (as a user other
    than root, in a user namespace of its own too, where the kernel allows that)."""
    prefix = ["unshare", "--net"]
    if os.geteuid() != 0:
        prefix.append("--map-root-user")
    return [*prefix, *argv]


def loopback_up() -> None:
    """Bring up the loopback of this process's network namespace (a new one's is down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        asked = fcntl.ioctl(sock, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0))
        flags = struct.unpack(IFREQ, asked)[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def interfaces() -> list[str]:
    """The names of this namespace's network interfaces."""
    return [name for _, name in socket.if_nameindex()]


def through_unix_socket(database_url: str) -> bool:
    """Whether ``database_url`` reaches its server through a Unix socket (a ``host`` that is
    a folder), the one way out of an isolated namespace."""
    parts = urlsplit(database_url)
    hosts = parse_qs(parts.query).get("host", []) or [parts.hostname or ""]
    return all(host.startswith("/") for host in hosts)
