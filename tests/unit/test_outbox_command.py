"""The test suite's own guard against logging handlers left on a closed stream
(tests/outbox_command.py, and the conftest's autouse check that uses it)."""

from __future__ import annotations

import io
import logging

import pytest

from app import logs
from app.settings import Settings
from tests.outbox_command import (HandlerLeftOnAClosedStream, closed_stream_handlers, logging_kept,
                                  take_away_closed_stream_handlers)


def test_a_stream_handler_on_a_closed_stream_is_found_and_one_on_an_open_stream_is_not() -> None:
    logger = logging.getLogger("outbox.a-logger-of-this-test")
    closed, open_ = logging.StreamHandler(io.StringIO()), logging.StreamHandler(io.StringIO())
    closed.stream.close()
    logger.addHandler(closed)
    logger.addHandler(open_)
    try:
        found = closed_stream_handlers()
    finally:
        logger.removeHandler(closed)
        logger.removeHandler(open_)

    assert [(lg.name, h) for lg, h in found] == [("outbox.a-logger-of-this-test", closed)]


def test_logging_configured_by_the_service_is_put_back_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = logging.FileHandler("/dev/null")  # as pytest's --log-file handler is
    logging.root.addHandler(kept)
    before = (logging.root.level, logging.root.handlers[:], logging.getLogger("uvicorn").level)
    try:
        with logging_kept(monkeypatch):
            logs.configure(Settings(database_url="sqlite://", log_level="debug"))  # a handler on this stderr
            assert logging.root.handlers != before[1]

        assert (logging.root.level, logging.root.handlers, logging.getLogger("uvicorn").level) == before
        assert kept.stream is not None and not kept.stream.closed  # dictConfig did not close it
    finally:
        logging.root.removeHandler(kept)
        kept.close()


def test_a_handler_left_on_a_closed_stream_is_taken_away_and_fails_naming_its_logger() -> None:
    logger = logging.getLogger("outbox.another-logger-of-this-test")
    left, kept = logging.StreamHandler(io.StringIO()), logging.StreamHandler(io.StringIO())
    left.stream.close()
    logger.addHandler(left)
    logger.addHandler(kept)
    try:
        with pytest.raises(HandlerLeftOnAClosedStream, match=r"\['outbox\.another-logger-of-this-test'\]"):
            take_away_closed_stream_handlers()

        assert logger.handlers == [kept]
    finally:
        logger.removeHandler(left)
        logger.removeHandler(kept)
