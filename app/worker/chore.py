"""The shape every background chore shares (River's maintenance services): a config of its own
(ChoreConfig), `run_once(now_ms)` that does one pass and returns what it did (counts, which
tests assert on), an injected clock, and an injected sleeper the thread waits with between
passes, so a test drives the loop without sleeping. A pass that fails is logged and counted,
and the next one runs at the next interval: the database may be restarting. Started with a
SchemaGate, the thread first waits, quietly, for the database's schema to be at head: on a
database not migrated yet every pass would fail, and log its traceback, every interval."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Gauge

from app.domain.clock import Clock
from app.domain.errors import StorageUnavailable
from app.logs import RateLimitedLog
from app.services.schema_gate import SchemaGate

logger = logging.getLogger(__name__)


# Waits up to the seconds given or until the event is set, and says whether it was set.
Sleeper = Callable[[threading.Event, float], bool]


def wait_on(stop: threading.Event, seconds: float) -> bool:
    return stop.wait(seconds)


@dataclass(frozen=True, slots=True)
class ChoreConfig:
    interval_ms: int  # from the end of one pass to the start of the next


class Chore:
    """Subclasses name themselves, say which counter counts their passes, and do a pass in
    `_pass(now_ms)`, returning a result that is false when the pass did nothing (then nothing
    is logged)."""

    name = "chore"
    passes: Counter  # counted by outcome: ok, failed
    last_success: Gauge | None = None  # set to the clock's time (seconds) when a pass succeeds

    def __init__(self, clock: Clock, config: ChoreConfig, sleep: Sleeper = wait_on) -> None:
        self.clock = clock
        self.config = config
        self.interval_s = config.interval_ms / 1000
        self._sleep = sleep
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # A database that is down, or a pool that is taken, fails every pass the same way, each
        # interval (5 a second for the coordinator): its traceback says nothing the first line
        # does not, and a line a pass would bury the log.
        self._unavailable = RateLimitedLog(logger, level=logging.ERROR)

    def _pass(self, now_ms: int) -> Any:
        raise NotImplementedError

    def run_once(self, now_ms: int | None = None) -> Any:
        try:
            result = self._pass(self.clock() if now_ms is None else now_ms)
        except Exception:
            self.passes.labels("failed").inc()
            raise
        self.passes.labels("ok").inc()
        if self.last_success is not None:
            self.last_success.set(self.clock() / 1000)
        self._log_done(result)
        return result

    def _log_done(self, result: Any) -> None:
        """The line a pass that did something logs: run_once's after a pass, and a pass's own
        for what its steps that succeeded did before another step failed it (the failure is
        logged apart, by run_forever)."""
        if result:
            logger.info("%s pass: %s", self.name, result)

    def stopping(self) -> bool:
        """Asked by long passes between their steps: stop() does not wait for a whole pass."""
        return self._stop.is_set()

    def run_forever(self, schema: SchemaGate | None = None) -> None:
        if schema is not None and not schema.wait(self._stop, self.interval_s):
            return
        while not self._stop.is_set():
            try:
                self.run_once()
            except StorageUnavailable as e:
                self._unavailable("%s pass failed: %s: %s", self.name, e.error_code, e.message)
            except Exception:
                logger.exception("%s pass failed", self.name)
            self._sleep(self._stop, self.interval_s)

    def start(self, schema: SchemaGate | None = None) -> None:
        self._thread = threading.Thread(target=self.run_forever, args=(schema,), name=f"outbox-{self.name}",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
