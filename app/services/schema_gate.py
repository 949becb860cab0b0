"""Whether this process may use the database yet: its schema at the code's head.

`outbox serve` starts on a database that is not migrated (PostgreSQL, where migrating is a
deployment step of its own, or SQLite with OUTBOX_AUTO_MIGRATE=false), or that does not answer
yet, with one warning (app.storage.migrate.prepare). Until the schema is at head, every query
would fail on a missing table or column, or worse, work on an older schema: so API requests
are answered SCHEMA_NOT_MIGRATED (app.api.deps.require_schema), and the background chores
(app.worker) wait, quietly, looking again with back-off. The first look that finds the schema
at head opens the gate for good, in whichever thread makes it, and the process goes on without
a restart. Once open it stays open: a migration to a newer head while the process runs is the
upgrade procedure's business (README, Upgrading), and /readyz reports it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine

from app.domain.errors import SchemaNotMigrated
from app.storage import migrate
from app.storage.errors import translate_driver_errors

logger = logging.getLogger(__name__)

# How often the background chores look again while the schema is not there: from their own
# interval, doubling up to this. An API request or a /readyz probe looks at once.
RECHECK_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class SchemaRevisions:
    """The schema's revision in the database (None: not migrated at all) and the code's head."""

    current: str | None
    head: str | None

    @property
    def at_head(self) -> bool:
        return self.current == self.head

    def why_not_at_head(self) -> str:
        """What the schema gate says of a schema not at head (migrate.require_head_at): "run
        `outbox migrate`" to a process ahead of the database, "a newer version migrated it" to
        one behind it, which migrating would not help."""
        try:
            migrate.require_head_at(self.current)
        except migrate.SchemaMismatch as e:
            return str(e)
        return f"the database schema is at {self.current}, this version needs {self.head}"


class SchemaGate:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._open = False
        self._lock = threading.Lock()
        self._on_open: list[Callable[[], None]] = []
        self._was_closed = False  # a look found it closed: say so when it opens

    @property
    def open(self) -> bool:
        return self._open

    def on_open(self, action: Callable[[], None]) -> None:
        """Run `action` when the gate opens (at once if it is open), before any request or
        chore passes it: what a process loads from the database at start-up (ACLs, keys)."""
        with self._lock:
            if not self._open:
                self._on_open.append(action)
                return
        action()

    def look(self) -> None:
        """Open the gate if the schema is at head now; raise why not: SchemaMismatch, or the
        driver's error when the database does not answer."""
        if self._open:
            return
        with self._lock:
            if self._open:
                return
            try:
                migrate.require_head(self._engine)
            except BaseException:
                self._was_closed = True
                raise
            if self._was_closed:
                logger.info("the database's schema is at %s now: done waiting for it", migrate.head_revision())
                self._was_closed = False
            for action in self._on_open:
                action()  # a failure leaves the gate closed: the next look runs them all again
            self._on_open.clear()
            self._open = True

    def revisions(self) -> SchemaRevisions:
        """The database's schema revision beside the head, read now (a /readyz probe); the
        driver's error when the database does not answer."""
        return SchemaRevisions(migrate.current_revision(self._engine), migrate.head_revision())

    def require(self) -> None:
        """For an API request: return if the schema is at head, else raise SchemaNotMigrated
        (or StorageUnavailable, the database not answering)."""
        if self._open:
            return
        try:
            with translate_driver_errors():
                self.look()
        except migrate.SchemaMismatch as e:
            raise SchemaNotMigrated(str(e)) from None

    def wait(self, stop: threading.Event, first_s: float) -> bool:
        """For a background chore: until the gate is open (True) or `stop` is set (False),
        looking again after `first_s` (RECHECK_MAX_S at most), then twice as long each time up to
        RECHECK_MAX_S. Says
        nothing: the process warned once at start-up, and says when the gate opens."""
        pause = min(max(first_s, 0.05), RECHECK_MAX_S)
        while not stop.is_set():
            try:
                self.look()
                return True
            except Exception:  # noqa: BLE001 - not migrated, or not answering: look again later
                pass
            stop.wait(pause)
            pause = min(pause * 2, RECHECK_MAX_S)
        return False
