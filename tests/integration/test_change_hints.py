"""The provider's stream of change hints (GET /oai/changes, docs/links.md#change-hints): its
shape, when a change is hinted (once lists show it, never for a write that changed nothing),
resuming, the listener's death, its bounds, and Identify's advertisement."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta

import aiohttp
import pytest

from tests.support import factories
from tests.support.events import open_stream
from tests.support.oai_client import OAI, oai_get
from tests.support.oai_validation import validate_oai
from tests.support.servers import running_provider
from wiscat.shared.db.pool import Pool
from wiscat.shared.oaipmh.pages import read_identify
from wiscat.shared.settings import Settings

OWN = "WIS-GISC-TEST"
OTHER = "WIS-GISC-OTHER"
STAMP = "%Y-%m-%dT%H:%M:%SZ"


def second(text: str, shift: int = 0) -> str:
    return (datetime.strptime(text, STAMP) + timedelta(seconds=shift)).strftime(STAMP)


async def test_stream_shape_headers_and_heartbeat(database_url: str) -> None:
    async with (
        running_provider(database_url, hints_heartbeat_seconds=0.3) as provider,
        open_stream(provider.oai + "/changes", headers={"Accept-Encoding": "gzip"}) as events,
    ):
        headers = events.response.headers
        assert headers["Content-Type"] == "text/event-stream; charset=utf-8"
        assert headers["Cache-Control"] == "no-cache"
        assert headers["X-Accel-Buffering"] == "no"
        assert "Content-Encoding" not in headers
        assert "Content-Length" not in headers
        heartbeat = await events.next(2, comments=True)
        assert events.first_line == b"retry: 2000\n"
        assert (heartbeat.kind, heartbeat.raw) == ("comment", b": heartbeat\n")


async def test_a_write_is_hinted_once_lists_show_it(db: Pool, database_url: str) -> None:
    await factories.load_records(db, OWN, range(3))
    async with (
        running_provider(database_url, settle_seconds=1) as provider,
        open_stream(provider.oai + "/changes", sets=(OWN,)) as own,
        open_stream(provider.oai + "/changes", sets=(OTHER,)) as other,
        open_stream(provider.oai + "/changes") as every,
    ):
        await asyncio.sleep(0.2)
        written = time.monotonic()
        [identifier] = await factories.load_records(db, OWN, [7])
        event = await own.next(5)
        took = time.monotonic() - written
        assert event.kind == "change"
        assert event.json["sets"] == [OWN]
        until = event.json["until"]
        assert event.id == until
        assert len(event.raw) <= 512
        # sent once a list shows it: the second up to the bound holds it
        answer = await oai_get(
            provider.oai,
            verb="ListIdentifiers",
            metadataPrefix="iso19139",
            set=OWN,
            **{"from": second(until, -1), "until": until},
        )
        listed = [h.findtext(f"{OAI}identifier") for h in answer.tree.iter(f"{OAI}header")]
        assert identifier in listed
        assert took < 3.5, took  # the settle window (1 s) and the rest of its second
        every_event = await every.next(2)
        assert set(every_event.json["sets"]) == {OWN, "WIS-CATALOGUE"}
        await other.none_within(1.5)


async def test_no_hint_for_a_rewrite_that_changes_nothing(db: Pool, database_url: str) -> None:
    await factories.load_records(db, OWN, range(5))
    async with (
        running_provider(database_url, hints_heartbeat_seconds=0.5) as provider,
        open_stream(provider.oai + "/changes", sets=(OWN,)) as events,
    ):
        await asyncio.sleep(0.3)
        await factories.load_records(db, OWN, range(5))  # the same content
        await events.none_within(2)
        await factories.load_records(db, OWN, range(1), version=1)
        assert (await events.next(3)).kind == "change"


async def test_a_record_leaving_a_set_is_hinted_to_that_sets_streams(
    db: Pool, database_url: str
) -> None:
    """A record that leaves a set and stays in another: the set it left changed (its lists
    show the record deleted there), the set it stays in did not."""
    await factories.load_records(db, OWN, [1])
    [identifier] = await factories.load_records(db, OTHER, [1], kind="remote")
    async with (
        running_provider(database_url, settle_seconds=0) as provider,
        open_stream(provider.oai + "/changes", sets=(OTHER,)) as other,
        open_stream(provider.oai + "/changes", sets=(OWN,)) as own,
    ):
        await asyncio.sleep(0.2)
        await factories.delete(db, OTHER, [identifier])
        event = await other.next(5)
        assert (event.kind, event.json["sets"]) == ("change", [OTHER])
        answer = await oai_get(
            provider.oai, verb="ListIdentifiers", metadataPrefix="iso19139", set=OTHER
        )
        [header] = answer.tree.iter(f"{OAI}header")
        assert header.get("status") == "deleted"
        await own.none_within(1.5)


async def test_last_event_id_resumes_or_tells_to_catch_up(db: Pool, database_url: str) -> None:
    async with running_provider(database_url, settle_seconds=1) as provider:
        url = provider.oai + "/changes"
        async with open_stream(url, sets=(OWN,)) as events:
            await asyncio.sleep(0.2)
            await factories.load_records(db, OWN, [1])
            first = (await events.next(5)).id
        assert first is not None
        # nothing since: nothing at once
        async with open_stream(url, sets=(OWN,), headers={"Last-Event-ID": first}) as events:
            await events.none_within(1.5)
        await factories.load_records(db, OWN, [2])
        await factories.load_records(db, OTHER, [3], kind="remote")
        await asyncio.sleep(2.2)  # listable now
        # a change since the id, of a set asked for: at once, by header or parameter
        async with open_stream(url, sets=(OWN,), headers={"Last-Event-ID": first}) as events:
            event = await events.next(1)
            assert (event.kind, event.json["sets"]) == ("change", [OWN])
            assert event.id is not None and event.id > first
        async with open_stream(url, sets=(OTHER,), params=(("last-event-id", first),)) as events:
            event = await events.next(1)
            assert (event.kind, event.json["sets"]) == ("change", [OTHER])
        # a stale id (long ago): the changes since, at once
        async with open_stream(url, headers={"Last-Event-ID": "2000-01-01T00:00:00Z"}) as events:
            event = await events.next(1)
            assert event.kind == "change"
            assert set(event.json["sets"]) == {OWN, OTHER, "WIS-CATALOGUE"}
        for garbage in ("42", "2026-13-45T99:00:00Z", "2026-11-28", "x" * 4000):
            async with open_stream(url, headers={"Last-Event-ID": garbage}) as events:
                event = await events.next(1)
                assert event.kind == "catch-up", garbage
                assert "not a datestamp" in event.json["reason"]
        future = (datetime.now() + timedelta(days=1)).strftime(STAMP)
        async with open_stream(url, headers={"Last-Event-ID": future}) as events:
            event = await events.next(1)
            assert event.kind == "catch-up"
            assert "beyond" in event.json["reason"]


async def test_the_listener_killed_reconnects_and_streams_catch_up(
    db: Pool, database_url: str
) -> None:
    """The listening session killed: open streams are told to catch up, a change committed
    while no one listened is hinted all the same, and so is the next one, within 5 s."""
    async with (
        running_provider(database_url, settle_seconds=1) as provider,
        open_stream(provider.oai + "/changes", sets=(OWN,)) as events,
    ):
        hints = provider.app.state.provider.hints
        await asyncio.wait_for(hints.listening.wait(), 5)
        assert await db.fetchval("select pg_terminate_backend($1)", hints.listen_pid)
        [unheard] = await factories.load_records(db, OWN, [8])  # while no one listens
        kinds = {(await events.next(5)).kind, (await events.next(5)).kind}
        assert kinds == {"catch-up", "change"}
        written = time.monotonic()
        await factories.load_records(db, OWN, [9])
        event = await events.next(5)
        assert event.kind == "change"
        assert time.monotonic() - written < 5
        async with aiohttp.ClientSession() as http, http.get(provider.root + "/metrics") as got:
            text = await got.text()
        assert "wiscat_hint_listener_failures_total 1.0" in text
        assert 'wiscat_hints_sent_total{kind="catch-up"} 1.0' in text
        assert "wiscat_hint_streams_open 1.0" in text
        del unheard


async def test_stream_bounds_and_bad_requests(database_url: str) -> None:
    async with (
        running_provider(
            database_url, hints_max_streams_per_client=2, overload_retry_after_seconds=7
        ) as provider,
        aiohttp.ClientSession() as http,
    ):
        url = provider.oai + "/changes"
        async with open_stream(url), open_stream(url, sets=(OWN,)), http.get(url) as refused:
            assert refused.status == 503
            assert refused.headers["Retry-After"] == "7"
            async with asyncio.timeout(3), http.head(url) as head:  # no stream: the head alone
                assert head.status == 200
                assert head.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        await asyncio.sleep(0.3)  # the two streams are closed: room again
        async with open_stream(url):
            pass
        for query, reason in (
            ("verb=Identify", "unknown parameter 'verb'"),
            ("set=a%20b", "not a setSpec"),
            ("set=", "not a setSpec"),
            ("last-event-id=1&last-event-id=2", "twice"),
        ):
            async with http.get(url + "?" + query) as bad:
                assert bad.status == 400, query
                assert reason in await bad.text()
    async with (
        running_provider(database_url, hints_max_streams=2) as provider,
        aiohttp.ClientSession() as http,
    ):
        url = provider.oai + "/changes"
        async with open_stream(url), open_stream(url), http.get(url) as refused:
            assert refused.status == 503  # the process's bound, whoever asks


async def test_shutdown_does_not_wait_for_open_streams(database_url: str) -> None:
    serving = running_provider(database_url)
    provider = await serving.__aenter__()
    streaming = open_stream(provider.oai + "/changes")
    events = await streaming.__aenter__()
    try:
        stopping = time.monotonic()
        await serving.__aexit__(None, None, None)  # waits at most 15 s, then fails
        assert time.monotonic() - stopping < 3
        with pytest.raises(ConnectionError):  # the stream ended
            await events.next(2)
    finally:
        await streaming.__aexit__(None, None, None)


async def test_identify_advertises_the_stream_and_stays_valid(database_url: str) -> None:
    async with running_provider(database_url, settle_seconds=1) as provider:
        answer = await oai_get(provider.oai, verb="Identify")
        validate_oai(answer.body)
        identify = read_identify(answer.body)
        assert identify.changes_url == provider.oai + "/changes"
        assert identify.whole_seconds


async def test_hints_off(database_url: str) -> None:
    async with (
        running_provider(database_url, hints=False) as provider,
        aiohttp.ClientSession() as http,
    ):
        answer = await oai_get(provider.oai, verb="Identify")
        validate_oai(answer.body)
        assert read_identify(answer.body).changes_url is None
        async with http.get(provider.oai + "/changes") as response:
            assert response.status == 404


async def test_with_the_default_settle_window_a_write_is_hinted_within_two_seconds(
    db: Pool, database_url: str
) -> None:
    """The latency budget (docs/design.md): the settle window (0.5 s) and the rest of the
    write's second, then the hint."""
    settle = Settings.model_fields["settle_seconds"].default
    async with (
        running_provider(database_url, settle_seconds=settle) as provider,
        open_stream(provider.oai + "/changes", sets=(OWN,)) as events,
    ):
        await asyncio.wait_for(provider.app.state.provider.hints.listening.wait(), 5)
        for n in range(3):
            written = time.monotonic()
            await factories.load_records(db, OWN, [n])
            assert (await events.next(5)).kind == "change"
            assert time.monotonic() - written < 2.0
