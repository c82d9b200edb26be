"""Long CLI work says how far it is (a line on stderr every WISCAT_PROGRESS_SECONDS), and each
result is printed once: not as a log line and again on stdout."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web

from tests.e2e.nodes import NodeFactory
from tests.support.servers import list_records_page, loopback_socket, serving
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import parse_record
from wiscat.shared.oaipmh import render

FILES = 3000
# before the files are counted, a slow disk (or a loaded machine) shows the listing
INGEST_PROGRESS = re.compile(
    r"ingest: listing the files"
    r"|ingest: read [\d,]+ of 3,001 files \([\d,]+ a second\), stored [\d,]+, bad [01]"
)


async def test_ingest_shows_progress_and_each_result_once(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = await make_node("PROG")
    node.extra["WISCAT_PROGRESS_SECONDS"] = "0.01"  # the default is 5 s
    for n in range(FILES):
        (tmp_path / f"r{n:04}.xml").write_bytes(generate_record(n, centre="prog"))
    bad = tmp_path / "zz-bad.xml"
    bad.write_bytes(b"<not-a-record/>")

    code, out, err = await node.wiscat("ingest", str(tmp_path), check=False)

    assert code == 1, err
    assert out == f"WIS-GISC-PROG: added {FILES}, bad 1\n"
    lines = err.splitlines()
    progress = [line for line in lines if line.startswith("ingest: ")]
    assert len([line for line in progress if line.startswith("ingest: read ")]) >= 2, err
    assert [line for line in progress if not INGEST_PROGRESS.fullmatch(line)] == []
    # the bad file is named once, with its reason (it was logged as well)
    assert (out + err).count(str(bad)) == 1, err
    assert f"bad: {bad}: " in err
    assert (out + err).count("added 3000") == 1


PAGES, PER_PAGE = 8, 50
SET = "WIS-GISC-PROG"
CHECK_PROGRESS = re.compile(
    r"check: (listing|comparing): [\d,]+ identifiers listed "
    r"\(http://127\.0\.0\.1:\d+/a [\d,]+, http://127\.0\.0\.1:\d+/b [\d,]+\), [\d,]+ a second"
)


def _page(number: int, datestamp: str) -> str:
    """ListIdentifiers page ``number`` (from 0) of a slow endpoint, its token the next one."""
    headers = "".join(
        f"<header><identifier>urn:x-wmo:md:int.wmo.wis::prog.{n}</identifier>"
        f"<datestamp>{datestamp}</datestamp><setSpec>{SET}</setSpec></header>"
        for n in range(number * PER_PAGE, (number + 1) * PER_PAGE)
    )
    token = f"<resumptionToken>{number + 1}</resumptionToken>" if number + 1 < PAGES else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        "<responseDate>2025-01-03T00:00:00Z</responseDate>"
        '<request verb="ListIdentifiers">http://peer/oai</request>'
        f"<ListIdentifiers>{headers}{token}</ListIdentifiers></OAI-PMH>"
    )


@contextlib.asynccontextmanager
async def slow_lists() -> AsyncIterator[str]:
    """Two endpoints listing the same identifiers, a page every 50 ms: /a the source, /b a peer
    in step (its datestamps later, as a harvest's arrival)."""

    async def pages(request: web.Request) -> web.Response:
        await asyncio.sleep(0.05)
        number = int(request.query.get("resumptionToken", "0"))
        datestamp = "2025-01-02T00:00:00Z" if request.path == "/b" else "2025-01-01T00:00:00Z"
        return web.Response(text=_page(number, datestamp), content_type="text/xml")

    app = web.Application()
    app.router.add_get("/a", pages)
    app.router.add_get("/b", pages)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = loopback_socket()
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()


async def test_check_shows_progress_while_it_lists(make_node: NodeFactory) -> None:
    node = await make_node("PROGC")
    node.extra["WISCAT_PROGRESS_SECONDS"] = "0.05"
    async with slow_lists() as root:
        code, out, err = await node.wiscat(
            "check", "--set", SET, "--source", root + "/a", root + "/b", check=False
        )
    assert code == 0, out + err
    progress = [line for line in err.splitlines() if line.startswith("check: ")]
    assert len(progress) >= 2, err
    assert [line for line in progress if not CHECK_PROGRESS.fullmatch(line)] == []
    assert out.count("outcome: consistent") == 1


async def test_harvest_prints_its_run_summary_once(make_node: NodeFactory) -> None:
    """The summary of ``wiscat harvest NAME``'s run is its result, on stdout: it was also
    logged on stderr, the same line twice."""
    record = parse_record(generate_record(1, centre="once"))
    page = list_records_page(
        [render.record(record.identifier, datetime.now(UTC), [], False, record.xml)]
    )
    node = await make_node("ONCE")
    async with serving(page) as url:
        await node.wiscat("link", "add", "peer", "--url", url, "--into", "WIS-GISC-ONCE")
        code, out, err = await node.wiscat("harvest", "peer")
    assert code == 0
    (summary,) = out.splitlines()
    assert re.fullmatch(r"peer full run \d+: ok; pages 1; added 1, .*", summary), out
    assert (out + err).count(summary) == 1, err
