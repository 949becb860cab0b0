"""Writes that need not be durable (Database.write(durable=False)): a write whose loss in a
crash nobody can observe but as a refusal commits without waiting for the disk, on SQLite
(synchronous NORMAL) and on PostgreSQL (synchronous_commit off) alike, for its own database
transaction only; every other write waits for it. What a commit applies is read just before it
commits (SQLAlchemy's commit event): PostgreSQL applies the setting in effect then."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, select

from app.domain.types import TransactionVersion
from app.storage.engine import Database, build_engine

_SQLITE_FULL = 2  # PRAGMA synchronous's answer for FULL, the service's default (NORMAL is 1)


def _waited_for_the_disk(db: Database) -> list[bool]:
    """Whether each write transaction of `db` from now on waits for the disk when it commits."""
    seen: list[bool] = []
    sql = "PRAGMA synchronous" if db.is_sqlite else "SELECT current_setting('synchronous_commit')"
    waits = _SQLITE_FULL if db.is_sqlite else "on"

    def before_commit(conn: Any) -> None:
        seen.append(conn.connection.driver_connection.execute(sql).fetchone()[0] == waits)

    event.listen(db.engine, "commit", before_commit)
    return seen


@pytest.fixture
def one_connection(settings) -> Iterator[Database]:  # type: ignore[no-untyped-def]
    """A database whose writes all run on one connection: what one leaves set, the next finds."""
    db = Database(build_engine(settings.database_url, pool_size=1))
    yield db
    db.dispose()


@pytest.mark.parametrize(("durable", "waits"), [(False, False), (True, True)])
def test_only_a_write_that_need_not_be_durable_commits_without_waiting_for_the_disk(  # type: ignore[no-untyped-def]
        database, durable: bool, waits: bool) -> None:
    waited = _waited_for_the_disk(database)
    with database.write(durable=durable) as conn:
        conn.execute(select(1))

    assert waited == [waits]


def test_the_next_write_on_the_same_connection_waits_for_the_disk_again(one_connection) -> None:  # type: ignore[no-untyped-def]
    waited = _waited_for_the_disk(one_connection)
    for durable in (False, True):
        with one_connection.write(durable=durable) as conn:
            conn.execute(select(1))

    assert waited == [False, True]


def _kafka_producer(services):  # type: ignore[no-untyped-def]
    services.topics.create("out", 1)
    return services.coordinator.init_producer_id(transactional_id="kafka", transaction_timeout_ms=None,
                                                 transaction_version=TransactionVersion.V1)


def _add_partition(services, p) -> None:  # type: ignore[no-untyped-def]
    """A version 1 producer's first AddPartitionsToTxn, which begins its transaction."""
    assert services.coordinator.add_partitions("kafka", p.producer_id, p.producer_epoch, [("out", 0)],
                                               transaction_version=TransactionVersion.V1) == {("out", 0): None}


def test_a_kafka_clients_begin_commits_without_waiting_for_the_disk(services) -> None:  # type: ignore[no-untyped-def]
    """A Begin lost in a crash leaves the producer's next request refused, and the first Send
    after it is durable, which flushes it."""
    p = _kafka_producer(services)
    waited = _waited_for_the_disk(services.db)
    _add_partition(services, p)

    assert waited == [False]


def test_a_begin_relaxes_its_commit_in_the_statement_that_locks_its_row(services) -> None:  # type: ignore[no-untyped-def]
    """PostgreSQL: no statement of its own for it, a round trip fewer."""
    if services.db.is_sqlite:
        pytest.skip("SQLite's relaxing is a PRAGMA of the connection before the transaction begins")
    p = _kafka_producer(services)
    statements: list[str] = []
    event.listen(services.db.engine, "before_cursor_execute", lambda _c, _cur, sql, *_: statements.append(sql))
    _add_partition(services, p)

    (relaxing,) = [sql for sql in statements if "set_config" in sql]
    assert "FROM transactions" in relaxing and "FOR UPDATE" in relaxing
