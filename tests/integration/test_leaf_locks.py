"""On PostgreSQL a Send's COPY into `records` is routed to the partition's leaf by its
connection's cached list of leaves, which can lag a topic's creation by a moment; so a
connection locks a leaf before its first write to it (app.storage.record_rows), and never
again: a lock is a round trip every Send would pay."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

from app.domain.records import RecordToAppend
from app.services.log_service import SendBatch
from app.storage.tables import record_leaf

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def _locks_seen(services: Any) -> list[str]:
    seen: list[str] = []

    @event.listens_for(services.db.engine, "before_cursor_execute")
    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("LOCK TABLE"):
            seen.append(statement)

    return seen


def _send(services: Any, topic: str, partition: int) -> None:
    services.log.send([SendBatch(topic, partition, [RecordToAppend(None, "1", None, 1)])],
                      producer_id=None, producer_epoch=None, transactional_id=None)


def test_a_connection_locks_a_leaf_before_its_first_write_to_it_and_never_again(services: Any) -> None:
    topic_id = services.topics.create("t", 2).topic_id
    locks = _locks_seen(services)
    connections = services.db.engine.pool.size()
    sends = 2 * connections + 10  # more than the pool's connections could lock between them

    for _ in range(sends):
        _send(services, "t", 0)
        _send(services, "t", 1)

    # Each of the pool's connections locks each leaf once at most, the first write's lock.
    assert {s.split('"')[1] for s in locks} == {record_leaf(topic_id, 0), record_leaf(topic_id, 1)}
    assert 2 <= len(locks) <= 2 * connections < 2 * sends
