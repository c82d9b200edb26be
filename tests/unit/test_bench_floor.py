"""The harvester section's measure of the library calls under a page worker's work
(``bench.floor``)."""

from __future__ import annotations

from bench.floor import floor_lines, library_costs


def test_each_library_call_is_measured_on_pages_the_worker_reads_whole() -> None:
    costs = library_costs(pages=2, page_size=5, rounds=1)
    assert list(costs) == [
        "page worker",
        "parsing the page",
        "serializing the record",
        "its exclusive C14N",
        "SHA-256",
    ]
    assert all(us > 0 for us in costs.values()), costs
    worker, floor = floor_lines(costs, 5, postgresql=50.0, provider=20.0)
    calls = sum(us for part, us in costs.items() if part != "page worker")
    assert f"**{calls + 70:.0f} µs**" in floor
    assert f"{costs['page worker']:.0f} µs" in worker
