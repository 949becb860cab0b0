"""Engines and database transactions, and the few places SQLite and PostgreSQL differ.

Write transactions: on SQLite `BEGIN IMMEDIATE`, which takes the write lock up front (a
deferred transaction that reads and later writes can fail with SQLITE_BUSY without waiting
on busy_timeout). On PostgreSQL the default READ COMMITTED; the row locks each write takes
are described where they are taken. Reads: one snapshot on both (see Database.read).
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event, select
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from app.domain.errors import StorageUnavailable
from app.database_url import DRIVERS, sqlite_in_memory
from app.settings import DB_LOCK_TIMEOUT_MS, Settings
from app.storage import changes, dialect
from app.storage.errors import translate_driver_errors

_WRITE = "outbox_write"
# SQLite's default, which every write but a background one keeps (Database.write).
_SQLITE_WAL_AUTOCHECKPOINT = 1000
_AFTER_COMMIT = "outbox_after_commit"


def take_write_lock_at_begin(conn: Connection) -> None:
    """Make this connection's transactions BEGIN IMMEDIATE on SQLite (no effect elsewhere).

    For a transaction that reads before it writes, such as a migration (read the version,
    then CREATE): a deferred one fails at once with SQLITE_BUSY if another process wrote in
    between, without waiting on busy_timeout.
    """
    conn.info[_WRITE] = True


def after_commit(conn: Connection, fn: Callable[[], None]) -> None:
    """Run `fn` once the write transaction `conn` belongs to has committed (Database.write);
    never if it rolls back. For effects outside the database, such as metrics."""
    conn.info.setdefault(_AFTER_COMMIT, []).append(fn)


def _relax_if_owed(conn: Connection) -> None:
    """PostgreSQL: relax the write transaction `conn` is in with a statement of its own, if it is
    owed and no statement it ran took the debt (dialect.owe_relax)."""
    if dialect.take_relax_owed(conn):
        conn.execute(select(dialect.relax_commit()))


def normalise_url(url: str) -> str:
    """`url` with the driver the service opens it with (app.database_url.DRIVERS): operators write
    postgresql://… and still get psycopg 3."""
    u = make_url(url)
    u = u.set(drivername=DRIVERS.get(u.drivername, u.drivername))
    return u.render_as_string(hide_password=False)


def sqlite_path(database_url: str) -> Path | None:
    """The file of a SQLite URL; None for an in-memory database."""
    url = make_url(database_url)
    return None if sqlite_in_memory(url) else Path(url.database or "")


def create_private(path: Path) -> None:
    """Create `path` empty, readable and writable by its owner only, unless it exists. SQLite
    then creates the database's -wal and -shm files with the same mode: a database holds every
    record, open transactions and API key hashes, which no other local user should read (a
    file SQLite created itself would take the umask's, usually world-readable)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass
    except OSError:
        pass  # a directory that does not exist, or no right to it: SQLite's own error says so


def _private_sqlite_file(url: str) -> None:
    path = sqlite_path(url)
    if path is not None and not str(path).startswith("file:"):
        create_private(path)


# The connections a pool opens past its pool_size while a burst lasts (SQLAlchemy's
# max_overflow), as a multiple of pool_size; each is closed once it is returned.
POOL_OVERFLOW_PER_POOLED = 4


def pool_connections_max(pool_size: int) -> int:
    """The most database connections build_engine's pool holds at once."""
    return pool_size * (1 + POOL_OVERFLOW_PER_POOLED)


def build_engine(
    url: str,
    *,
    pool_size: int = 10,
    sqlite_busy_timeout_ms: int = 30_000,
    sqlite_synchronous: str = "FULL",
    pool_pre_ping: bool = False,
    lock_timeout_ms: int = DB_LOCK_TIMEOUT_MS,
) -> Engine:
    url = normalise_url(url)
    if url.startswith("sqlite"):
        _private_sqlite_file(url)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": sqlite_busy_timeout_ms / 1000},
            pool_size=pool_size,
            max_overflow=pool_size * POOL_OVERFLOW_PER_POOLED,
            # The connection returned last is the one handed out next: SQLite drops a
            # connection's page cache when another connection has written since, so rotating
            # through the idle ones (the pool's default order) starts every write cold.
            pool_use_lifo=True,
        )
        _configure_sqlite(engine, sqlite_busy_timeout_ms, sqlite_synchronous)
        return engine
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size * POOL_OVERFLOW_PER_POOLED,
        # A disconnect met by any statement invalidates every pooled connection (SQLAlchemy's
        # default), so after a database restart one request fails (retriable) rather than one
        # per pooled connection; pre-ping would catch even that one, at a round trip per request.
        pool_pre_ping=pool_pre_ping,
    )
    event.listen(engine, "connect", _no_jit)
    event.listen(engine, "connect", functools.partial(_bound_lock_waits, int(lock_timeout_ms)))
    event.listen(engine, "do_execute", _plan_records_statements_each_time)
    return engine


def _no_jit(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    """PostgreSQL: no JIT compilation of the service's statements. They are index range scans
    and nested loops that run for milliseconds, but a read_committed read estimates each
    committed batch's run of records (a range whose bounds come from the batch row) at a
    fixed share of the whole table, so as the log grows its cost passes `jit_above_cost` and
    PostgreSQL compiles the plan first: with 2,040,000 rows in `records` a 1,000-record Fetch
    took 25.8 ms with JIT and 13.5 ms without (docs/benchmarks.md, "JIT off"). Spark's readers
    set the same on their connections (spark_jobs/reader). It overrides the database's and the
    role's default and an `options` of the database URL: the service has no use for JIT."""
    with dbapi_connection.cursor() as cur:
        cur.execute("SET jit = off")
    dbapi_connection.commit()


def _bound_lock_waits(lock_timeout_ms: int, dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    """PostgreSQL: every statement of the service's connections waits at most `lock_timeout_ms`
    for a lock (OUTBOX_DB_LOCK_TIMEOUT_MS), then fails with lock_not_available, which
    app.storage.errors answers as a retriable StorageUnavailable. A partition's row lock, which
    every Send, marker and topic change takes, can be held by any role granted appends for as
    long as its transaction lasts (outbox.append publishes at its COMMIT): an unbounded wait
    kept its pooled connection after the client had given up, and enough of them took the whole
    pool, unrelated Sends and /readyz included. The background chores meet the same bound and
    try again at their next pass. A session setting, like jit: a SET LOCAL (migrations) or
    the purge's own patience (app.storage.record_leaves) sets it back when done."""
    with dbapi_connection.cursor() as cur:
        cur.execute(f"SET lock_timeout = {lock_timeout_ms}")
    dbapi_connection.commit()


# A statement that names the table `records` (not `record_batches`, `committed_records` or a
# leaf's own name, whose neighbours are word characters), in any case, as PostgreSQL reads an
# unquoted name. A comment or a string that holds the word costs that statement its preparing
# only. Statements run with executemany are not seen here (psycopg prepares them as it
# chooses): the service's one on `records`, the markers' INSERT, is routed row by row to its
# leaf whatever its plan, which for an INSERT locks the parent only.
_NAMES_RECORDS = re.compile(r"\brecords\b", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def _names_records(statement: str) -> bool:
    return _NAMES_RECORDS.search(statement) is not None


def _plan_records_statements_each_time(cursor, statement, parameters, context) -> bool:  # type: ignore[no-untyped-def]
    """PostgreSQL: a statement on `records` is never prepared, so that each execution is planned
    for its own parameters. `records` is partitioned, a leaf per log partition (migration 0035),
    and such a statement names one topic and partition: planned for them, it reads and locks
    that leaf only. psycopg prepares a statement on its fifth execution, and PostgreSQL may then
    choose a generic plan, which holds a lock on every leaf: at 2,000 leaves a transaction held
    2,003 locks and a fourth such session failed with "out of shared memory"
    (docs/DESIGN-partitioned-records.md). Every other statement is still prepared and keeps its
    generic plan: `plan_cache_mode = force_custom_plan` on the connection, which planned them all
    again on each execution, cost a Commit 0.7-0.9 ms. outbox.publish_pending carries that
    setting itself (its statements' plans are PL/pgSQL's, not psycopg's).

    Returns whether it ran the statement (SQLAlchemy's do_execute event: otherwise the
    dialect runs it as usual)."""
    if not _names_records(statement):
        return False
    cursor.execute(statement, parameters, prepare=False)
    return True


# How long a migration waits for SQLite's write lock unless told (OUTBOX_SQLITE_BUSY_TIMEOUT_MS).
MIGRATION_BUSY_TIMEOUT_MS = 30_000


def build_migration_engine(url: str, *, sqlite_busy_timeout_ms: int = MIGRATION_BUSY_TIMEOUT_MS) -> Engine:
    engine = create_engine(normalise_url(url), poolclass=NullPool)
    if engine.dialect.name == "sqlite":
        _private_sqlite_file(normalise_url(url))
        _configure_sqlite(engine, sqlite_busy_timeout_ms, "FULL")
    return engine


def _configure_sqlite(engine: Engine, busy_timeout_ms: int, synchronous: str) -> None:
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(f"sqlite synchronous must be FULL or NORMAL, not {synchronous!r}")
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        # Hand transaction control to SQLAlchemy's begin event below (pysqlite's own implicit
        # BEGIN would be DEFERRED, and would not be emitted before SELECTs).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get(_WRITE) else "BEGIN")


class TurnLock:
    """A lock handed to its waiters in the order they asked for it.

    threading.Lock is not: a thread that releases it and asks again at once, as the log
    cleaner does between two chunks, nearly always gets it back before a waiting thread has
    woken up, so a Send could wait through one chunk after another (p99 162 ms for 5 ms
    chunks, in a test of the two locks; 5 ms with this one). Here release() hands the lock
    straight to the first waiter, so a writer waits for those ahead of it only."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._waiters: deque[threading.Lock] = deque()
        self._held = False

    def acquire(self, timeout: float) -> bool:
        with self._mutex:
            if not self._held:
                self._held = True
                return True
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
        if turn.acquire(timeout=timeout):
            return True  # handed over by release()
        with self._mutex:
            try:
                self._waiters.remove(turn)
            except ValueError:
                return True  # handed over between the timeout and the mutex: ours now
            return False

    def release(self) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().release()  # still held: by the first waiter now
            else:
                self._held = False


class Database:
    """Owns the engine; hands out read and write database transactions."""

    def __init__(
        self, engine: Engine, *, sqlite_busy_timeout_ms: int = 30_000, sqlite_synchronous: str = "FULL"
    ) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._sqlite_synchronous = sqlite_synchronous
        # SQLite has one writer at a time. Writers of this process queue here, in order,
        # instead of in SQLite's busy handler, which polls with sleeps of up to 100 ms and
        # so turns contention into long tails. Other processes still meet busy_timeout.
        self._sqlite_writer = TurnLock() if self.dialect == "sqlite" else None
        # This process's waiting readers (app.storage.changes.LogChanges.changed), told of the
        # partitions each committed write grew.
        self.on_log_change: Callable[[set[tuple[int, int]]], None] | None = None
        self._sqlite_wait_s = sqlite_busy_timeout_ms / 1000
        # Write transactions begun in this process, background ones left out: a chore asks
        # whether it changed to tell whether anyone else writes (the log cleaner yields then).
        # A hint: two threads adding at once may count one.
        self.writes = 0

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @contextmanager
    def write(self, *, durable: bool = True, background: bool = False) -> Iterator[Connection]:
        """One short write transaction; committed on exit, rolled back on any exception.

        A write is durable when it commits, markers included: a marker readers have seen must
        never vanish in a database crash, or its offset could be handed out again and a reader
        already past it would skip the new record (docs/GUARANTEES.md#in-order-visibility). Not
        so the two kinds below, nor on PostgreSQL a transactional Send of a producer of
        durability COMMIT, which relaxes its own transaction (storage.transactions.get_with_topics,
        with dialect.relax_commit as these do): readers never pass what such a Send wrote until
        its transaction's durable Prepare, Commit or Abort (storage.topics.high_watermark).

        durable=False is for a write whose loss in a crash nobody can observe except as a
        refusal, or as a state the service would have been in had the write not run yet (a
        chore's, which its next pass makes again): it commits without waiting for the disk
        (SQLite synchronous=NORMAL, which skips the WAL fsync; PostgreSQL synchronous_commit off
        for the transaction). Any later durable commit makes it durable too, since both logs
        are written and flushed in order: whatever a client does durably on the strength of
        such a write (a Send into a transaction a Begin opened) flushes it first. On PostgreSQL
        the relaxing is evaluated inside a statement the write runs anyway where one takes it
        (dialect.owe_relax: a Begin's read of its row), else it is one statement more before the
        commit, which on a loaded machine costs about what the flush saves (docs/benchmarks.md,
        branch kbegin).

        background=True is for the large transactions of a chore (the log cleaner's chunks)
        whose loss in a crash leaves a state the service could have been in anyway. They are
        not durable, on PostgreSQL too (synchronous_commit off for the transaction: its
        commit would wait for all of its WAL), and on SQLite they leave the WAL's checkpoint
        to the chore, which calls checkpoint() out of its turn: SQLite runs one inside the
        commit that takes the WAL past wal_autocheckpoint (1,000 pages), while every other
        writer of the process waits for that commit.
        """
        if not background:
            self.writes += 1
        sqlite = self.dialect == "sqlite"
        relaxed = background or not durable
        relaxed_sqlite = relaxed and sqlite and self._sqlite_synchronous == "FULL"
        deferred_checkpoint = background and sqlite
        with self._writer_turn(), translate_driver_errors():
            with self.engine.connect() as conn:
                take_write_lock_at_begin(conn)
                driver = conn.connection.driver_connection
                # The safety level can only change outside a transaction.
                if relaxed_sqlite:
                    driver.execute("PRAGMA synchronous=NORMAL")  # type: ignore[union-attr]
                if deferred_checkpoint:
                    driver.execute("PRAGMA wal_autocheckpoint=0")  # type: ignore[union-attr]
                try:
                    with conn.begin():
                        if relaxed and not sqlite:
                            dialect.owe_relax(conn)
                            if background:
                                # A chore's statements read no transaction row, the one read
                                # that takes the debt: relaxed before its large statements.
                                _relax_if_owed(conn)
                        yield conn
                        # Still owed if no statement of the write took it: PostgreSQL applies
                        # the setting in effect when the transaction commits, so now is soon enough.
                        _relax_if_owed(conn)
                        # Partitions whose logs grow at this commit: NOTIFY, inside the
                        # transaction so that it is delivered only if it commits (those a
                        # statement taking offsets has not notified for already).
                        changes.announce(conn)
                    grown = changes.take_changed(conn)
                    for fn in conn.info.pop(_AFTER_COMMIT, ()):
                        fn()
                    if grown and self.on_log_change is not None:
                        self.on_log_change(grown)
                finally:
                    conn.info.pop(_WRITE, None)
                    conn.info.pop(_AFTER_COMMIT, None)
                    dialect.take_relax_owed(conn)
                    changes.take_changed(conn)
                    if relaxed_sqlite:
                        driver.execute("PRAGMA synchronous=FULL")  # type: ignore[union-attr]
                    if deferred_checkpoint:
                        driver.execute(f"PRAGMA wal_autocheckpoint={_SQLITE_WAL_AUTOCHECKPOINT}")  # type: ignore[union-attr]

    def checkpoint(self) -> None:
        """SQLite: copy the WAL's committed pages into the database file, as background writes
        leave to their caller. PASSIVE: it waits for no reader or writer, and takes no writer's
        turn, so the process's writers go on meanwhile. Nothing to do on PostgreSQL."""
        if self.dialect != "sqlite":
            return
        with translate_driver_errors(), self.engine.connect() as conn:
            conn.connection.driver_connection.execute("PRAGMA wal_checkpoint(PASSIVE)")  # type: ignore[union-attr]

    @contextmanager
    def _writer_turn(self) -> Iterator[None]:
        if self._sqlite_writer is None:
            yield
            return
        if not self._sqlite_writer.acquire(timeout=self._sqlite_wait_s):
            raise StorageUnavailable("database is locked: timed out waiting for this process's other writers")
        try:
            yield
        finally:
            self._sqlite_writer.release()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction that sees one snapshot on both databases.

        PostgreSQL's default READ COMMITTED takes a new snapshot per statement, so a fetch that
        reads the log end, then records, then open transactions could report a last stable
        offset past its own high watermark. REPEATABLE READ gives the whole read one snapshot,
        and a read-only transaction never fails with a serialization error.
        """
        with translate_driver_errors():
            with self.engine.connect() as conn:
                if self.dialect == "postgresql":
                    conn = conn.execution_options(isolation_level="REPEATABLE READ")
                with conn.begin():
                    yield conn

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A connection outside any transaction: for what cannot run inside one (VACUUM), and
        for reads that need no one snapshot across their statements, such as the log
        cleaner's look at a chunk, which its write transaction checks again. On PostgreSQL
        they save a BEGIN and a COMMIT, two round trips. (On SQLite the write-lock hook still
        begins a deferred transaction: a snapshot, which costs nothing there.)"""
        with translate_driver_errors():
            with self.engine.connect() as conn:
                yield conn.execution_options(isolation_level="AUTOCOMMIT")

    def dispose(self) -> None:
        self.engine.dispose()


def open_database(settings: Settings, *, pool_size: int) -> Database:
    """The database of a long-running process (`serve`, `coordinator`), as its settings say."""
    engine = build_engine(
        settings.database_url,
        pool_size=pool_size,
        sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms,
        sqlite_synchronous=settings.sqlite_synchronous,
        pool_pre_ping=settings.db_pool_pre_ping,
        lock_timeout_ms=settings.db_lock_timeout_ms,
    )
    return Database(
        engine,
        sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms,
        sqlite_synchronous=settings.sqlite_synchronous,
    )
