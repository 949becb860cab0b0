"""Writes that need not be durable (Database.write(durable=False)): a write whose loss in a
crash nobody can observe but as a refusal commits without waiting for the disk, on SQLite
(synchronous NORMAL) and on PostgreSQL (synchronous_commit off) alike, for its own database
transaction only; every other write waits for it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.domain.types import TransactionVersion
from app.services import transaction_coordinator
from app.storage.engine import Database, build_engine

_SQLITE_FULL = 2  # PRAGMA synchronous's answer for FULL, the service's default (NORMAL is 1)


def _waits_for_the_disk(conn) -> bool:  # type: ignore[no-untyped-def]
    """Whether the database transaction `conn` is in will wait for the disk when it commits."""
    if conn.dialect.name == "sqlite":
        return conn.exec_driver_sql("PRAGMA synchronous").scalar_one() == _SQLITE_FULL
    return conn.exec_driver_sql("SELECT current_setting('synchronous_commit')").scalar_one() == "on"


@pytest.fixture
def one_connection(settings) -> Iterator[Database]:  # type: ignore[no-untyped-def]
    """A database whose writes all run on one connection: what one leaves set, the next finds."""
    db = Database(build_engine(settings.database_url, pool_size=1))
    yield db
    db.dispose()


@pytest.mark.parametrize(("durable", "waits"), [(False, False), (True, True)])
def test_only_a_write_that_need_not_be_durable_commits_without_waiting_for_the_disk(  # type: ignore[no-untyped-def]
        database, durable: bool, waits: bool) -> None:
    with database.write(durable=durable) as conn:
        assert _waits_for_the_disk(conn) is waits


def test_the_next_write_on_the_same_connection_waits_for_the_disk_again(one_connection) -> None:  # type: ignore[no-untyped-def]
    with one_connection.write(durable=False):
        pass
    with one_connection.write() as conn:
        assert _waits_for_the_disk(conn)


def test_a_kafka_clients_begin_commits_without_waiting_for_the_disk(services, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A version 1 producer's first AddPartitionsToTxn begins its transaction: a Begin lost in a
    crash leaves the producer's next request refused, and the first Send after it is durable."""
    seen: list[bool] = []
    begin_next = transaction_coordinator.begin_next

    def observed(conn, *args: Any, **kwargs: Any):  # type: ignore[no-untyped-def]
        seen.append(_waits_for_the_disk(conn))
        return begin_next(conn, *args, **kwargs)

    monkeypatch.setattr(transaction_coordinator, "begin_next", observed)
    services.topics.create("out", 1)
    p = services.coordinator.init_producer_id(transactional_id="kafka", transaction_timeout_ms=None,
                                              transaction_version=TransactionVersion.V1)
    assert services.coordinator.add_partitions("kafka", p.producer_id, p.producer_epoch, [("out", 0)],
                                               transaction_version=TransactionVersion.V1) == {("out", 0): None}
    assert seen == [False]
