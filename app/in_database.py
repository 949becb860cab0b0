"""Appending records inside the application's own database transaction: the outbox pattern.

An application whose tables live in the log's database (the same PostgreSQL database, or the
same SQLite file) publishes its records in the transaction that changes its rows, so that the
two commit together or not at all:

    from app.in_database import OutboxRecord, append

    with engine.begin() as conn:                       # the application's transaction
        conn.execute(orders.insert().values(id=42, total=1250))
        append(conn, "orders", 0, [OutboxRecord(key="42", value={"total": 1250},
                                                message_id="order-42-created")])

`connection` is a SQLAlchemy `Connection` or `Session`, a psycopg 3 connection, or a `sqlite3`
connection, inside a transaction the caller then commits or rolls back. Nothing is visible
to any reader before the commit; after a rollback nothing was ever written. A record with a
`message_id` that a stored record of the topic already carries is not appended again, so a
retry of an application transaction that committed publishes nothing twice.

- **PostgreSQL**: calls the `outbox.append` SQL function (migration 0006), which any language
  can call the same way. The records wait for the commit and take their offsets as it
  happens, so the application's transaction holds no lock of the log while it runs
  (docs/ARCHITECTURE.md, "Appends in the application's transaction").
- **SQLite**: the records are appended at once, in the caller's transaction, which holds the
  file's one write lock from its first write to its commit anyway: every other writer of the
  file, `outbox serve` included, waits for it meanwhile.

Each record is checked as a Send's record is (app.domain.records: the one definition of a
valid record; a message_id, which a Send does not carry, is 1 to 255 characters,
check_message_id) before anything is written; a refused append raises the domain error a Send
would answer (UnknownTopicOrPartition, InvalidRecord, InvalidRequest) and writes nothing. On
PostgreSQL the caller's transaction is then aborted, as after any failed statement, and must
be rolled back.

Records appended this way are plain records (no producer id, not transactional) to every
reader. They are not counted in the service's metrics, which count what `serve` appends.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.pool import NullPool

from app.domain.errors import (
    InvalidRecord,
    InvalidRequest,
    MessageTooLarge,
    OutboxError,
    TopicAuthorizationFailed,
    UnknownTopicOrPartition,
)
from app.domain.records import (
    SendBatch,
    batch_of,
    check_address,
    check_finite_numbers,
    check_headers,
    check_message_id,
    check_text,
    check_timestamp,
)
from app.services.log_service import append_in_open_transaction

__all__ = ["OutboxRecord", "append"]


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """One record to append: `value` is any JSON-serialisable value (None: JSON null, a
    tombstone on a compacted topic)."""

    value: Any = None
    key: str | None = None
    headers: dict[str, str] | None = None
    message_id: str | None = None
    timestamp_ms: int | None = None  # the time of the append when None


def append(connection: Any, topic: str, partition: int, records: Iterable[OutboxRecord]) -> list[bool]:
    """Append `records` to `topic`'s `partition` inside `connection`'s open transaction.
    Returns, per record, whether it was appended (False: its message_id was published before,
    or comes twice in `records`)."""
    records = list(records)
    if not records:
        raise InvalidRequest("append needs at least one record")
    batch = _checked(topic, partition, records)
    message_ids = [r.message_id for r in records]
    if isinstance(connection, Session):
        connection = connection.connection()
    if isinstance(connection, Connection):
        if connection.dialect.name == "postgresql":
            return _append_postgresql(connection, batch, message_ids)
        _require_transaction(connection.connection.driver_connection)
        with _savepoint(connection):
            return append_in_open_transaction(connection, batch, message_ids, _now_ms())
    if isinstance(connection, sqlite3.Connection):
        _require_transaction(connection)
        with _over(connection) as conn, _savepoint(conn):
            return append_in_open_transaction(conn, batch, message_ids, _now_ms())
    if type(connection).__module__.startswith("psycopg"):
        return _append_postgresql(connection, batch, message_ids)
    raise TypeError(
        "append needs a SQLAlchemy Connection or Session, a psycopg connection or a sqlite3 "
        f"connection, not {type(connection).__name__}"
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class _Encoded:
    """A record as batch_of takes it: the value as UTF-8 JSON text."""

    key: str | None
    value: bytes
    headers: dict[str, str] | None
    timestamp_ms: int | None


def _checked(topic: str, partition: int, records: list[OutboxRecord]) -> SendBatch:
    """The records as a Send of them would be decoded: the same checks, the same errors."""
    # Whether the values are JSON at all first, then the checks a Send's body meets.
    values = [_json(r.value) for r in records]
    for r in records:
        if r.headers is not None:
            _json(r.headers)  # a lone surrogate is not JSON text
    check_address(topic, partition)
    encoded = []
    for i, (r, value) in enumerate(zip(records, values, strict=True)):
        where = f"records.{i}"
        if r.key is not None:
            check_text(r.key, f"{where}.key")
        if r.headers is not None:
            check_headers(r.headers, f"{where}.headers")
        if r.timestamp_ms is not None:
            check_timestamp(r.timestamp_ms, where)
        if r.message_id is not None:
            check_message_id(r.message_id, f"{where}.message_id")
        check_finite_numbers(value)
        encoded.append(_Encoded(r.key, value, r.headers, r.timestamp_ms))
    return batch_of(topic, partition, encoded, _now_ms())


def _json(value: Any) -> bytes:
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False).encode()
    except (TypeError, ValueError) as e:
        raise InvalidRecord(f"a record's value is not JSON: {e}") from None


# --- PostgreSQL: the outbox.append SQL function -------------------------------------------

# Every record of one append in one statement: the LATERAL call runs once per row of the
# unnest, in its order, which is the order the records take offsets in at the commit.
_APPEND_SQL = """
SELECT a.appended
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::bigint[])
     WITH ORDINALITY AS r(key, value, headers, message_id, timestamp_ms, n)
CROSS JOIN LATERAL outbox.append(%s, %s, r.key, r.value::json, r.headers::json, r.message_id, r.timestamp_ms)
     AS a(appended)
ORDER BY r.n
"""
_ERRORS = {cls.error_code: cls for cls in (UnknownTopicOrPartition, InvalidRecord, InvalidRequest,
                                           TopicAuthorizationFailed, MessageTooLarge)}


def _append_postgresql(connection: Any, batch: SendBatch, message_ids: list[str | None]) -> list[bool]:
    records = batch.records
    params = ([r.key for r in records], [r.value for r in records], [r.headers for r in records],
              message_ids, [r.timestamp_ms for r in records], batch.topic, batch.partition)
    if isinstance(connection, Connection):
        # Through SQLAlchemy, so that the statement begins SQLAlchemy's transaction (its
        # autobegin) and the caller's commit() commits it.
        _require_postgresql_transaction(connection.connection.driver_connection)
        run = lambda: list(connection.exec_driver_sql(_APPEND_SQL, params).scalars())  # noqa: E731
    else:
        _require_postgresql_transaction(connection)
        run = lambda: [row[0] for row in connection.execute(_APPEND_SQL, params)]  # noqa: E731
    try:
        return run()
    except DBAPIError as e:
        raise _translated(e.orig) from None
    except psycopg.Error as e:
        raise _translated(e) from None


def _translated(error: Any) -> Exception:
    if isinstance(error, (psycopg.errors.UndefinedObject, psycopg.errors.InvalidParameterValue,
                          psycopg.errors.InsufficientPrivilege, psycopg.errors.ObjectNotInPrerequisiteState,
                          psycopg.errors.ProgramLimitExceeded)):
        return _domain_error(str(error.diag.message_primary))
    if isinstance(error, psycopg.errors.UndefinedFunction):
        return InvalidRequest(
            "the database has no outbox.append function: run `outbox migrate` (revision 0006 adds it)"
        )
    return error


def _domain_error(message: str) -> OutboxError:
    code, _, rest = message.partition(": ")
    cls = _ERRORS.get(code)
    return cls(rest) if cls is not None else InvalidRequest(message)


def _require_postgresql_transaction(driver: Any) -> None:
    if driver.autocommit and driver.info.transaction_status == TransactionStatus.IDLE:
        raise InvalidRequest(
            "the connection is in autocommit mode outside a transaction: the records would "
            "commit on their own; append inside the transaction that changes your rows "
            "(psycopg: `with conn.transaction():`)"
        )


# --- SQLite: the same append a Send makes, in the caller's transaction -----------------------


def _require_transaction(driver: sqlite3.Connection) -> None:
    # Python 3.12's autocommit=True commits every statement and makes commit() do nothing;
    # isolation_level None is the older spelling of the same.
    autocommit = getattr(driver, "autocommit", None) is True or driver.isolation_level is None
    if autocommit and not driver.in_transaction:
        raise InvalidRequest(
            "the sqlite3 connection is in autocommit mode outside a transaction: the records "
            "would commit on their own; execute BEGIN first"
        )


@contextmanager
def _savepoint(conn: Connection) -> Iterator[None]:
    """A failed append leaves nothing behind in the caller's transaction: SQLite, unlike
    PostgreSQL, lets a transaction go on and commit after a statement in it failed."""
    driver = conn.connection.driver_connection
    if not driver.in_transaction:
        # In the sqlite3 module's default mode, the caller's transaction has not begun until
        # its first write. A SAVEPOINT outside a transaction would be a transaction of its
        # own, committed by its RELEASE. IMMEDIATE: the write lock now, since a transaction
        # that reads first (the topic) and then writes fails at once, without waiting, when
        # another writer committed in between (SQLITE_BUSY_SNAPSHOT).
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    conn.exec_driver_sql("SAVEPOINT outbox_append")
    try:
        yield
    except BaseException:
        conn.exec_driver_sql("ROLLBACK TO outbox_append")
        conn.exec_driver_sql("RELEASE outbox_append")
        raise
    conn.exec_driver_sql("RELEASE outbox_append")


class _Borrowed:
    """The caller's sqlite3 connection, lent to SQLAlchemy: SQLAlchemy's commit, rollback and
    close do nothing to it (the caller's transaction is the caller's to end), and its cursors
    return plain tuples whatever row_factory the caller set."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def cursor(self) -> sqlite3.Cursor:
        cursor = self._connection.cursor()
        cursor.row_factory = None
        return cursor

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


class _BorrowedDialect(SQLiteDialect_pysqlite):
    """pysqlite without its on-connect set-up, which would register SQLAlchemy's own REGEXP
    function on the caller's connection over the caller's."""

    supports_statement_cache = True  # nothing here changes how statements compile

    def on_connect(self) -> None:
        return None

    def on_connect_url(self, url: Any) -> None:
        return None


registry.register("sqlite.outbox_borrowed", __name__, "_BorrowedDialect")

# One engine for every borrowed connection, so that SQLAlchemy compiles each statement once
# (its cache is the engine's): a new engine per append cost 2 ms of compiling. NullPool: each
# checkout asks _lent for the connection of the append under way.
_lent: ContextVar[sqlite3.Connection] = ContextVar("_lent")


@cache
def _engine() -> Engine:
    # Built at first use: the dialect is looked up in this module, which must be loaded.
    return create_engine("sqlite+outbox_borrowed://", creator=lambda: _Borrowed(_lent.get()), poolclass=NullPool)


@contextmanager
def _over(connection: sqlite3.Connection) -> Iterator[Connection]:
    token = _lent.set(connection)
    try:
        with _engine().connect() as conn:
            yield conn
    finally:
        _lent.reset(token)
