"""A scheduled consistency check as an operator sets it up: ``wiscat checks add`` at a running
node, whose harvester runs it, stores the report, and exports it on its own /metrics."""

from __future__ import annotations

import asyncio

from tests.e2e.mesh import Mesh
from tests.support.servers import loopback_socket


async def test_a_scheduled_check_runs_in_the_harvester_and_is_exported(
    settled_mesh: Mesh,
) -> None:
    # with a settle window B stamps its copies a second or more after A: no copied datestamp
    mesh = settled_mesh
    await mesh.add_node("A")
    await mesh.add_node("B", WISCAT_HARVEST_MAX_RETRIES="0")  # the closed port fails at once
    await mesh.start()
    await mesh.link("B", "a", "A", "WIS-GISC-A")
    made = [await mesh.put("A", n, "a") for n in range(3)]
    await mesh.round()
    await mesh.delete("A", made[0])  # B has not harvested the deletion yet: a missed deletion
    await asyncio.sleep(mesh.settle + 1.05)  # until both lists show every write
    a, b = mesh.nodes["A"], mesh.nodes["B"]
    closed = loopback_socket()
    gone = f"http://127.0.0.1:{closed.getsockname()[1]}/oai"
    closed.close()

    _, out, _ = await b.wiscat(
        "checks", "add", "audit-a", "--set", "WIS-GISC-A", "--source", a.oai, b.oai, gone,
        "--every", "1h",
    )  # fmt: skip
    assert out == f"check audit-a: set WIS-GISC-A from {a.oai} against 2 peer(s), every 1h\n"
    for _ in range(300):
        _, out, _ = await b.wiscat("checks", "reports", "audit-a")
        if out != "no reports\n":
            break
        await asyncio.sleep(0.1)
    lines = out.splitlines()
    assert lines[0].endswith(" audit-a WIS-GISC-A: inconsistent")
    assert lines[1] == f"    {b.oai}: extra 1"
    assert lines[2].startswith(f"    {gone}: cannot reach {gone}")
    _, out, _ = await b.wiscat("checks", "list")
    name, set_spec, every, _, outcome, *peers = out.splitlines()[1].split()
    assert (name, set_spec, every, outcome, peers) == (
        "audit-a", "WIS-GISC-A", "1h", "inconsistent", [b.oai, gone]
    )  # fmt: skip

    async with mesh.http.get(f"http://127.0.0.1:{b.harvester_port}/metrics") as response:
        metrics = await response.text()
    for line in (
        f'wiscat_check_items{{category="extra",check="audit-a",peer="{b.oai}"}} 1.0',
        f'wiscat_check_items{{category="missing",check="audit-a",peer="{b.oai}"}} 0.0',
        f'wiscat_check_peer_checked{{check="audit-a",peer="{b.oai}"}} 1.0',
        f'wiscat_check_peer_checked{{check="audit-a",peer="{gone}"}} 0.0',
        'wiscat_check_consistent{check="audit-a"} 0.0',
    ):
        assert line in metrics.splitlines(), line
