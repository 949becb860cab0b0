"""The text log writes one line per message, whatever the message quotes."""

from __future__ import annotations

import logging
import sys

from app.logs import text_formatter


def _format(message: str, *args: object, exc_info: object = None) -> str:
    record = logging.LogRecord("outbox.audit", logging.INFO, __file__, 1, message, args, exc_info)
    return text_formatter().format(record)


def test_a_newline_in_a_message_is_written_as_an_escape() -> None:
    line = _format("%s authenticate %s refused", "-", "GET /v1/topics/x\nINFO outbox.audit: User:admin allowed")

    assert "\n" not in line
    assert line.endswith("refused") and "x\\nINFO outbox.audit" in line


def test_control_characters_in_a_message_are_written_as_escapes() -> None:
    line = _format("principal %s", "bob\r\x1b[2K\x7f\x85")

    assert line.endswith("principal bob\\r\\x1b[2K\\x7f\\x85")


def test_a_traceback_after_the_message_keeps_its_lines() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        line = _format("failed", exc_info=sys.exc_info())

    assert line.splitlines()[1] == "Traceback (most recent call last):"
