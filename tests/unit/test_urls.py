"""URLs as shown: the password masked, everything else as it was."""

from __future__ import annotations

import pytest

from wiscat.shared.urls import safe_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://peer.example/oai?x=1", "https://peer.example/oai?x=1"),
        ("https://user:pw@peer.example:8443/oai", "https://user:***@peer.example:8443/oai"),
        ("http://:pw@peer.example/oai", "http://:***@peer.example/oai"),
        ("http://user:p%40ss@[2001:db8::1]:8080/oai", "http://user:***@[2001:db8::1]:8080/oai"),
        ("http://user@peer.example/oai", "http://user@peer.example/oai"),  # no password
        ("http://u:pw@peer.example/oai?next=a@b:c", "http://u:***@peer.example/oai?next=a@b:c"),
        ("http://u:p/w@peer.example/oai", "http://u:p/w@peer.example/oai"),  # a path, no password
        # stored before URLs were checked: nothing here parses, the password is still hidden
        ("http://u:pw@peer.example:99999/oai", "http://u:***@peer.example:99999/oai"),
        ("http://u:pw@[::1/oai", "http://u:***@[::1/oai"),
        ("junk", "junk"),
        ("http://u:pw@peer.example?verb=Identify", "http://u:***@peer.example?verb=Identify"),
        ("http://peer.example?a=b:c@d", "http://peer.example?a=b:c@d"),
    ],
)
def test_safe_url_masks_the_password_only(url: str, shown: str) -> None:
    assert safe_url(url) == shown
