"""The per-client rate limit of the registry's forms (RELIABILITY S11), on a clock of its own."""

from __future__ import annotations

from wiscat.provider.limits import RateLimiter, client_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_s11_the_limit_holds_over_any_sliding_minute_and_names_the_wait() -> None:
    clock = Clock()
    limiter = RateLimiter(3, clock=clock)
    found = []
    for _ in range(3):  # at 0, 10 and 20 s
        found.append(limiter.admit("203.0.113.7"))
        clock.now += 10
    assert found == [None, None, None]
    clock.now += 0.5
    # the first of the three leaves the minute 29.5 s from now: whole seconds, rounded up
    assert limiter.admit("203.0.113.7") == 30
    assert limiter.admit("198.51.100.2") is None
    clock.now += 29.5
    assert limiter.admit("203.0.113.7") is None
    # a refusal is not counted: the next to leave is the one of 10 s, 10 s from now
    assert limiter.admit("203.0.113.7") == 10


def test_s11_memory_is_bounded_by_the_clients_remembered() -> None:
    clock = Clock()
    limiter = RateLimiter(1, max_clients=100, clock=clock)
    assert limiter.admit("203.0.113.7") is None
    for n in range(99):
        assert limiter.admit(f"10.0.0.{n}") is None
    assert limiter.admit("203.0.113.7") == 60  # seen again: the most recent now
    for n in range(99, 10_000):
        limiter.admit(f"10.0.{n // 256}.{n % 256}")
    assert len(limiter) == 100
    # the least recently seen were forgotten first
    assert limiter.admit("10.0.0.0") is None


def test_s11_an_ipv6_client_is_its_slash_64() -> None:
    limiter = RateLimiter(2, clock=Clock())
    assert limiter.admit("2001:db8:1:2::1") is None
    assert limiter.admit("2001:db8:1:2:ffff::9") is None
    assert limiter.admit("2001:db8:1:2:abcd::1") == 60
    assert limiter.admit("2001:db8:1:3::1") is None
    assert client_key("2001:db8:1:2:abcd::1") == "2001:db8:1:2::/64"
    # an IPv4 client seen through an IPv6 socket is its IPv4 address, not ::ffff:0:0/64
    assert client_key("::ffff:203.0.113.7") == client_key("203.0.113.7") == "203.0.113.7"
    assert client_key("unknown") == "unknown"
