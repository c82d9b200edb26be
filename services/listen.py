"""The listening sockets of the node's HTTP services, bound before a service starts.

Bound first, so that a port in use, or an address this machine does not have, stops the
command at once with a reason an operator can act on (``wiscat: the provider cannot listen on
0.0.0.0:8080: Address already in use``, exit status 2), before the service says it is ready,
rather than as a traceback once it has half started.
"""

from __future__ import annotations

import socket

from wiscat.shared.urls import url_host


class CannotListen(Exception):
    """A service cannot listen where it is configured to; ``str()`` says where and why."""


def listen(host: str, port: int, service: str) -> socket.socket:
    """A TCP socket listening on ``host``:``port`` for ``service`` (named in the error)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        # as servers do: a restart may bind while the last run's connections wait out TIME_WAIT
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:  # in use, not an address of this machine, no such host
        sock.close()
        reason = exc.strerror or str(exc)
        raise CannotListen(f"{service} cannot listen on {url_host(host)}:{port}: {reason}") from exc
    return sock
