"""Sends of one producer that race each other (docs/GUARANTEES.md#no-duplicates), on SQLite and PostgreSQL.

A client that times out retries a Send while the first attempt may still be running. Both
copies then queue for the same partition's offset lock. Whichever gets it second must judge
its sequences against what the first one wrote: on PostgreSQL's READ COMMITTED that means
reading the producer's state in a statement that starts after the lock is held, since a
statement that waited for the lock still reads the rows of other tables as they were when it
started.
"""

from __future__ import annotations

import threading
import time

from sqlalchemy import text

from app.domain.records import RecordToAppend
from app.services.log_service import SendBatch, SendResult


def _wait_until_blocked(database, count: int) -> None:  # type: ignore[no-untyped-def]
    """Until `count` statements wait on a lock (PostgreSQL), or a moment (SQLite, whose
    writers wait in the busy handler or on the process's writer lock, invisible from here)."""
    if database.dialect != "postgresql":
        time.sleep(0.5)
        return
    deadline = time.monotonic() + 10
    with database.engine.connect() as conn:
        while time.monotonic() < deadline:
            waiting = conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                     "AND wait_event_type = 'Lock'")
            ).scalar_one()
            if waiting >= count:
                return
            conn.rollback()
            time.sleep(0.01)
    raise AssertionError(f"{count} Sends never queued on the partition lock")


def _race_two_copies(services, database, batches, **producer) -> list[SendResult]:  # type: ignore[no-untyped-def]
    """Hold the partition's offset lock, start two copies of the same Send, let them go."""
    results: list[list[SendResult]] = []
    errors: list[BaseException] = []

    def send() -> None:
        try:
            results.append(services.log.send(batches(), **producer))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    blocker = database.engine.raw_connection()  # outside the Database's own write path
    blocker.cursor().execute(
        "BEGIN IMMEDIATE" if database.dialect == "sqlite" else "SELECT next_offset FROM partitions FOR UPDATE"
    )
    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    _wait_until_blocked(database, 2)
    blocker.rollback()
    blocker.close()
    for t in threads:
        t.join(30)
    assert errors == []
    return [r for rs in results for r in rs]


def _log_end(services) -> int:  # type: ignore[no-untyped-def]
    _topic, partitions = services.topics.describe("race")
    return partitions[0].log_end_offset


def test_a_retry_racing_its_first_attempt_is_written_once(services, database) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("race", 1)
    p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)

    def batches() -> list[SendBatch]:
        return [SendBatch("race", 0, [RecordToAppend(None, "1", None, 1), RecordToAppend(None, "2", None, 1)], 0)]

    results = _race_two_copies(services, database, batches,
                               producer_id=p.producer_id, producer_epoch=p.producer_epoch, transactional_id=None)

    assert sorted((r.base_offset, r.record_count, r.duplicate) for r in results) == [(0, 2, False), (0, 2, True)]
    assert _log_end(services) == 2


def test_a_transactional_retry_racing_its_first_attempt_is_written_once(services, database) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("race", 1)
    p = services.coordinator.init_producer_id(transactional_id="racer", transaction_timeout_ms=None)
    services.coordinator.begin("racer", p.producer_id, p.producer_epoch)

    def batches() -> list[SendBatch]:
        return [SendBatch("race", 0, [RecordToAppend(None, "1", None, 1)], 0)]

    results = _race_two_copies(services, database, batches,
                               producer_id=p.producer_id, producer_epoch=p.producer_epoch, transactional_id="racer")

    assert sorted((r.base_offset, r.duplicate) for r in results) == [(0, False), (0, True)]
    services.coordinator.end_transaction("racer", p.producer_id, p.producer_epoch, commit=True)
    assert _log_end(services) == 2  # the record and the COMMIT marker


def test_a_retry_of_a_later_batch_racing_its_first_attempt_is_written_once(services, database) -> None:  # type: ignore[no-untyped-def]
    """The next batch of a running producer is judged by the statement that writes its state;
    the copy that waited must see the state the first copy wrote, and be a duplicate."""
    services.topics.create("race", 1)
    p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)
    producer = {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch, "transactional_id": None}
    services.log.send([SendBatch("race", 0, [RecordToAppend(None, "0", None, 1)], 0)], **producer)

    def batches() -> list[SendBatch]:
        return [SendBatch("race", 0, [RecordToAppend(None, "1", None, 1), RecordToAppend(None, "2", None, 1)], 1)]

    results = _race_two_copies(services, database, batches, **producer)

    assert sorted((r.base_offset, r.record_count, r.duplicate) for r in results) == [(1, 2, False), (1, 2, True)]
    assert _log_end(services) == 3


def test_a_transactional_retry_of_a_later_batch_racing_its_first_attempt_is_written_once(services, database) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("race", 1)
    p = services.coordinator.init_producer_id(transactional_id="racer", transaction_timeout_ms=None)
    producer = {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch, "transactional_id": "racer"}
    services.coordinator.begin("racer", p.producer_id, p.producer_epoch)
    services.log.send([SendBatch("race", 0, [RecordToAppend(None, "0", None, 1)], 0)], **producer)

    def batches() -> list[SendBatch]:
        return [SendBatch("race", 0, [RecordToAppend(None, "1", None, 1)], 1)]

    results = _race_two_copies(services, database, batches, **producer)

    assert sorted((r.base_offset, r.duplicate) for r in results) == [(1, False), (1, True)]
    services.coordinator.end_transaction("racer", p.producer_id, p.producer_epoch, commit=True)
    assert _log_end(services) == 3  # two records and the COMMIT marker
