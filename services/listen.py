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


def listen(host: str, port: int, service: str, *, accept_now: bool = True) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` for ``service`` (named in the error), listening
    unless ``accept_now`` is false: then the server listens once it serves (asyncio's
    ``create_server`` does), and a client that comes while the service starts is refused and
    tries again later, rather than waiting in the queue with every other client and all being
    let in at the same instant (a provider's restart, met by every peer's stream at once)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        # as servers do: a restart may bind while the last run's connections wait out TIME_WAIT
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        if accept_now:
            sock.listen(2048)
    except OSError as exc:  # in use, not an address of this machine, no such host
        sock.close()
        raise cannot_listen(service, host, port, exc) from exc
    return sock


def cannot_listen(service: str, host: str, port: int, exc: OSError) -> CannotListen:
    reason = exc.strerror or str(exc)
    return CannotListen(f"{service} cannot listen on {url_host(host)}:{port}: {reason}")
