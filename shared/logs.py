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
from datetime import UTC, datetime
from types import TracebackType
from typing import TextIO

_STANDARD = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}
# uvicorn adds an ANSI-coloured copy of some messages for terminals; a log line has no use for it
_DROPPED = {"color_message"}
# libraries whose INFO events are their own housekeeping (the embedded PostgreSQL prints every
# pg_ctl command line with its output), and the access log (one line per request)
_QUIET = {"uvicorn.access": "WARNING", "pgserver": "WARNING"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any ``extra=`` fields."""

    def format(self, record: logging.LogRecord) -> str:
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
        return super().format(record).replace("\r", "").replace("\n", "\\n")


def configure(level: str = "INFO", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Send every log event to ``stream`` (stderr), one line each."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name, quiet_level in _QUIET.items():
        logging.getLogger(name).setLevel(quiet_level)
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
