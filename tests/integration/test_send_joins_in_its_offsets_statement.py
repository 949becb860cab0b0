"""A running transaction's Send on PostgreSQL joins its transaction in the statement that takes
its offsets (app.domain.transaction.JoinCondition, app.storage.log_end.TAKEN_JOINING): the
process keeps the metadata its last Send joined, and the next Send of the same producer and
epoch runs one statement, which takes offsets only where the row is still that producer's, at
that epoch, Ongoing. Where it is not (a Commit, an Abort, a timeout came between), nothing is
written and the Send is answered as one that reads the row first: refused, or beginning the
next transaction. Each test has the process's copies filled by earlier Sends of the same
transaction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, select, text
from sqlalchemy.engine import Engine

from app.domain.errors import InvalidProducerEpoch, InvalidTxnState, OutboxError, ProducerFenced
from app.domain.records import RecordToAppend, SendBatch
from app.composition import Services
from app.domain.types import IsolationLevel, TransactionVersion
from app.storage.tables import record_batches
from app.worker.chore import ChoreConfig
from app.worker.coordinator import CoordinatorWorker
from tests.helpers import statements_run

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)

TID = "joins"


def _batch(partition: int, values: list[str], base_sequence: int) -> list[SendBatch]:
    return [SendBatch("t", partition, [RecordToAppend(None, v, None, 1) for v in values], base_sequence)]


class Producer:
    def __init__(self, services: Any, version: TransactionVersion, timeout_ms: int | None = None) -> None:
        """A new instance of the transactional id (InitProducerId)."""
        self.services = services
        self.version = version
        p = services.coordinator.init_producer_id(transactional_id=TID, transaction_timeout_ms=timeout_ms,
                                                  transaction_version=version)
        self.producer_id, self.producer_epoch = p.producer_id, p.producer_epoch

    def begin(self) -> None:
        """Version 1's Begin; version 2's first Send begins."""
        if self.version is TransactionVersion.V1:
            self.services.coordinator.begin(TID, self.producer_id, self.producer_epoch)

    def send(self, partition: int, values: list[str], base_sequence: int, epoch: int | None = None) -> Any:
        (result,) = self.services.log.send(
            _batch(partition, values, base_sequence), producer_id=self.producer_id,
            producer_epoch=self.producer_epoch if epoch is None else epoch, transactional_id=TID)
        return result

    def commit(self) -> None:
        view = self.services.coordinator.end_transaction(TID, self.producer_id, self.producer_epoch, commit=True)
        self.producer_id, self.producer_epoch = view.meta.producer_id, view.meta.producer_epoch


@pytest.fixture(params=[TransactionVersion.V2, TransactionVersion.V1], ids=["v2", "v1"])
def version(request: Any) -> TransactionVersion:
    return request.param


@pytest.fixture
def other(settings: Any, database: Any, clock: Any) -> Services:
    """A second process's services on the same database, with copies of their own."""
    return Services.build(settings, database, clock)


@pytest.fixture
def producer(services: Any, version: TransactionVersion) -> Producer:
    services.topics.create("t", 2)
    return Producer(services, version)


def _committed(services: Any, partition: int) -> list[Any]:
    _, fetched = services.log.fetch("t", partition, offset=0, max_records=100,
                                    isolation=IsolationLevel.READ_COMMITTED)
    return [r.value for r in fetched.records]


def _log_end(services: Any, partition: int) -> int:
    _, partitions = services.topics.describe("t")
    return partitions[partition].log_end_offset


def _open_batches(database: Any) -> list[tuple[int, int]]:
    """(partition, base_offset) of every data batch still open: none once every transaction ended."""
    with database.read() as conn:
        return [tuple(r) for r in conn.execute(
            select(record_batches.c.partition, record_batches.c.base_offset)
            .where(record_batches.c.state == "open").order_by(record_batches.c.partition))]


def _running(producer: Producer) -> None:
    """A transaction with two Sends: the first reads the row and the topics into the process's
    copies (and begins, version 2), the second joins by the copy's condition."""
    producer.begin()
    producer.send(0, ["a"], 0)
    producer.send(0, ["b"], 1)


def test_a_running_transactions_send_runs_one_statement(services: Any, producer: Producer) -> None:
    _running(producer)
    txn_id = services.coordinator.listing.describe(TID).meta.txn_id

    with statements_run() as seen:
        result = producer.send(1, ["c"], 0)

    assert len(seen) == 1 and seen[0].startswith("WITH joined AS")
    assert (result.partition, result.base_offset, result.txn_id) == (1, 0, txn_id)
    assert [(p.partition, p.first_offset) for p in services.coordinator.listing.describe(TID).partitions] == [
        (0, 0), (1, 0)]
    producer.commit()
    assert (_committed(services, 0), _committed(services, 1)) == (["a", "b"], ["c"])


def test_a_running_transactions_send_to_two_partitions_joins_by_its_first_batchs_statement(
        services: Any, producer: Producer) -> None:
    # The second batch's statement runs under the row lock the first one took, with the txn_id
    # it answered.
    _running(producer)
    txn_id = services.coordinator.listing.describe(TID).meta.txn_id

    with statements_run() as seen:
        results = services.log.send(_batch(0, ["c"], 2) + [SendBatch("t", 1, [RecordToAppend(None, "d", None, 1)], 0)],
                                    producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                                    transactional_id=TID)

    assert [s.startswith("WITH joined AS") for s in seen if "UPDATE partitions" in s] == [True, False]
    assert [(r.partition, r.base_offset, r.txn_id) for r in results] == [(0, 2, txn_id), (1, 0, txn_id)]
    assert [(p.partition, p.first_offset) for p in services.coordinator.listing.describe(TID).partitions] == [
        (0, 0), (1, 0)]
    producer.commit()
    assert (_committed(services, 0), _committed(services, 1)) == (["a", "b", "c"], ["d"])


def test_the_next_transactions_send_joins_the_next_transaction(services: Any, producer: Producer) -> None:
    # Version 1's next transaction has the same epoch, and its Begin kept the row in the
    # process's copy: its Send joins in one statement, with the new txn_id read from the row.
    # Version 2's has the next epoch, which its Commit kept in the copy: its Send begins the
    # transaction in one statement (test_send_begins_in_its_offsets_statement.py).
    _running(producer)
    producer.commit()
    producer.begin()

    with statements_run() as seen:
        result = producer.send(0, ["c"], 2 if producer.version is TransactionVersion.V1 else 0)

    view = services.coordinator.listing.describe(TID)
    assert (view.meta.state.value, result.txn_id, result.base_offset) == ("Ongoing", view.meta.txn_id, 3)
    assert result.txn_id != _first_txn_id(services)
    assert len(seen) == 1 and seen[0].startswith("WITH joined AS")
    producer.commit()
    assert _committed(services, 0) == ["a", "b", "c"]


def _first_txn_id(services: Any) -> int:
    with services.coordinator.db.read() as conn:
        return conn.execute(select(record_batches.c.txn_id).where(record_batches.c.base_offset == 0,
                                                                  record_batches.c.partition == 0)).scalar_one()


def test_a_send_of_the_ended_transaction_is_refused_and_writes_nothing(
        services: Any, database: Any, producer: Producer, other: Services) -> None:
    # Version 2: the previous epoch (the Commit bumped it), which must never join the next
    # transaction; version 1: the same epoch, and the transaction is no longer Ongoing. The
    # Commit is another process's: this one's copy still has the transaction Ongoing.
    _running(producer)
    epoch = producer.producer_epoch
    producer.services = other
    producer.commit()
    producer.services = services

    with statements_run() as seen, pytest.raises(OutboxError) as refused:
        producer.send(0, ["late"], 2, epoch=epoch)

    assert seen[0].startswith("WITH joined AS")  # the copy's condition was tried, and failed
    expected = InvalidProducerEpoch if producer.version is TransactionVersion.V2 else InvalidTxnState
    assert type(refused.value) is expected
    assert _log_end(services, 0) == 3  # a, b and the COMMIT marker
    assert _committed(services, 0) == ["a", "b"]
    assert _open_batches(database) == []
    assert services.coordinator.listing.describe(TID).meta.state.value == "CompleteCommit"


def test_a_send_of_the_previous_epoch_never_joins_the_next_transaction(
        services: Any, database: Any, other: Services) -> None:
    # Version 2: another process has committed and its Send of the next epoch has begun the
    # next transaction; this process's copy still has the previous one Ongoing.
    services.topics.create("t", 2)
    producer = Producer(services, TransactionVersion.V2)
    _running(producer)
    epoch = producer.producer_epoch
    producer.services = other
    producer.commit()
    producer.send(1, ["next"], 0)
    producer.services = services

    with statements_run() as seen, pytest.raises(InvalidProducerEpoch):
        producer.send(0, ["late"], 2, epoch=epoch)

    assert seen[0].startswith("WITH joined AS")
    assert _log_end(services, 0) == 3  # a, b and the COMMIT marker
    assert [(p.partition, p.first_offset) for p in services.coordinator.listing.describe(TID).partitions] == [(1, 0)]
    producer.commit()
    assert (_committed(services, 0), _committed(services, 1)) == (["a", "b"], ["next"])
    assert _open_batches(database) == []


def test_a_send_of_a_transaction_aborted_by_its_timeout_is_refused(services: Any, database: Any, clock: Any,
                                                                   other: Services, version: TransactionVersion) -> None:
    # After the timeout, a new instance (in another process) has begun its own transaction:
    # the fenced instance's Send joins neither.
    services.topics.create("t", 2)
    producer = Producer(services, version, timeout_ms=1000)
    _running(producer)
    clock.advance(1001)
    assert CoordinatorWorker(services.coordinator, clock, ChoreConfig(interval_ms=50)).run_once().timed_out == 1
    successor = Producer(other, version)
    successor.begin()
    successor.send(1, ["new"], 0)

    with statements_run() as seen, pytest.raises(ProducerFenced):
        producer.send(0, ["late"], 2)

    assert seen[0].startswith("WITH joined AS")
    assert _log_end(services, 0) == 3  # a, b and the ABORT marker
    assert [(p.partition, p.first_offset) for p in services.coordinator.listing.describe(TID).partitions] == [(1, 0)]
    successor.commit()
    assert (_committed(services, 0), _committed(services, 1)) == ([], ["new"])
    assert _open_batches(database) == []


def _wait_for_a_lock_wait(database: Any) -> None:
    deadline = time.monotonic() + 10
    with database.engine.connect() as conn:
        while time.monotonic() < deadline:
            if conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND wait_event_type = 'Lock'")).scalar_one():
                return
            conn.rollback()
            time.sleep(0.01)
    raise AssertionError("nothing waited on a lock")


def _started(run: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """`run` in a thread of its own; its outcome (a value, or the error it raised) in the list."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(run())
        except OutboxError as e:
            outcome.append(e)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


@contextmanager
def _paused_after(first: Callable[[str], bool], run: Callable[[], Any]) -> Iterator[tuple[threading.Event, list[Any]]]:
    """`run` in a thread of its own that stops after its first statement that `first` matches,
    holding what that statement locked, until the event is set; its outcome in the list once
    the block ends."""
    held, go = threading.Event(), threading.Event()
    pausing: list[threading.Thread] = []

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if threading.current_thread() in pausing and not held.is_set() and first(statement):
            held.set()
            go.wait(10)

    event.listen(Engine, "after_cursor_execute", after)
    try:
        thread, outcome = _started(lambda: (pausing.append(threading.current_thread()), run())[1])
        assert held.wait(10)
        yield go, outcome
    finally:
        go.set()
        thread.join(30)
        event.remove(Engine, "after_cursor_execute", after)


def _row_lock_of_commit(statement: str) -> bool:
    return "FROM transactions" in statement and "FOR UPDATE" in statement


def _joining(statement: str) -> bool:
    return statement.startswith("WITH joined AS")


@pytest.mark.parametrize("first", ["commit", "send"])
def test_a_send_racing_a_commit_joins_before_it_or_is_refused(
        services: Any, database: Any, producer: Producer, first: str) -> None:
    """`first`: which of the two holds the transaction's row while the other waits for it."""
    _running(producer)
    epoch = producer.producer_epoch

    def late_send() -> Any:
        return producer.send(1, ["c"], 0, epoch=epoch)

    holding, waiting = ((_row_lock_of_commit, producer.commit), late_send) if first == "commit" else (
        (_joining, late_send), producer.commit)
    with _paused_after(*holding) as (go, held_outcome):
        thread, waited_outcome = _started(waiting)
        _wait_for_a_lock_wait(database)
        go.set()
        thread.join(30)
    (sent,) = held_outcome if first == "send" else waited_outcome
    if first == "send":
        # The Send held the row: the Commit waited for it, and its marker covers the Send's partition.
        assert (sent.partition, sent.base_offset) == (1, 0)
        assert (_committed(services, 0), _committed(services, 1)) == (["a", "b"], ["c"])
        assert _log_end(services, 1) == 2  # c and the COMMIT marker
    else:
        # The Commit held the row: the Send, tested on the row as the Commit left it, wrote nothing.
        expected = InvalidProducerEpoch if producer.version is TransactionVersion.V2 else InvalidTxnState
        assert type(sent) is expected
        assert (_committed(services, 0), _committed(services, 1)) == (["a", "b"], [])
        assert _log_end(services, 1) == 0
    assert services.coordinator.listing.describe(TID).meta.state.value == "CompleteCommit"
    assert _open_batches(database) == []
