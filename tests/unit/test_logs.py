"""Log output: one event per line in both formats, JSON objects with the event's fields."""

from __future__ import annotations

import io
import json
import logging
import sys
import time
import warnings
from collections.abc import Iterator

import pytest

from wiscat.shared.logs import Outage, configure


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    quiet = {name: logging.getLogger(name).level for name in ("pgserver", "uvicorn.access")}
    hook = sys.excepthook
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, old in quiet.items():
            logging.getLogger(name).setLevel(old)
        logging.captureWarnings(False)
        sys.excepthook = hook


def emit_events() -> None:
    log = logging.getLogger("wiscat.harvester")
    log.info("harvest %s full run %d: ok", "tokyo", 7, extra={"link": "tokyo", "run": 7})
    log.warning("two\nlines", extra={"color_message": "\x1b[36mtwo\x1b[0m"})
    try:
        raise ValueError("broken peer")
    except ValueError:
        log.exception("harvest %s: unexpected error", "tokyo")
    logging.getLogger("pgserver").info("Running commandline:\n['pg_ctl', 'start']")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library complains", UserWarning, stacklevel=1)
    try:
        raise RuntimeError("the port is taken")
    except RuntimeError:
        sys.excepthook(*sys.exc_info())


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_carry_every_field_of_the_event() -> None:
    out = io.StringIO()
    configure("INFO", "json", stream=out)
    emit_events()
    lines = out.getvalue().splitlines()
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    assert [(e["level"], e["logger"]) for e in events] == [
        ("info", "wiscat.harvester"),
        ("warning", "wiscat.harvester"),
        ("error", "wiscat.harvester"),
        ("warning", "py.warnings"),
        ("critical", "wiscat"),
    ]
    run, two, failed, warned, crashed = events
    assert run["message"] == "harvest tokyo full run 7: ok"
    assert (run["link"], run["run"]) == ("tokyo", 7)
    assert run["time"].endswith("+00:00")
    assert two["message"] == "two\nlines" and "color_message" not in two
    assert "ValueError: broken peer" in failed["exception"]
    assert "a library complains" in warned["message"]
    assert "the port is taken" in crashed["message"]
    assert "RuntimeError" in crashed["exception"]


@pytest.mark.usefixtures("restore_logging")
def test_text_lines_are_one_event_each() -> None:
    out = io.StringIO()
    configure("INFO", "text", stream=out)
    emit_events()
    lines = out.getvalue().splitlines()
    assert len(lines) == 5, lines
    assert lines[0].endswith("INFO wiscat.harvester: harvest tokyo full run 7: ok")
    assert lines[1].endswith("wiscat.harvester: two\\nlines")
    assert "harvest tokyo: unexpected error\\nTraceback" in lines[2]
    assert "ValueError: broken peer" in lines[2]
    assert "CRITICAL wiscat: stopped by an unexpected error: the port is taken" in lines[4]


@pytest.mark.usefixtures("restore_logging")
def test_a_retried_failure_of_asyncpg_is_one_line_without_traceback() -> None:
    out = io.StringIO()
    configure("INFO", "text", stream=out)
    try:
        raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)")
    except ConnectionRefusedError:
        logging.getLogger("asyncpg.pool").warning(
            "Failed to restore the pool connection floor; retrying", exc_info=True
        )
    [line] = out.getvalue().splitlines()
    assert line.endswith(
        "WARNING asyncpg.pool: Failed to restore the pool connection floor; retrying "
        "(ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 5432))"
    )


def test_an_outage_is_told_when_it_begins_while_it_lasts_and_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("wiscat.test.outage")
    outage = Outage(log, "leasing due links", every=0.2)
    caplog.set_level(logging.INFO, logger=log.name)
    outage.ended()  # nothing had failed: nothing to say
    for _ in range(5):  # one attempt each poll: one line, not five
        outage.failed(ConnectionRefusedError(111, "Connect call failed"))
    time.sleep(0.25)
    outage.failed(OSError("no route"))
    outage.failed(OSError("no route"))
    outage.ended()
    outage.ended()
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "leasing due links failed: ConnectionRefusedError: [Errno 111] Connect call failed; "
        "trying again (this says once every 0s that it still fails)",
        "leasing due links still fails, for 0s (6 attempts): OSError: no route",
        "leasing due links works again, after 0s (7 failed attempts)",
    ]
    assert {r.levelname for r in caplog.records} == {"WARNING"}
