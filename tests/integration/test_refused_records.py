"""Refused records are kept, not only logged: each with its link, run and reason, counted by
reason on the run, in the run's summary and in the harvest metrics (operator review 3: a first
harvest refused a third of a set while the run read "ok")."""

from __future__ import annotations

from datetime import timedelta

from tests.support import factories
from tests.support.harvest_pair import SOURCE_SET, Pair, add_link, run
from wiscat.shared.db import links as link_store
from wiscat.shared.db import refusals as refusal_store

OWN = "WIS-GISC-SINK"


async def test_refusals_are_kept_with_their_run_and_reason(pair: Pair) -> None:
    ids = await factories.load_records(pair.source, SOURCE_SET, range(10))
    # the sink's own set holds records 3 and 4 already: both nodes made the same identifiers
    await factories.load_records(pair.sink, OWN, [3, 4], version=2)
    await add_link(pair)
    first = await run(pair)
    assert first.status == "ok", first.summary()
    assert first.counts["added"] == 8 and first.counts["refused"] == 2
    assert "refused 2: own set 2" in first.summary()
    refused = await refusal_store.refused_of_link(pair.sink, "test")
    assert sorted((r["identifier"], r["reason"], r["run_id"]) for r in refused) == sorted(
        [(ids[3], "own_set", first.run_id), (ids[4], "own_set", first.run_id)]
    )
    [row] = await link_store.recent_runs(pair.sink, "test")
    assert (row["refused"], refusal_store.run_refusals(row)) == (2, {"own_set": 2})
    metric = ("wiscat_harvest_refused_records_total", {"link": "test", "reason": "own_set"})
    assert pair.ctx.metrics.registry.get_sample_value(*metric) == 2

    # refused again by a full run: still one row per link and identifier, the latest run's
    second = await run(pair, full=True)
    assert second.counts["refused"] == 2 and second.refusals == {"own_set": 2}
    refused = await refusal_store.refused_of_link(pair.sink, "test")
    assert [r["run_id"] for r in refused] == [second.run_id] * 2
    assert pair.ctx.metrics.registry.get_sample_value(*metric) == 4
    runs = await link_store.recent_runs(pair.sink, "test")
    assert [refusal_store.run_refusals(r) for r in runs] == [{"own_set": 2}] * 2

    # record 3 leaves the own set (its tombstone purged): stored at the next run, its refusal
    # is over and forgotten
    await pair.sink.execute("delete from set_members where identifier = $1", ids[3])
    await pair.sink.execute("delete from records where identifier = $1", ids[3])
    third = await run(pair, full=True)
    assert third.counts["refused"] == 1 and third.counts["added"] == 1
    refused = await refusal_store.refused_of_link(pair.sink, "test")
    assert [(r["identifier"], r["run_id"]) for r in refused] == [(ids[4], third.run_id)]
    # the explanation of a missing identifier: by the links to the source's URL only
    found = await refusal_store.refusals_of(pair.sink, ids, pair.provider.oai)
    assert list(found) == [ids[4]] and found[ids[4]][0]["link"] == "test"
    assert await refusal_store.refusals_of(pair.sink, ids, "http://127.0.0.1:1/oai") == {}
    # kept for the history's retention, by the time of the latest refusal
    assert await refusal_store.purge_refusals(pair.sink, timedelta(days=1)) == 0
    await pair.sink.execute("update refused_records set refused_at = now() - interval '2 days'")
    assert await refusal_store.purge_refusals(pair.sink, timedelta(days=1)) == 1
    await run(pair, full=True)
    assert len(await refusal_store.refused_of_link(pair.sink, "test")) == 1
    # a removed link's refusals go with it
    assert await link_store.remove_link(pair.sink, "test")
    assert await pair.sink.fetchval("select count(*) from refused_records") == 0


async def test_an_older_copy_is_refused_as_older(pair: Pair) -> None:
    await factories.load_records(pair.source, SOURCE_SET, range(3))
    await add_link(pair)
    assert (await run(pair)).counts["added"] == 3
    # the sink's copy of record 1 becomes newer than the source's (another link brought it)
    await factories.load_records(pair.sink, SOURCE_SET, [1], version=3, kind="remote")
    report = await run(pair, full=True)
    assert report.refusals == {"older": 1}, report.summary()
    assert "refused 1: older 1" in report.summary()
    [row] = await refusal_store.refused_of_link(pair.sink, "test")
    assert row["reason"] == "older"
