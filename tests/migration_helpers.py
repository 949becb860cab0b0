"""What the tests of single migrations (in tests/integration) share: a database brought to a
revision with rows written at it, a connection of an engine of its own (disposed of after), and
the INSERTs of rows of the schema as it was before the revision under test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, create_engine, text

from app.storage import migrate


@contextmanager
def connected(url: str) -> Iterator[Connection]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def write(url: str, *statements: str) -> None:
    """Run these statements in one database transaction."""
    with connected(url) as conn, conn.begin():
        for statement in statements:
            conn.execute(text(statement))


def at_revision(url: str, revision: str, *statements: str) -> Config:
    """Upgrade the database to `revision` and write `statements` there (write); the alembic
    configuration that migrates it further."""
    config = migrate.alembic_config(url)
    command.upgrade(config, revision)
    write(url, *statements)
    return config


def topic_t(partition_count: int, cleanup_policy: str = "delete") -> str:
    """The INSERT of topic 1, "t"."""
    return ("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
            f"check_expected_offsets, created_ms) VALUES (1, 't', {partition_count}, '{cleanup_policy}', -1, FALSE, 1)")


# INSERTs of records before 0023, where a record still carries its producer's columns (0023
# moved them to its batch's row), each to be followed by its rows' VALUES: records without a
# producer, an idempotent producer's, a transaction's (batch_record_count on its batch's first
# record), and control markers.
PLAIN_RECORDS = 'INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value) VALUES '
IDEMPOTENT_RECORDS = ('INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value, producer_id, '
                      "producer_epoch, sequence) VALUES ")
TRANSACTIONAL_RECORDS = ('INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value, producer_id, '
                         "producer_epoch, sequence, txn_id, batch_record_count) VALUES ")
MARKERS = ('INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, producer_id, producer_epoch, '
           "txn_id, control_type) VALUES ")


def member(group: str, member_id: str, **columns: str) -> str:
    """The INSERT of a member of `group`, with no topics; `columns`: more of its columns, by name,
    and their values."""
    names = "".join(f", {name}" for name in columns)
    values = "".join(f", '{value}'" for value in columns.values())
    return ("INSERT INTO group_members (group_id, member_id, topics, assignment, session_timeout_ms, "
            f"last_heartbeat_ms, joined_ms{names}) VALUES ('{group}', '{member_id}', '[]', '[]', 10000, 1, 1{values})")


def appender_takes(url: str, call: str, params: tuple[object, ...] = ()) -> bool:
    """Whether PostgreSQL's outbox.append takes `call` (a SELECT of it), or refuses it as an
    invalid parameter (its INVALID_REQUEST); rolled back either way."""
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
        try:
            conn.execute(call, params)
        except psycopg.errors.InvalidParameterValue:
            return False
        finally:
            conn.rollback()
    return True


def attached_record_leaves(conn: Connection) -> list[str]:
    """The leaves attached to PostgreSQL's `records` (migration 0035), by name."""
    return list(conn.execute(text(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'records'::regclass ORDER BY c.relname")).scalars())
