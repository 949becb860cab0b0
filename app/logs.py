"""How every process writes its log: one handler on stderr, text or JSON, uvicorn's lines included.

`logging_config(settings)` is a `logging.config.dictConfig` dictionary. The CLI applies it at
start-up, and `outbox serve` hands the same dictionary to uvicorn as its `log_config`, so the
server's own lines ("Started server process", errors) come out in the one format rather than
uvicorn's coloured default. uvicorn's access log stays off: the service writes its own
(`outbox.access`, app.api.request_metrics), which knows the route template and request id.
A warning a client can make the service repeat at will is a RateLimitedLog.
"""

from __future__ import annotations

import logging
import logging.config
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.orjson import OrjsonFormatter


class Settings(Protocol):
    """What of app.settings.Settings the log reads. Not that class itself: the Kafka door
    imports this module (ACCESS_LOGGER), and app.settings would bring it SQLAlchemy."""

    log_level: str
    log_format: str


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
ACCESS_LOGGER = "outbox.access"

# Loggers whose INFO lines say nothing an operator of serve, coordinator or the operator tools
# needs: alembic announces its plugins and its dialect every time a migration context is made
# (on start-up, and on every /readyz, which reads the schema revision). `outbox migrate`
# reports what it migrated itself.
QUIET_LOGGERS = ("alembic",)


def json_formatter() -> logging.Formatter:
    """One JSON object per line: time, level, logger, message, then any `extra` fields
    (the access log's method, route, status, duration_ms, request_id) as their own keys."""
    return OrjsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
        # uvicorn passes an ANSI-coloured copy of each message as `color_message`.
        reserved_attrs=[*RESERVED_ATTRS, "color_message"],
    )


# A control character in a message is written as an escape: messages quote what callers sent
# (a request's path, a token's principal claim), and a newline there would let a caller write
# a line of its own into the log, an audit line among them.
_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7f, *range(0x80, 0xa0)]} | {
    ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT, one line per message: control characters in the message escaped (a
    traceback after it keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = record.message.translate(_ESCAPES)
        return super().formatMessage(record)


def text_formatter() -> logging.Formatter:
    return TextFormatter(TEXT_FORMAT)


def logging_config(settings: Settings) -> dict[str, Any]:
    level = settings.log_level.upper()
    formatter: dict[str, Any] = {"()": json_formatter if settings.log_format == "json" else text_formatter}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"outbox": formatter},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "outbox"}
        },
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            # uvicorn's lines go to the root handler above (no handlers of their own).
            "uvicorn": {"level": level, "handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": False},
            **{name: {"level": "WARNING"} for name in QUIET_LOGGERS},
        },
    }


def configure(settings: Settings) -> None:
    logging.config.dictConfig(logging_config(settings))


# The least time between two lines of one RateLimitedLog.
WARNING_INTERVAL_S = 10.0


class RateLimitedLog:
    """A line (a WARNING unless `level` says otherwise) about an event a client can repeat as
    fast as it likes (a connection refused past OUTBOX_HTTP_MAX_CONNECTIONS or the Kafka door's
    bounds, a Kafka connection closed for what its client sent), logged at most once per
    `interval_s`: one line per event would make a flood of connections a flood of the log,
    whose writing then takes the event loop and the disk the flood is already pressing. The
    first event is logged; those in the next `interval_s` are counted; the first after it is
    logged with how many were not, and starts the next interval. The count comes with the next
    line, however late: nothing is logged between events. One instance a cause, so that one
    cause's flood does not hide another's first line."""

    def __init__(self, log: logging.Logger, interval_s: float = WARNING_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, level: int = logging.WARNING) -> None:
        self._log = log
        self._level = level
        self._interval_s = interval_s
        self._clock = clock
        self._logged_at = -math.inf  # never: the first event is logged
        self._unlogged = 0

    def __call__(self, msg: str, *args: object) -> None:
        now = self._clock()
        if now - self._logged_at < self._interval_s:
            self._unlogged += 1
            return
        if self._unlogged:
            msg += " (and %d more since this was last logged, %.0f s ago)"
            args += (self._unlogged, now - self._logged_at)
        self._log.log(self._level, msg, *args)
        self._logged_at, self._unlogged = now, 0
