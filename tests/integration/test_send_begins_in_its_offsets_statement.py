"""A version 2 Send that begins the next transaction on PostgreSQL does it in the statement that
takes its offsets (app.domain.transit.BeginCondition, app.storage.transactions.BEGUN): the
process keeps the row each Begin, Commit and Abort wrote, and the next Send of the producer at
the new epoch writes the Begin computed from that copy, where the row is still the copy in
every column. Where it is not (another process, a new instance, any change of the row), the
statement writes nothing, and the Send reads the row and joins, begins or is refused as it
would have been without the copy."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text, update

from app.composition import Services
from app.domain.errors import InvalidProducerEpoch, OutboxError, ProducerFenced
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder
from app.domain.types import TransactionVersion
from app.storage import transactions as txns
from app.storage.tables import transactions
from tests.helpers import statements_run
from tests.integration.test_send_joins_in_its_offsets_statement import (
    TID,
    Producer,
    _batch,
    _committed,
    _log_end,
    _open_batches,
    _paused_after,
    _running,
    _started,
    _wait_for_a_lock_wait,
)

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def _stored(services: Any) -> Any:
    with services.coordinator.db.read() as conn:
        return txns.get(conn, TID)


def _copy(services: Any) -> Any:
    return services.log.transaction_copies._copies.get(TID)


def _txn_ids_taken(database: Any) -> int:
    with database.engine.connect() as conn:
        return conn.execute(text("SELECT last_value FROM txn_ids")).scalar_one()


def _beginning(statement: str) -> bool:
    return re.match(r"WITH joined AS\s*\(UPDATE transactions", statement) is not None


@pytest.fixture
def producer(services: Any) -> Producer:
    services.topics.create("t", 2)
    return Producer(services, TransactionVersion.V2)


@pytest.fixture
def other(settings: Any, database: Any, clock: Any) -> Services:
    """A second process's services on the same database, with copies of their own."""
    return Services.build(settings, database, clock)


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_the_row_a_commit_or_abort_wrote_is_the_process_copy(services: Any, producer: Producer, end: str) -> None:
    _running(producer)
    view = services.coordinator.end_transaction(TID, producer.producer_id, producer.producer_epoch,
                                                commit=end == "commit")
    assert _copy(services) == _stored(services) == view.meta
    assert _stored(services).producer_epoch == producer.producer_epoch + 1


def test_the_row_a_begin_wrote_is_the_process_copy(services: Any) -> None:
    services.topics.create("t", 1)
    producer = Producer(services, TransactionVersion.V1)
    producer.begin()
    assert _copy(services) == _stored(services)
    assert _stored(services).state.value == "Ongoing"


def test_the_next_transactions_first_send_begins_it_in_one_statement(
        services: Any, clock: Any, producer: Producer) -> None:
    _running(producer)
    producer.commit()
    ended = _stored(services)
    clock.advance(7)

    with statements_run() as seen:
        result = producer.send(1, ["c"], 0)

    assert len(seen) == 1 and _beginning(seen[0])
    begun = _stored(services)
    # What a Begin read from the row would have written: the next txn_id, started now.
    assert (begun.state.value, begun.txn_id, begun.txn_started_ms, begun.updated_ms) == (
        "Ongoing", ended.txn_id + 1, clock(), clock())
    assert (begun.producer_id, begun.producer_epoch, begun.last_producer_epoch) == (
        ended.producer_id, ended.producer_epoch, ended.last_producer_epoch)
    assert (result.partition, result.base_offset, result.txn_id) == (1, 0, begun.txn_id)
    assert _copy(services) == begun
    assert [(p.partition, p.first_offset) for p in services.coordinator.listing.describe(TID).partitions] == [(1, 0)]
    assert _committed(services, 1) == []
    producer.commit()
    assert (_committed(services, 0), _committed(services, 1)) == (["a", "b"], ["c"])


def test_a_send_after_an_abort_begins_in_one_statement(services: Any, producer: Producer) -> None:
    _running(producer)
    view = services.coordinator.end_transaction(TID, producer.producer_id, producer.producer_epoch, commit=False)
    producer.producer_epoch = view.meta.producer_epoch

    with statements_run() as seen:
        producer.send(0, ["c"], 0)

    assert _beginning(seen[0])
    producer.commit()
    assert _committed(services, 0) == ["c"]


def test_a_copy_out_of_date_in_any_column_writes_nothing_and_the_send_begins_from_the_row(
        services: Any, database: Any, producer: Producer) -> None:
    # A change that moves neither the producer, its epoch nor the state (as a retried
    # InitProducerId's new timeout): a Begin computed from the copy would write the old timeout
    # back over it.
    _running(producer)
    producer.commit()
    with database.engine.begin() as conn:
        conn.execute(update(transactions).where(transactions.c.transactional_id == TID)
                     .values(transaction_timeout_ms=123_456))
    taken = _txn_ids_taken(database)

    with statements_run() as seen:
        producer.send(0, ["c"], 0)

    assert _beginning(seen[0]) and len(seen) > 1  # tried, then the row read
    begun = _stored(services)
    assert (begun.state.value, begun.transaction_timeout_ms) == ("Ongoing", 123_456)
    assert begun.txn_id == taken + 1  # the statement that wrote nothing took no id
    producer.commit()
    assert _committed(services, 0) == ["a", "b", "c"]


def test_a_send_whose_copy_is_behind_another_process_joins_the_transaction_it_began(
        services: Any, database: Any, producer: Producer, other: Services) -> None:
    _running(producer)
    producer.commit()
    producer.services = other
    first = producer.send(1, ["x"], 0)  # the other process reads the row and begins
    producer.services = services

    with statements_run() as seen:
        second = producer.send(0, ["y"], 0)

    assert _beginning(seen[0])
    assert first.txn_id == second.txn_id == _stored(services).txn_id
    producer.commit()
    assert (_committed(services, 0), _committed(services, 1)) == (["a", "b", "y"], ["x"])
    assert _open_batches(database) == []


def test_a_fenced_instances_send_begins_nothing(services: Any, database: Any, producer: Producer,
                                                other: Services) -> None:
    # A new instance took the transactional id over in another process after the Commit: the
    # old one's copy says it may begin, the row says it is fenced.
    _running(producer)
    producer.commit()
    successor = Producer(other, TransactionVersion.V2)

    with pytest.raises(ProducerFenced):
        producer.send(0, ["late"], 0)

    assert (_stored(services).state.value, _stored(services).producer_epoch) == ("Empty", successor.producer_epoch)
    assert _log_end(services, 0) == 3  # a, b and the COMMIT marker
    assert _open_batches(database) == []


def test_a_send_of_the_ended_transactions_epoch_never_begins_the_next(services: Any, database: Any,
                                                                      producer: Producer) -> None:
    _running(producer)
    epoch = producer.producer_epoch
    producer.commit()

    with pytest.raises(InvalidProducerEpoch):
        producer.send(0, ["late"], 2, epoch=epoch)

    assert _stored(services).state.value == "CompleteCommit"
    assert _log_end(services, 0) == 3
    assert _open_batches(database) == []


def test_a_topic_copy_out_of_date_keeps_the_begin_and_the_send_joins_it(services: Any, database: Any,
                                                                       producer: Producer) -> None:
    # The row is as the copy has it, the topic's row is not: the Begin is written by the
    # statement that takes no offsets, and the Send, reading both rows, joins it.
    _running(producer)
    producer.commit()
    services.topics.alter_config("t", {"max_message_bytes": 500_000})

    with statements_run() as seen:
        result = producer.send(1, ["c"], 0)

    assert _beginning(seen[0]) and len(seen) > 1
    begun = _stored(services)
    assert (begun.state.value, result.txn_id, result.base_offset) == ("Ongoing", begun.txn_id, 0)
    producer.commit()
    assert (_committed(services, 0), _committed(services, 1)) == (["a", "b"], ["c"])
    assert _open_batches(database) == []


def test_two_sends_beginning_at_once_join_one_transaction(services: Any, database: Any, producer: Producer) -> None:
    # The first holds the row (its Begin written, not committed); the second's UPDATE waits for
    # it, then finds the row changed, reads it and joins the transaction the first began.
    _running(producer)
    producer.commit()

    with _paused_after(_beginning, lambda: producer.send(0, ["x"], 0)) as (go, first_outcome):
        thread, second_outcome = _started(lambda: producer.send(1, ["y"], 0))
        _wait_for_a_lock_wait(database)
        go.set()
        thread.join(30)

    (first,), (second,) = first_outcome, second_outcome
    assert not isinstance(first, OutboxError) and not isinstance(second, OutboxError)
    assert first.txn_id == second.txn_id == _stored(services).txn_id
    producer.commit()
    assert (_committed(services, 0), _committed(services, 1)) == (["a", "b", "x"], ["y"])
    assert _open_batches(database) == []


def test_a_send_after_add_offsets_began_the_transaction_joins_it_in_one_statement(
        services: Any, producer: Producer) -> None:
    # Version 2's AddOffsets begins the next transaction too, and keeps the row it began.
    _running(producer)
    producer.commit()
    view = services.coordinator.add_offsets(TID, producer.producer_id, producer.producer_epoch, "g",
                                            [OffsetToStage("t", 0, 2, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)])
    assert _copy(services) == _stored(services) == view.meta

    with statements_run() as seen:
        result = producer.send(1, ["c"], 0)

    assert len(seen) == 1 and seen[0].startswith("WITH joined AS") and not _beginning(seen[0])
    assert result.txn_id == view.meta.txn_id
    producer.commit()
    assert _committed(services, 1) == ["c"]


@pytest.mark.parametrize("spoken", [None, TransactionVersion.V2], ids=["stored version", "spoken v2 by a v1 row"])
def test_the_begin_written_from_the_copy_is_the_begin_written_after_reading_the_row(
        services: Any, clock: Any, spoken: TransactionVersion | None) -> None:
    # Two producers in the same state; the first begins from the process's copy, the second (its
    # copy dropped) reads the row and begins as before: both rows end the same but for the ids.
    services.topics.create("t", 2)
    version = TransactionVersion.V2 if spoken is None else TransactionVersion.V1
    sent: dict[str, Any] = {}
    for tid in ("from-copy", "from-row"):
        p = services.coordinator.init_producer_id(transactional_id=tid, transaction_timeout_ms=None,
                                                  transaction_version=version)
        if version is TransactionVersion.V1:
            services.coordinator.begin(tid, p.producer_id, p.producer_epoch)
        services.log.send(_batch(0, ["a"], 0), producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                          transactional_id=tid, transaction_version=spoken)
        view = services.coordinator.end_transaction(tid, p.producer_id, p.producer_epoch, commit=True,
                                                    transaction_version=spoken)
        sent[tid] = view.meta
    services.log.transaction_copies.forget("from-row")
    clock.advance(5)

    rows = {}
    for tid, meta in sent.items():
        with statements_run() as seen:
            services.log.send(_batch(1, ["b"], 0), producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                              transactional_id=tid, transaction_version=spoken)
        with services.coordinator.db.read() as conn:
            rows[tid] = txns.get(conn, tid)
        assert _beginning(seen[0]) is (tid == "from-copy")

    def but_ids(meta: Any) -> Any:
        return replace(meta, transactional_id="", producer_id=0, txn_id=0)

    assert but_ids(rows["from-copy"]) == but_ids(rows["from-row"])
    assert rows["from-copy"].state.value == "Ongoing" and rows["from-copy"].transaction_version is TransactionVersion.V2


def test_a_commit_queued_behind_a_beginning_send_marks_its_partition(services: Any, database: Any,
                                                                    producer: Producer) -> None:
    # The Commit waits for the row the beginning Send holds, and then finds the partition that
    # Send claimed: it gets the Commit's marker.
    _running(producer)
    producer.commit()
    with _paused_after(_beginning, lambda: producer.send(1, ["c"], 0)) as (go, sent):
        thread, committed = _started(producer.commit)
        _wait_for_a_lock_wait(database)
        go.set()
        thread.join(30)

    assert not isinstance(sent[0], OutboxError) and not isinstance(committed[0], OutboxError)
    assert _committed(services, 1) == ["c"]
    assert _log_end(services, 1) == 2  # c and the COMMIT marker
    assert _open_batches(database) == []


def test_a_beginning_send_queued_behind_a_send_that_read_the_row_joins_what_that_one_began(
        services: Any, database: Any, producer: Producer, other: Services) -> None:
    # Another process (no copy) holds the idle row FOR SHARE; this process's UPDATE waits for
    # it; the other raises its lock (lock_now) and begins; this one finds the row changed and
    # joins. No deadlock.
    _running(producer)
    producer.commit()
    epoch = producer.producer_epoch

    def send_through(through: Services, partition: int, value: str) -> Any:
        (result,) = through.log.send(_batch(partition, [value], 0), producer_id=producer.producer_id,
                                     producer_epoch=epoch, transactional_id=TID)
        return result

    def reads_the_row(statement: str) -> bool:
        return "FROM transactions" in statement and "FOR SHARE" in statement

    with _paused_after(reads_the_row, lambda: send_through(other, 1, "x")) as (go, read_first):
        thread, began_from_copy = _started(lambda: send_through(services, 0, "y"))
        _wait_for_a_lock_wait(database)
        go.set()
        thread.join(30)

    (first,), (second,) = read_first, began_from_copy
    assert not isinstance(first, OutboxError) and not isinstance(second, OutboxError)
    assert first.txn_id == second.txn_id == _stored(services).txn_id
    producer.commit()
    assert (_committed(services, 0), _committed(services, 1)) == (["a", "b", "y"], ["x"])
    assert _open_batches(database) == []


@pytest.mark.parametrize("row", ["new", "existing"])
def test_a_producers_first_send_after_init_producer_id_begins_in_one_statement(services: Any, row: str) -> None:
    # InitProducerId keeps the row it wrote, whether it made the transactional id's row or
    # bumped an idle one's epoch.
    services.topics.create("t", 2)
    if row == "existing":
        Producer(services, TransactionVersion.V2)
    producer = Producer(services, TransactionVersion.V2)
    assert _copy(services) == _stored(services)

    with statements_run() as seen:
        result = producer.send(0, ["a"], 0)

    # The process's first read of the topic, then the one statement that begins and appends.
    assert len(seen) == 2 and "FROM topics" in seen[0] and "transactions" not in seen[0] and _beginning(seen[1])
    assert result.txn_id == _stored(services).txn_id
    producer.commit()
    assert _committed(services, 0) == ["a"]
