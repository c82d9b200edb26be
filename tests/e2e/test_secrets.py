"""A link's password (``https://user:password@peer/oai``, a peer behind basic auth) is never
shown: not by the commands, not in the logs or a run's stored reason, not on the dashboard nor
by the admin API."""

from __future__ import annotations

import aiohttp

from tests.e2e.nodes import NodeFactory

SECRET = "s3cret-Passw0rd"


async def test_a_link_password_is_shown_nowhere(make_node: NodeFactory) -> None:
    node = await make_node("SECRETS")
    url = f"http://harvest-user:{SECRET}@127.0.0.1:9/oai"  # port 9: nothing answers
    seen = []
    for args in (
        ("link", "add", "guarded", "--url", url, "--set", "WIS-GISC-GUARDED"),
        ("link", "list"),
        ("harvest", "guarded"),  # fails (refused), storing and logging its reason
        ("link", "list"),
        ("link", "list", "--json"),
        ("link", "set", "guarded", "--url", url.replace("/oai", "/oai2")),
    ):
        code, out, err = await node.wiscat(*args, check=False)
        seen.append((args, code, out, err))
    assert [code for _, code, _, _ in seen] == [0, 0, 1, 0, 0, 0], seen
    for args, _, out, err in seen:
        assert SECRET not in out + err, args
    assert "http://harvest-user:***@127.0.0.1:9/oai" in seen[1][2]
    assert "cannot reach http://harvest-user:***@127.0.0.1:9/oai" in seen[3][2]  # last error
    assert '"base_url": "http://harvest-user:***@127.0.0.1:9/oai"' in seen[4][2]

    await node.start("provider", node.oai + "?verb=Identify")
    async with aiohttp.ClientSession() as http, http.get(node.oai[: -len("/oai")] + "/") as page:
        html = await page.text()
    assert "guarded" in html and "harvest-user:***@127.0.0.1:9/oai2" in html
    assert SECRET not in html
    token = {"Authorization": f"Bearer token-{node.name}"}
    async with (
        aiohttp.ClientSession(headers=token) as http,
        http.get(node.oai[: -len("/oai")] + "/admin/links") as listed,
    ):
        links = await listed.json()
    assert [link["base_url"] for link in links] == ["http://harvest-user:***@127.0.0.1:9/oai2"]
