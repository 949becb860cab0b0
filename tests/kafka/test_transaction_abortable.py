"""TRANSACTION_ABORTABLE (120, KIP-890) through the Kafka door, by hand-built kio requests: a
transactional Produce or TxnOffsetCommit that finds no open transaction to join is answered it
from the versions whose clients know it (Produce 11, TxnOffsetCommit 4), and INVALID_TXN_STATE
before them, as Kafka's partition leader and group coordinator answer a partition the
transaction does not hold. Nothing is written either way. The codes, records, offsets and
states are asserted exactly."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask

TID = "t"


def _init(s: Any) -> tuple[int, int]:
    answer = ask(s, 22, 4, request_class(22, 4)(transactional_id=TID, transaction_timeout=datetime.timedelta(seconds=60),
                                                producer_id=-1, producer_epoch=-1))
    assert answer.error_code == ErrorCode.none
    return answer.producer_id, answer.producer_epoch


def _add_partition(s: Any, pid: int, epoch: int) -> None:
    from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnTopic

    answer = ask(s, 24, 3, request_class(24, 3)(
        v3_and_below_transactional_id=TID, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(AddPartitionsToTxnTopic(name="orders", partitions=(0,)),)))
    assert [p.partition_error_code for t in answer.results_by_topic_v3_and_below
            for p in t.results_by_partition] == [ErrorCode.none]


def _end(s: Any, pid: int, epoch: int, commit: bool) -> None:
    answer = ask(s, 26, 3, request_class(26, 3)(transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                                                committed=commit))
    assert answer.error_code == ErrorCode.none


def _produce(s: Any, version: int, pid: int, epoch: int, value: bytes, base_sequence: int = 0) -> ErrorCode:
    """A transactional Produce of one record to orders/0; the partition's error code."""
    b = DefaultRecordBatchBuilder(2, 0, 1, pid, epoch, base_sequence, 1 << 20)
    b.append(0, 1_700_000_000_000, None, value, [])
    m = request_class(0, version)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    answer = ask(s, 0, version, m(transactional_id=TID, acks=-1, timeout=datetime.timedelta(seconds=5),
                                  topic_data=(mod.TopicProduceData(name="orders", partition_data=(
                                      mod.PartitionProduceData(index=0, records=bytes(b.build())),)),)))
    ((p,),) = [t.partition_responses for t in answer.responses]
    return p.error_code


def _txn_offset_commit(s: Any, version: int, pid: int, epoch: int) -> list[ErrorCode]:
    """A TxnOffsetCommit of orders/0 at offset 7 for the group billing; each partition's code."""
    m = request_class(28, version)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    answer = ask(s, 28, version, m(
        transactional_id=TID, group_id="billing", producer_id=pid, producer_epoch=epoch, generation_id=-1,
        member_id="", group_instance_id=None, topics=(mod.TxnOffsetCommitRequestTopic(name="orders", partitions=(
            mod.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=7, committed_leader_epoch=-1,
                                                committed_metadata=None),)),)))
    return [p.error_code for t in answer.topics for p in t.partitions]


def _log(kafka: Listener) -> list[tuple[int, Any]]:
    """orders/0 read_uncommitted over HTTP: (offset, value) of every data record."""
    r = kafka.client.get("/v1/topics/orders/partitions/0/records", params={"isolation": "read_uncommitted"})
    assert r.status_code == 200, r.text
    return [(x["offset"], x["value"]) for x in r.json()["records"]]


def _transaction(kafka: Listener) -> tuple[str, list[Any]]:
    described = kafka.client.get(f"/v1/transactions/{TID}").json()
    return described["state"], described["pending_offsets"]


@pytest.mark.parametrize(("version", "expected"), [
    (3, ErrorCode.invalid_txn_state),
    (10, ErrorCode.invalid_txn_state),
    (11, ErrorCode.transaction_abortable),
])
def test_a_transactional_produce_with_nothing_begun_is_answered_in_its_versions_code(
        kafka: Listener, version: int, expected: ErrorCode) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _produce(s, version, pid, epoch, b'"a"') == expected
    assert _log(kafka) == []
    assert _transaction(kafka) == ("Empty", [])


@pytest.mark.parametrize(("version", "expected"), [
    (10, ErrorCode.invalid_txn_state),
    (11, ErrorCode.transaction_abortable),
])
def test_a_produce_delayed_past_its_commit_is_answered_in_its_versions_code_and_not_appended(
        kafka: Listener, version: int, expected: ErrorCode) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        _add_partition(s, pid, epoch)
        assert _produce(s, version, pid, epoch, b'"a"') == ErrorCode.none
        _end(s, pid, epoch, commit=True)
        assert _produce(s, version, pid, epoch, b'"late"', base_sequence=1) == expected
    assert _log(kafka) == [(0, "a")]  # 1 is the COMMIT marker
    assert _transaction(kafka) == ("CompleteCommit", [])


@pytest.mark.parametrize(("version", "expected"), [
    (3, ErrorCode.invalid_txn_state),
    (4, ErrorCode.transaction_abortable),
])
def test_a_txn_offset_commit_with_nothing_begun_is_answered_in_its_versions_code_and_stages_nothing(
        kafka: Listener, version: int, expected: ErrorCode) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _txn_offset_commit(s, version, pid, epoch) == [expected]
    assert _transaction(kafka) == ("Empty", [])
    r = kafka.client.get("/v1/groups/billing/offsets", params={"require_stable": "false"})
    assert r.json()["offsets"] == []


def test_a_produce_12_to_a_prepared_transaction_is_transaction_abortable(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _produce(s, 12, pid, epoch, b'"a"') == ErrorCode.none  # begins it (version 2)
        kafka.services.coordinator.prepare(TID, pid, epoch)
        assert _produce(s, 12, pid, epoch, b'"b"', base_sequence=1) == ErrorCode.transaction_abortable
    assert _log(kafka) == [(0, "a")]
    assert _transaction(kafka) == ("Prepared", [])


def test_after_transaction_abortable_the_producer_goes_on_with_its_next_transaction(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _produce(s, 11, pid, epoch, b'"a"') == ErrorCode.transaction_abortable
        _add_partition(s, pid, epoch)
        assert _produce(s, 11, pid, epoch, b'"b"') == ErrorCode.none
        _end(s, pid, epoch, commit=True)
    assert _log(kafka) == [(0, "b")]
    assert _transaction(kafka) == ("CompleteCommit", [])


def test_a_produce_11_after_an_operator_aborted_the_transaction_is_invalid_producer_epoch(kafka: Listener) -> None:
    # The abort bumped the epoch, as a timeout does: the producer is fenced, not told to abort.
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        _add_partition(s, pid, epoch)
        assert _produce(s, 11, pid, epoch, b'"a"') == ErrorCode.none
        kafka.services.coordinator.admin_abort(TID)
        assert _produce(s, 11, pid, epoch, b'"b"', base_sequence=1) == ErrorCode.invalid_producer_epoch
    assert _log(kafka) == [(0, "a")]  # aborted; 1 is the ABORT marker
    assert _transaction(kafka) == ("CompleteAbort", [])
