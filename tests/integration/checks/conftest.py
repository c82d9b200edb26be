"""The mesh of nodes the consistency checker's tests compare."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tests.integration.checks.nodes import SET, T0, T_OLD, Mesh, _days_ago, generated_id
from tests.support import factories
from tests.support.pg import clone_template, drop_database
from tests.support.servers import loopback_socket, running_provider
from wiscat.shared.db.pool import Pool, create_pool

T1 = _days_ago(9)  # arrival at the peers, later: in step


T_BUMP = _days_ago(8)  # a datestamp bumped at the source without a change


T_LATE = _days_ago(7)


async def stamp(pool: Pool, identifiers: list[str], when: str) -> None:
    """Set the arrival datestamp of ``identifiers`` (in every set) to ``when``."""
    for table in ("records", "set_members"):
        await factories.backdate(
            pool,
            f"update {table} set datestamp = $2::text::timestamptz where identifier = any($1)",
            identifiers,
            when,
        )


@contextlib.asynccontextmanager
async def fixture_server(handler: web.RequestHandler) -> AsyncIterator[str]:  # type: ignore[type-arg]
    app = web.Application()
    app.router.add_route("*", "/oai", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = loopback_socket()
    site = web.SockSite(runner, sock)
    await site.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/oai"
    finally:
        await runner.cleanup()


def identifiers_page(entries: list[tuple[str, str]]) -> str:
    headers = "".join(
        f"<header><identifier>{i}</identifier><datestamp>{d}</datestamp>"
        f"<setSpec>{SET}</setSpec></header>"
        for i, d in entries
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        f"<responseDate>{T_LATE}</responseDate>"
        '<request verb="ListIdentifiers">http://peer/oai</request>'
        f"<ListIdentifiers>{headers}</ListIdentifiers></OAI-PMH>"
    )


@pytest.fixture
async def mesh(db: Pool, database_url: str, template_ready: str) -> AsyncIterator[Mesh]:
    # The source: records 0..29 of its own set, 28 and 29 deleted, all stamped T0; record 6's
    # datestamp is later bumped to T_BUMP with no change of content.
    ids = await factories.load_records(db, SET, range(30))
    await factories.load_records(db, SET, [3], version=1)  # 3 changed at the source
    await factories.delete(db, SET, ids[28:30])
    await stamp(db, ids, T0)
    await stamp(db, [ids[6]], T_BUMP)

    good_url = await clone_template(template_ready)
    bad_url = await clone_template(template_ready)
    good = await create_pool(good_url, max_size=2)
    bad = await create_pool(bad_url, max_size=2)
    try:
        # A peer in step: every live record, arrived after the source stamped it.
        await factories.load_records(good, SET, range(28), kind="remote")
        await factories.load_records(good, SET, [3], version=1, kind="remote")
        await stamp(good, ids, T1)
        await stamp(good, [ids[6]], T_LATE)
        # A peer with one of each fault.
        await factories.load_records(bad, SET, [*range(2, 29), 99], kind="remote")  # 0, 1 missing
        await factories.load_records(bad, SET, [5], version=1, kind="remote")  # 5 altered
        await factories.delete(bad, SET, [ids[2]])  # 2: deleted at the peer only
        await stamp(bad, [*ids, generated_id(99)], T1)
        await stamp(bad, [ids[3]], T_OLD)  # 3 outdated: the peer missed its change
        await stamp(bad, [ids[4]], T0)  # 4 copied datestamp
        # 6: T1 < T_BUMP, outdated by datestamp, same content; 28 live: a missed deletion

        live = [(ids[n], T_LATE if n == 6 else T1) for n in range(28)]

        async def duplicating(request: web.Request) -> web.Response:
            if request.query.get("verb") == "ListIdentifiers":
                page = identifiers_page([*live[:8], (ids[7], T_LATE), *live[8:]])
                return web.Response(text=page, content_type="text/xml")
            return web.Response(status=400)

        async def failing(request: web.Request) -> web.Response:
            return web.Response(status=500, text="<html>Internal Server Error</html>")

        closed = loopback_socket()
        unreachable = f"http://127.0.0.1:{closed.getsockname()[1]}/oai"
        closed.close()

        async with (
            running_provider(database_url, page_size=7) as source,  # five pages
            running_provider(good_url, gisc_name="GOOD") as good_provider,
            running_provider(bad_url, gisc_name="BAD") as bad_provider,
            fixture_server(duplicating) as duplicating_url,
            fixture_server(failing) as failing_url,
        ):
            yield Mesh(
                ids, source, good_provider, bad_provider, duplicating_url, failing_url, unreachable
            )
    finally:
        await good.close()
        await bad.close()
        await drop_database(template_ready, good_url)
        await drop_database(template_ready, bad_url)
