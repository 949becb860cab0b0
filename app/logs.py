"""How every process writes its log: one handler on stderr, text or JSON, uvicorn's lines included.

`logging_config(settings)` is a `logging.config.dictConfig` dictionary. The CLI applies it at
start-up, and `outbox serve` hands the same dictionary to uvicorn as its `log_config`, so the
server's own lines ("Started server process", errors) come out in the one format rather than
uvicorn's coloured default. uvicorn's access log stays off: the service writes its own
(`outbox.access`, app.api.request_metrics), which knows the route template and request id.
"""

from __future__ import annotations

import logging
import logging.config
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

