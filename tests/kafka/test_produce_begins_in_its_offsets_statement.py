"""A version 2 Kafka producer's Produce (12) that begins its transaction on PostgreSQL does it in
the statement that takes its offsets, as the HTTP door's Send does
(tests/integration/test_send_begins_in_its_offsets_statement.py): the door's InitProducerId and
EndTxn (5) go through the coordinator that keeps the row it wrote in the process's copies, and
its Produce through the LogService that reads them, speaking version 2. Statements are those
SQLAlchemy's events see on the listener's database (the records' COPY is not among them)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from sqlalchemy import select, text

from app.storage import transactions as txns
from app.storage.tables import record_batches
from tests.helpers import create_topic, statements_run
from tests.integration.test_send_begins_in_its_offsets_statement import _beginning
from tests.kafka.conftest import Listener
from tests.kafka.test_transaction_version_2 import TID, _end, _init, _produce, _read_committed

# The copies are kept on PostgreSQL only: SQLite's Send reads the row (it has no such statement).
pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def _stored(kafka: Listener) -> Any:
    with kafka.services.db.read() as conn:
        return txns.get(conn, TID)


def _copy(kafka: Listener) -> Any:
    return kafka.services.log.transaction_copies._copies.get(TID)


def _next_txn_id(kafka: Listener) -> int:
    with kafka.services.db.engine.connect() as conn:
        last, called = conn.execute(text("SELECT last_value, is_called FROM txn_ids")).one()
    return last + 1 if called else last


def _log_end(kafka: Listener, partition: int) -> int:
    _, partitions = kafka.services.topics.describe("orders")
    return partitions[partition].log_end_offset


def _open_batches(kafka: Listener) -> list[tuple[int, int]]:
    with kafka.services.db.read() as conn:
        return [tuple(r) for r in conn.execute(
            select(record_batches.c.partition, record_batches.c.base_offset)
            .where(record_batches.c.state == "open").order_by(record_batches.c.partition))]


def _ended_transaction(kafka: Listener, s: Any, commit: bool) -> tuple[int, int, Any]:
    """A first transaction of two records on orders/0, ended by EndTxn 5; the producer id, the
    epoch it answered and the row it left. Its Produce has the listener read the topic."""
    pid, epoch = _init(s)
    assert _produce(s, pid, epoch, 0, [b'"a0"', b'"a1"']).error_code == ErrorCode.none
    ended = _end(s, pid, epoch, commit=commit)
    assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    return pid, ended.producer_epoch, _stored(kafka)


@pytest.mark.parametrize("row", ["new", "existing"])
def test_a_producers_first_produce_after_init_producer_id_begins_in_the_statement_taking_its_offsets(
        kafka: Listener, row: str) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    engine = kafka.services.db.engine
    with kafka.connect() as s:
        if row == "existing":  # the second InitProducerId bumps an idle row, and must keep that row too
            _init(s)
        pid, epoch = _init(s)
        assert _copy(kafka) == _stored(kafka)
        next_txn_id = _next_txn_id(kafka)

        with statements_run(engine) as seen:
            produced = _produce(s, pid, epoch, 1, [b'"b0"', b'"b1"'])

        # The listener's first reads of the topic (its value format, then the Send's copy of
        # the topic), then the one statement that begins and takes the offsets.
        assert (produced.error_code, produced.base_offset) == (ErrorCode.none, 0)
        assert len(seen) == 3 and all("FROM topics" in q and "transactions" not in q for q in seen[:2])
        assert _beginning(seen[2])
        begun = _stored(kafka)
        assert (begun.state.value, begun.producer_id, begun.producer_epoch, begun.transaction_version.value) == (
            "Ongoing", pid, epoch, 2)
        assert begun.txn_id == next_txn_id
        assert _copy(kafka) == begun
        assert _end(s, pid, epoch, commit=True).error_code == ErrorCode.none
        assert _read_committed(s, 1) == [(0, b'"b0"'), (1, b'"b1"')]


# a0 and a1 (committed or aborted), the transaction's marker at 2, then c0 at 3.
@pytest.mark.parametrize("commit, ended_state, read", [
    (True, "CompleteCommit", [(0, b'"a0"'), (1, b'"a1"'), (3, b'"c0"')]),
    (False, "CompleteAbort", [(3, b'"c0"')]),
], ids=["commit", "abort"])
def test_the_first_produce_after_an_end_txn_5_begins_the_next_transaction_in_one_statement(
        kafka: Listener, commit: bool, ended_state: str, read: list[tuple[int, bytes]]) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    engine = kafka.services.db.engine
    with kafka.connect() as s:
        pid, bumped, ended = _ended_transaction(kafka, s, commit=commit)
        assert ended.state.value == ended_state and _copy(kafka) == ended

        with statements_run(engine) as seen:
            produced = _produce(s, pid, bumped, 0, [b'"c0"'])

        assert len(seen) == 1 and _beginning(seen[0])
        assert (produced.error_code, produced.base_offset) == (ErrorCode.none, 3)
        begun = _stored(kafka)
        assert (begun.state.value, begun.producer_id, begun.producer_epoch, begun.txn_id) == (
            "Ongoing", pid, bumped, ended.txn_id + 1)
        assert _copy(kafka) == begun
        assert _end(s, pid, bumped, commit=True).producer_epoch == bumped + 1
        assert _read_committed(s, 0) == read


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_produce_of_the_ended_transactions_epoch_is_invalid_producer_epoch_and_writes_nothing(
        kafka: Listener, commit: bool) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        pid, bumped, ended = _ended_transaction(kafka, s, commit=commit)

        late = _produce(s, pid, bumped - 1, 1, [b'"late"'], base_sequence=0)

        assert (late.error_code, late.base_offset) == (ErrorCode.invalid_producer_epoch, -1)
        assert _stored(kafka) == ended  # no Begin: the transactional id is still idle at the new epoch
        assert (_log_end(kafka, 0), _log_end(kafka, 1)) == (3, 0)  # a0, a1 and the marker; nothing on 1
        assert _open_batches(kafka) == []
