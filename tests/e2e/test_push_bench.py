"""The push section of the bench at a tiny size: it runs on real nodes and writes its figures."""

from __future__ import annotations

import re

from bench import push_bench

TINY = push_bench.Size(
    nodes=2, changes=3, two_hop=1, quiet=1.0, burst=10, burst_seconds=1.0, streams=5,
    list_samples=20, idle_turns=1,
)  # fmt: skip


async def test_the_push_section_runs_and_reports_every_figure(template_ready: str) -> None:
    lines = await push_bench.run(template_ready, TINY)
    text = "\n".join(lines)
    assert lines[0] == "## Push: change hints between nodes"
    one_hop = re.search(r"p95 ([\d.]+) s, max ([\d.]+) s \| p95 ≤ 2 s", text)
    assert one_hop, text
    # a change not reached counts as the timeout: hints moved these within it
    assert float(one_hop[2]) < push_bench.REACH_TIMEOUT, text
    two_hops = re.search(r"two hops: .* p95 ([\d.]+) s, max ([\d.]+) s", text)
    assert two_hops and float(two_hops[2]) < push_bench.REACH_TIMEOUT, text
    assert re.search(r"quiet mesh for 1 s: harvest runs started \| \d+ \|", text), text
    burst = re.search(r"after the last \| ([\d.]+) s; at most (\d+) run", text)
    assert burst and float(burst[1]) < 120 and int(burst[2]) >= 1, text
    assert re.search(r"10 new records at one node, committed over [\d.]+ s", text), text
    assert re.search(r"5 idle streams on one provider \| RSS \d+ MiB before", text), text
