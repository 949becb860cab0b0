"""The `outbox` command run by a test: as a process (`outbox`), or by `app.cli.main` in the test's
own process (`in_process`, the conftest's `cli` fixture), which answers alike without a Python
start-up (about 3 s of CPU each). What only a process shows (a signal's exit status, a port,
uvicorn's and alembic's own output, a long-running command) needs the process.

main() configures logging as a process does: a handler on the stderr of the moment, which in a
test is pytest's capture, closed when the test ends. `logging_kept` puts the loggers back, so that
no such handler outlives the test (a later test's thread logging through it wrote "--- Logging
error --- ValueError: I/O operation on closed file").
"""

from __future__ import annotations

import gc
import logging
import logging.config
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from app import cli as outbox_cli

ROOT = Path(__file__).resolve().parents[1]


class HandlerLeftOnAClosedStream(AssertionError):
    """A test left a logging handler on a stream that is closed (the conftest's autouse check)."""


Run = Callable[..., subprocess.CompletedProcess]  # `outbox`'s signature, and `in_process`'s


def outbox(database_url: str | None, *args: str, **settings: str) -> subprocess.CompletedProcess:
    """`python -m app.cli ARGS` in a process of its own: OUTBOX_DATABASE_URL and each of
    `settings` as OUTBOX_<NAME>, no other OUTBOX_ variable of this process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    if database_url is not None:
        env["OUTBOX_DATABASE_URL"] = database_url
    env.update({f"OUTBOX_{k.upper()}": v for k, v in settings.items()})
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


@contextmanager
def logging_kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Around a call of main() (or of app.logs.configure) in this process: every logger as it
    was afterwards, and no handler of this process closed by it (dictConfig closes every handler
    it replaces, pytest's --log-file handler too)."""
    kept = LoggingKept()
    with monkeypatch.context() as patched:
        patched.setattr(logging.config, "_clearExistingHandlers", lambda: None)
        try:
            yield
        finally:
            kept.restore()


class LoggingKept:
    """Every logger's level, handlers, propagation and disabling as they were when this was made,
    put back by `restore`; a logger created since is left as a new logger is (no level, no
    handler, propagating)."""

    def __init__(self) -> None:
        self.before = [(lg, lg.level, lg.handlers[:], lg.propagate, lg.disabled) for lg in _loggers()]

    def restore(self) -> None:
        known = {lg for lg, *_ in self.before}
        for lg in _loggers():
            if lg not in known:
                lg.setLevel(logging.NOTSET)
                lg.handlers[:] = []
                lg.propagate, lg.disabled = True, False
        for lg, level, handlers, propagate, disabled in self.before:
            lg.setLevel(level)
            lg.handlers[:] = handlers
            lg.propagate, lg.disabled = propagate, disabled


def _loggers() -> list[logging.Logger]:
    return [logging.root, *(lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger))]


def closed_stream_handlers() -> list[tuple[logging.Logger, logging.StreamHandler]]:
    """(logger, handler) of every stream handler whose stream is closed: a line logged through
    one is lost, with "--- Logging error ---" on the real stderr."""
    return [(lg, h) for lg in _loggers() for h in lg.handlers
            if isinstance(h, logging.StreamHandler) and getattr(h.stream, "closed", False)]


def take_away_closed_stream_handlers() -> None:
    """Every handler on a closed stream removed from its logger, then HandlerLeftOnAClosedStream
    raised naming the loggers (the conftest runs it after each test: the test that left one
    fails, and the next starts without it)."""
    left = closed_stream_handlers()
    for logger, handler in left:
        logger.removeHandler(handler)
    if left:
        raise HandlerLeftOnAClosedStream(
            f"handlers left on a closed stream, on the loggers {sorted({lg.name for lg, _ in left})}")


def _print_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                   file: object = None, line: str | None = None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


LONG_RUNNING = ("serve", "coordinator")  # they run until a signal: only in a process of their own


def long_running(args: tuple[str, ...]) -> bool:
    return any(a in LONG_RUNNING for a in args) and "--once" not in args


def runner(args: tuple[str, ...], cli: Run) -> Run:
    """`cli` for a command that ends by itself, the real process for one that may not: a refusal
    that broke would leave `serve` or `coordinator` running, with its signal handlers and threads,
    in this test's worker."""
    return outbox if long_running(args) else cli


def in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """`outbox` as above, run by `app.cli.main` in this process: the environment and working
    directory the process would have, its stdout and stderr captured, the warnings it would print
    printed on that stderr, and what main() changes in the process (logging, signal handlers, the
    garbage collector) put back as it was afterwards."""

    def run(database_url: str | None, *args: str, **settings: str) -> subprocess.CompletedProcess:
        assert not long_running(args), (
            f"`outbox {' '.join(args)}` runs until a signal: run it with `outbox` (a process of its own)")
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        gc_enabled, gc_thresholds, gc_frozen = gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()
        with monkeypatch.context() as env, warnings.catch_warnings(), logging_kept(monkeypatch):
            # A process starts with the interpreter's warning filters and prints each warning on
            # stderr when it is raised; pytest's filters and its capture of warnings would hide
            # one from the "one line on stderr" checks.
            warnings.showwarning = _print_warning
            warnings.resetwarnings()
            warnings.simplefilter("default")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.filterwarnings("ignore", category=category)  # the interpreter's own filters
            for name in [k for k in os.environ if k.startswith("OUTBOX_")]:
                env.delenv(name)
            if database_url is not None:
                env.setenv("OUTBOX_DATABASE_URL", database_url)
            for k, v in settings.items():
                env.setenv(f"OUTBOX_{k.upper()}", v)
            env.chdir(ROOT)
            capsys.readouterr()
            try:
                status = outbox_cli.main(list(args))
            except SystemExit as e:  # what `python -m app.cli` exits with
                if e.code is None or isinstance(e.code, int):
                    status = e.code or 0
                else:  # the interpreter prints any other code and exits 1
                    print(e.code, file=sys.stderr)
                    status = 1
            finally:
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)
                if gc.get_freeze_count() > gc_frozen:
                    gc.unfreeze()
                gc.set_threshold(*gc_thresholds)
                (gc.enable if gc_enabled else gc.disable)()
            captured = capsys.readouterr()
        return subprocess.CompletedProcess(["outbox", *args], status, captured.out, captured.err)

    return run
