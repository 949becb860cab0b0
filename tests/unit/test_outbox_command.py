"""The test suite's own guard against logging handlers left on a closed stream
(tests/outbox_command.py, and the conftest's autouse check that uses it)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from app import logs
from app.settings import Settings
from tests.outbox_command import (HandlerLeftOnAClosedStream, closed_stream_handlers, logging_kept,
                                  take_away_closed_stream_handlers)


@contextmanager
def closed_and_open_handlers(name: str) -> Iterator[tuple[logging.Logger, logging.Handler, logging.Handler]]:
    """The logger `name` with two stream handlers, the first on a closed stream; both taken
    off it afterwards."""
    logger = logging.getLogger(name)
    closed, open_ = logging.StreamHandler(io.StringIO()), logging.StreamHandler(io.StringIO())
    closed.stream.close()
    logger.addHandler(closed)
    logger.addHandler(open_)
    try:
        yield logger, closed, open_
    finally:
        logger.removeHandler(closed)
        logger.removeHandler(open_)


def test_a_stream_handler_on_a_closed_stream_is_found_and_one_on_an_open_stream_is_not() -> None:
    with closed_and_open_handlers("outbox.a-logger-of-this-test") as (_, closed, _open):
        found = closed_stream_handlers()

    assert [(lg.name, h) for lg, h in found] == [("outbox.a-logger-of-this-test", closed)]


def test_logging_configured_by_the_service_is_put_back_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = logging.FileHandler("/dev/null")  # as pytest's --log-file handler is
    logging.root.addHandler(kept)
    before = (logging.root.level, logging.root.handlers[:], logging.getLogger("uvicorn").level)
    try:
        with logging_kept(monkeypatch):
            logs.configure(Settings(database_url="sqlite:///unused.db", log_level="debug"))  # a handler on this stderr
            assert logging.root.handlers != before[1]

        assert (logging.root.level, logging.root.handlers, logging.getLogger("uvicorn").level) == before
        assert kept.stream is not None and not kept.stream.closed  # dictConfig did not close it
    finally:
        logging.root.removeHandler(kept)
        kept.close()


def test_a_handler_left_on_a_closed_stream_is_taken_away_and_fails_naming_its_logger() -> None:
    with closed_and_open_handlers("outbox.another-logger-of-this-test") as (logger, _left, kept):
        with pytest.raises(HandlerLeftOnAClosedStream, match=r"\['outbox\.another-logger-of-this-test'\]"):
            take_away_closed_stream_handlers()

        assert logger.handlers == [kept]
