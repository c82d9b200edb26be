"""URLs as shown: the password masked, everything else as it was."""

from __future__ import annotations

import pytest

from shared.urls import safe_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://peer.example/oai?x=1", "https://peer.example/oai?x=1"),
        ("https://user:pw@peer.example:8443/oai", "https://user:***@peer.example:8443/oai"),
        ("http://:pw@peer.example/oai", "http://:***@peer.example/oai"),
        ("http://user:p%40ss@[2001:db8::1]:8080/oai", "http://user:***@[2001:db8::1]:8080/oai"),
        ("http://user@peer.example/oai", "http://user@peer.example/oai"),  # no password
    ],
)
def test_safe_url_masks_the_password_only(url: str, shown: str) -> None:
    assert safe_url(url) == shown
