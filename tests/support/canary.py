"""A TCP listener on 127.0.0.1 that counts the connections made to it (RELIABILITY X04): put its
URL where a hostile document names an external DTD or entity, and a count above 0 proves that
a parser went out to fetch it."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class Canary:
    port: int
    connections: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


@contextlib.contextmanager
def canary() -> Iterator[Canary]:
    """A listening canary, in a thread of its own, for the block (sync and async tests alike)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.05)
    found = Canary(listener.getsockname()[1])
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            found.connections += 1
            connection.close()

    thread = threading.Thread(target=accept, name="canary", daemon=True)
    thread.start()
    try:
        yield found
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def knock(found: Canary) -> None:
    """Connect once, as a parser fetching the URL would, and wait until the canary counted it:
    the control that shows a count of 0 means something."""
    before = found.connections
    with socket.create_connection(("127.0.0.1", found.port), timeout=5):
        pass
    for _ in range(500):
        if found.connections > before:
            return
        threading.Event().wait(0.01)
    raise AssertionError("the canary did not count a connection")
