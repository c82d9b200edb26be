"""Logging set-up: one event per line, as text or JSON (``WISCAT_LOG_FORMAT``).

One line per event holds for everything the process prints to stderr: multi-line messages and
tracebacks are escaped (``\\n``) in text and carried in one JSON string in JSON, Python warnings
are logged (logger ``py.warnings``), and an exception that ends the process is logged as one
event too. A log shipper can then split the stream on newlines.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TextIO

from wiscat.shared.db.errors import kind_of
from wiscat.shared.durations import format_duration

_STANDARD = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}
# uvicorn adds an ANSI-coloured copy of some messages for terminals; a log line has no use for it
_DROPPED = {"color_message"}
# libraries whose INFO events are their own housekeeping (the embedded PostgreSQL prints every
# pg_ctl command line with its output), and the access log (one line per request)
_QUIET = {"uvicorn.access": "WARNING", "pgserver": "WARNING"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any ``extra=`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        event = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in _DROPPED and not key.startswith("_"):
                event[key] = value
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message`` on one line; newlines inside are written ``\\n``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record on one line."""
        return super().format(record).replace("\r", "").replace("\n", "\\n")


class Outage:
    """The warnings of a loop that tries again while something it needs fails (the database,
    mostly): the first failure, then one line per ``every`` seconds while the failures last,
    not one per attempt, and the end of it; an operator reads when it began, that it goes on,
    and when it ended."""

    def __init__(self, log: logging.Logger, what: str, *, every: float = 300.0) -> None:
        self.log, self.what, self.every = log, what, every
        self.began: float | None = None
        self.told = 0.0
        self.attempts = 0

    def failed(self, exc: BaseException) -> None:
        """Note one more failed attempt, and warn if it is the first or ``every`` has passed."""
        now = time.monotonic()
        self.attempts += 1
        reason = f"{kind_of(exc)}: {exc}"
        if self.began is None:
            self.began = self.told = now
            self.log.warning(
                "%s failed: %s; trying again (this says once every %s that it still fails)",
                self.what,
                reason,
                format_duration(timedelta(seconds=self.every)),
            )
        elif now - self.told >= self.every:
            self.told = now
            self.log.warning(
                "%s still fails, for %s (%d attempts): %s",
                self.what,
                format_duration(timedelta(seconds=now - self.began)),
                self.attempts,
                reason,
            )

    def ended(self) -> None:
        """The thing worked: say so once, if it had failed (at the failure's level, so that
        whoever is shown the one is shown the other)."""
        if self.began is not None:
            self.log.warning(
                "%s works again, after %s (%d failed attempts)",
                self.what,
                format_duration(timedelta(seconds=time.monotonic() - self.began)),
                self.attempts,
            )
            self.began, self.attempts = None, 0


class _WithoutTraceback(logging.Filter):
    """A library's warning about a failure it retries, told in one line: the exception's type
    and message instead of its traceback (asyncpg's pool logs one per attempt to reconnect)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.levelno < logging.ERROR:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({type(exc).__name__}: {exc})"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


# libraries whose warnings of retried failures carry a traceback each
_RETRYING = ("asyncpg.pool",)


def configure(level: str = "INFO", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Send every log event to ``stream`` (stderr), one line each."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name, quiet_level in _QUIET.items():
        logging.getLogger(name).setLevel(quiet_level)
    for name in _RETRYING:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _WithoutTraceback) for f in logger.filters):
            logger.addFilter(_WithoutTraceback())
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught


def _log_uncaught(
    kind: type[BaseException], value: BaseException, traceback: TracebackType | None
) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, traceback)
        return
    logging.getLogger("wiscat").critical(
        "stopped by an unexpected error: %s", value, exc_info=(kind, value, traceback)
    )
