"""Kafka's transactions through the Kafka door (transaction version 1: InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn), driven by
librdkafka's transactional producer and by hand-built kio requests, and read back through both
doors. Records, offsets and states are asserted exactly."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnTopic
from kio.schema.errors import ErrorCode

from app.domain.offsets import MAX_PARTITIONS_PER_REQUEST
from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask, deferred_completion

TIMEOUT_S = 20


def _txn_producer(kafka: Listener, transactional_id: str) -> Producer:
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "message.timeout.ms": 10_000,
                  "transactional.id": transactional_id})
    p.init_transactions(TIMEOUT_S)
    return p


def _consume(kafka: Listener, topic: str, partition: int, count: int, quiet_s: float = 0.0) -> list[Any]:
    """read_committed: the first `count` records of the partition, then whatever arrives within `quiet_s`."""
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "test", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        got: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m)
        quiet = time.monotonic() + quiet_s
        while time.monotonic() < quiet:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m)
        return got
    finally:
        c.close()


def _http_committed(kafka: Listener, topic: str, partition: int) -> list[tuple[int, Any]]:
    r = kafka.client.get(f"/v1/topics/{topic}/partitions/{partition}/records",
                         params={"isolation": "read_committed"})
    assert r.status_code == 200, r.text
    return [(rec["offset"], rec["value"]) for rec in r.json()["records"]]


def _produce(p: Producer, topic: str, partition: int, values: list[bytes]) -> None:
    for v in values:
        p.produce(topic, value=v, partition=partition)
    assert p.flush(TIMEOUT_S) == 0


def test_a_committed_transaction_is_read_exactly_through_both_doors(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    p = _txn_producer(kafka, "tx-1")
    p.begin_transaction()
    _produce(p, "orders", 0, [b'"a0"', b'"a1"'])
    _produce(p, "orders", 1, [b'"b0"'])
    p.commit_transaction(TIMEOUT_S)

    # Each partition: the records at 0.., then the COMMIT marker, which is never returned as data.
    assert [(m.offset(), m.value()) for m in _consume(kafka, "orders", 0, 2, quiet_s=0.5)] == [
        (0, b'"a0"'), (1, b'"a1"')]
    assert [(m.offset(), m.value()) for m in _consume(kafka, "orders", 1, 1, quiet_s=0.5)] == [(0, b'"b0"')]
    assert _http_committed(kafka, "orders", 0) == [(0, "a0"), (1, "a1")]
    assert _http_committed(kafka, "orders", 1) == [(0, "b0")]
    described = kafka.client.get("/v1/transactions/tx-1").json()
    assert (described["state"], described["transaction_version"]) == ("CompleteCommit", 1)


def test_an_aborted_transaction_leaves_nothing_visible(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    p = _txn_producer(kafka, "tx-1")
    p.begin_transaction()
    _produce(p, "orders", 0, [b'"x"', b'"y"'])
    p.abort_transaction(TIMEOUT_S)
    p.begin_transaction()
    _produce(p, "orders", 0, [b'"z"'])
    p.commit_transaction(TIMEOUT_S)

    # 0 and 1 aborted, 2 the ABORT marker, 3 the committed record, 4 its COMMIT marker.
    assert [(m.offset(), m.value()) for m in _consume(kafka, "orders", 0, 1, quiet_s=0.5)] == [(3, b'"z"')]
    assert _http_committed(kafka, "orders", 0) == [(3, "z")]


def test_a_transaction_begun_by_a_kafka_client_is_described_by_the_http_api(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    p = _txn_producer(kafka, "tx-1")
    p.begin_transaction()
    _produce(p, "orders", 1, [b'"b0"'])

    described = kafka.client.get("/v1/transactions/tx-1").json()
    assert described["state"] == "Ongoing"
    assert [(q["topic"], q["partition"]) for q in described["partitions"]] == [("orders", 1)]
    assert _http_committed(kafka, "orders", 1) == []
    p.abort_transaction(TIMEOUT_S)


def test_a_second_producer_of_the_transactional_id_fences_the_first(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    first = _txn_producer(kafka, "tx-1")
    first.begin_transaction()
    _produce(first, "orders", 0, [b'"zombie"'])
    second = _txn_producer(kafka, "tx-1")  # aborts the first's open transaction

    with pytest.raises(KafkaException) as fenced:
        first.commit_transaction(TIMEOUT_S)
    assert fenced.value.args[0].fatal()
    second.begin_transaction()
    _produce(second, "orders", 0, [b'"live"'])
    second.commit_transaction(TIMEOUT_S)
    # 0 the zombie's record (aborted), 1 its ABORT marker, 2 the live record, 3 its COMMIT marker.
    assert _http_committed(kafka, "orders", 0) == [(2, "live")]


# --- hand-built requests: what each API answers, and that a refusal changes nothing ---------

def _init(s: Any, transactional_id: str) -> tuple[int, int]:
    answer = ask(s, 22, 4, request_class(22, 4)(transactional_id=transactional_id,
                                                transaction_timeout=datetime.timedelta(seconds=60),
                                                producer_id=-1, producer_epoch=-1))
    assert answer.error_code == ErrorCode.none
    return answer.producer_id, answer.producer_epoch


def _add_partitions(s: Any, transactional_id: str, pid: int, epoch: int, topics: dict[str, tuple[int, ...]]) -> Any:
    m = request_class(24, 3)
    assert m is not None
    return ask(s, 24, 3, m(v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=pid,
                           v3_and_below_producer_epoch=epoch, v3_and_below_topics=tuple(
                               AddPartitionsToTxnTopic(name=n, partitions=ps) for n, ps in topics.items())))


def _end(s: Any, transactional_id: str, pid: int, epoch: int, commit: bool) -> Any:
    return ask(s, 26, 3, request_class(26, 3)(transactional_id=transactional_id, producer_id=pid,
                                              producer_epoch=epoch, committed=commit))


def _codes(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): p.partition_error_code
            for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}


def test_init_producer_id_with_a_transactional_id_answers_its_producer(kafka: Listener) -> None:
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        assert _init(s, "t") == (pid, epoch + 1)  # a new instance bumps the epoch
    described = kafka.client.get("/v1/transactions/t").json()
    assert (described["state"], described["producer_id"], described["producer_epoch"]) == ("Empty", pid, epoch + 1)


def test_init_producer_id_with_a_timeout_beyond_the_maximum_is_refused(kafka: Listener) -> None:
    with kafka.connect() as s:
        answer = ask(s, 22, 4, request_class(22, 4)(transactional_id="t", transaction_timeout=datetime.timedelta(
            hours=1), producer_id=-1, producer_epoch=-1))
    assert answer.error_code == ErrorCode.invalid_transaction_timeout
    assert kafka.client.get("/v1/transactions/t").status_code == 404


def test_add_partitions_to_an_unknown_partition_is_refused_and_begins_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        answer = _add_partitions(s, "t", pid, epoch, {"orders": (1, 2), "nope": (0,)})
    assert _codes(answer) == {("orders", 1): ErrorCode.operation_not_attempted,
                              ("orders", 2): ErrorCode.unknown_topic_or_partition,
                              ("nope", 0): ErrorCode.unknown_topic_or_partition}
    assert kafka.client.get("/v1/transactions/t").json()["state"] == "Empty"


def test_add_partitions_begins_the_transaction_and_then_joins_it(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        first = _add_partitions(s, "t", pid, epoch, {"orders": (0,)})
        txn_id = kafka.client.get("/v1/transactions/t").json()["txn_id"]
        again = _add_partitions(s, "t", pid, epoch, {"orders": (1,)})
    assert _codes(first) == {("orders", 0): ErrorCode.none}
    assert _codes(again) == {("orders", 1): ErrorCode.none}
    described = kafka.client.get("/v1/transactions/t").json()
    assert (described["state"], described["txn_id"]) == ("Ongoing", txn_id)


def test_end_txn_with_a_stale_epoch_is_fenced_and_changes_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, old = _init(s, "t")
        _, epoch = _init(s, "t")
        assert _codes(_add_partitions(s, "t", pid, epoch, {"orders": (0,)})) == {("orders", 0): ErrorCode.none}
        stale = _end(s, "t", pid, old, commit=True)
        assert stale.error_code == ErrorCode.producer_fenced
        assert kafka.client.get("/v1/transactions/t").json()["state"] == "Ongoing"
        assert _end(s, "t", pid, epoch, commit=False).error_code == ErrorCode.none
    assert kafka.client.get("/v1/transactions/t").json()["state"] == "CompleteAbort"


def test_end_txn_with_nothing_begun_is_an_invalid_txn_state(kafka: Listener) -> None:
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.invalid_txn_state
    assert kafka.client.get("/v1/transactions/t").json()["state"] == "Empty"


# --- offsets in the transaction (KIP-447) --------------------------------------------------

def _add_offsets(s: Any, transactional_id: str, pid: int, epoch: int, group_id: str) -> Any:
    return ask(s, 25, 3, request_class(25, 3)(transactional_id=transactional_id, producer_id=pid,
                                              producer_epoch=epoch, group_id=group_id))


def _txn_offset_commit(s: Any, transactional_id: str, pid: int, epoch: int, group_id: str,
                       offsets: dict[tuple[str, int], int], generation_id: int = -1, member_id: str = "",
                       instance_id: str | None = None) -> Any:
    from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic

    topics = sorted({t for t, _ in offsets})
    return ask(s, 28, 3, request_class(28, 3)(
        transactional_id=transactional_id, group_id=group_id, producer_id=pid, producer_epoch=epoch,
        generation_id=generation_id, member_id=member_id, group_instance_id=instance_id, topics=tuple(
            TxnOffsetCommitRequestTopic(name=t, partitions=tuple(
                TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                                committed_metadata=None)
                for (tt, p), o in sorted(offsets.items()) if tt == t))
            for t in topics)))


def _offset_codes(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def _committed(kafka: Listener, group_id: str) -> Any:
    r = kafka.client.get(f"/v1/groups/{group_id}/offsets", params={"require_stable": "false"})
    assert r.status_code == 200, r.text
    return [(o["topic"], o["partition"], o["offset"]) for o in r.json()["offsets"]]


def test_txn_offset_commit_becomes_the_groups_offset_at_commit_and_not_before(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        assert _add_offsets(s, "t", pid, epoch, "billing").error_code == ErrorCode.none
        assert kafka.client.get("/v1/transactions/t").json()["state"] == "Ongoing"
        staged = _txn_offset_commit(s, "t", pid, epoch, "billing", {("orders", 0): 7, ("orders", 1): 3})
        assert _offset_codes(staged) == {("orders", 0): ErrorCode.none, ("orders", 1): ErrorCode.none}
        assert _committed(kafka, "billing") == []
        assert kafka.client.get("/v1/groups/billing/offsets").json()["error_code"] == "UNSTABLE_OFFSET_COMMIT"
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
    assert _committed(kafka, "billing") == [("orders", 0, 7), ("orders", 1, 3)]


def test_txn_offset_commit_is_dropped_on_abort(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        assert _add_offsets(s, "t", pid, epoch, "billing").error_code == ErrorCode.none
        assert _offset_codes(_txn_offset_commit(s, "t", pid, epoch, "billing", {("orders", 0): 7})) == {
            ("orders", 0): ErrorCode.none}
        assert _end(s, "t", pid, epoch, commit=False).error_code == ErrorCode.none
    assert _committed(kafka, "billing") == []


def test_txn_offset_commit_of_a_stale_generation_is_refused_and_stages_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    joined = kafka.client.post("/v1/groups/billing/members", json={"topics": ["orders"]}).json()
    member, generation = joined["member_id"], joined["generation_id"]
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        assert _add_offsets(s, "t", pid, epoch, "billing").error_code == ErrorCode.none
        stale = _txn_offset_commit(s, "t", pid, epoch, "billing", {("orders", 0): 7},
                                   generation_id=generation - 1, member_id=member)
        assert _offset_codes(stale) == {("orders", 0): ErrorCode.illegal_generation}
        assert kafka.client.get("/v1/transactions/t").json()["pending_offsets"] == []
        current = _txn_offset_commit(s, "t", pid, epoch, "billing", {("orders", 0): 5},
                                     generation_id=generation, member_id=member)
        assert _offset_codes(current) == {("orders", 0): ErrorCode.none}
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
    assert _committed(kafka, "billing") == [("orders", 0, 5)]


def test_a_transactions_offsets_staged_before_a_rebalance_hold_the_new_owner_back_kip_447(kafka: Listener) -> None:
    # The consume-transform-produce loop's rebalance (examples/kafka_transactions.py): member A
    # stages orders/0's offset in generation 1; generation 2 gives orders/0 to B. B's
    # OffsetFetch (require_stable) is answered UNSTABLE_OFFSET_COMMIT until A's transaction
    # ends, so B cannot start from the offset before A's results; and A's transaction can
    # stage nothing more with generation 1's metadata.
    from tests.kafka.test_groups import _lone_member, assignment, fetch_offsets, heartbeat, in_thread, join, sync

    create_topic(kafka.client, "orders", partitions=2)
    a, a_id = _lone_member(kafka)  # generation 1: A holds orders/0 and orders/1
    with a, kafka.connect() as b, kafka.connect() as p:
        pid, epoch = _init(p, "t-a")
        assert _add_offsets(p, "t-a", pid, epoch, "g").error_code == ErrorCode.none
        staged = _txn_offset_commit(p, "t-a", pid, epoch, "g", {("orders", 0): 5}, generation_id=1, member_id=a_id)
        assert _offset_codes(staged) == {("orders", 0): ErrorCode.none}

        waiting, b_joined = in_thread(join, b, "g")
        while heartbeat(a, "g", 1, a_id) == ErrorCode.none:
            pass
        assert join(a, "g", a_id).generation_id == 2
        waiting.join(10)
        b_id = b_joined[0].member_id
        assert sync(a, "g", 2, a_id, {a_id: assignment({"orders": [1]}),
                                      b_id: assignment({"orders": [0]})}).error_code == ErrorCode.none
        assert sync(b, "g", 2, b_id).assignment == assignment({"orders": [0]})

        assert fetch_offsets(b, "g", {"orders": [0]}) == [("orders", 0, -1, ErrorCode.unstable_offset_commit)]
        stale = _txn_offset_commit(p, "t-a", pid, epoch, "g", {("orders", 0): 9, ("orders", 1): 3},
                                   generation_id=1, member_id=a_id)
        assert _offset_codes(stale) == {("orders", 0): ErrorCode.illegal_generation,
                                        ("orders", 1): ErrorCode.illegal_generation}
        assert fetch_offsets(b, "g", {"orders": [0, 1]}) == [
            ("orders", 0, -1, ErrorCode.unstable_offset_commit), ("orders", 1, -1, ErrorCode.none)]
        assert _end(p, "t-a", pid, epoch, commit=True).error_code == ErrorCode.none
        assert fetch_offsets(b, "g", {"orders": [0, 1]}) == [
            ("orders", 0, 5, ErrorCode.none), ("orders", 1, -1, ErrorCode.none)]


def test_txn_offset_commit_of_a_member_the_group_removed_is_unknown_member_id_and_stages_nothing(
        kafka: Listener, clock: Any) -> None:
    # A member that missed a rebalance (its session or rebalance timeout passed: a starved
    # loop) is no longer the group's; its transaction's offsets are refused before its
    # generation is looked at, as Kafka's validateCurrentMember does, even though the
    # generation it names is the one the group had when it last joined.
    from tests.kafka.test_groups import _lone_member, heartbeat, in_thread, join

    create_topic(kafka.client, "orders")
    a, a_id = _lone_member(kafka)
    with a, kafka.connect() as b, kafka.connect() as p:
        pid, epoch = _init(p, "t-a")
        assert _add_offsets(p, "t-a", pid, epoch, "g").error_code == ErrorCode.none
        waiting, b_joined = in_thread(join, b, "g", rebalance_s=5)
        while heartbeat(a, "g", 1, a_id) == ErrorCode.none:
            pass
        clock.advance(10_001)  # past A's rebalance timeout: generation 2 is formed without it
        waiting.join(10)
        assert [m.member_id for m in b_joined[0].members] == [b_joined[0].member_id]
        removed = _txn_offset_commit(p, "t-a", pid, epoch, "g", {("orders", 0): 5}, generation_id=1, member_id=a_id)
        assert _offset_codes(removed) == {("orders", 0): ErrorCode.unknown_member_id}
        assert kafka.client.get("/v1/transactions/t-a").json()["pending_offsets"] == []
        assert _end(p, "t-a", pid, epoch, commit=True).error_code == ErrorCode.none
    assert _committed(kafka, "g") == []


def test_confluent_kafkas_send_offsets_to_transaction_commits_the_groups_offsets(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    p = _txn_producer(kafka, "tx-1")
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "billing", "enable.auto.commit": False})
    try:
        p.begin_transaction()
        _produce(p, "orders", 0, [b'"a"'])
        p.send_offsets_to_transaction([TopicPartition("orders", 0, 4)], c.consumer_group_metadata(), TIMEOUT_S)
        assert _committed(kafka, "billing") == []
        p.commit_transaction(TIMEOUT_S)
    finally:
        c.close()
    assert _committed(kafka, "billing") == [("orders", 0, 4)]


# --- transactional Produce -------------------------------------------------------------------

def _txn_produce(s: Any, transactional_id: str | None, pid: int, epoch: int, values: list[bytes],
                 base_sequence: int = 0) -> Any:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(2, 0, 1, pid, epoch, base_sequence, 1 << 20)
    for i, v in enumerate(values):
        b.append(i, 1_700_000_000_000 + i, None, v, [])
    m = request_class(0, 9)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    answer = ask(s, 0, 9, m(transactional_id=transactional_id, acks=-1, timeout=datetime.timedelta(seconds=5),
                            topic_data=(mod.TopicProduceData(name="orders", partition_data=(
                                mod.PartitionProduceData(index=0, records=bytes(b.build())),)),)))
    ((p,),) = [t.partition_responses for t in answer.responses]
    return p


def _uncommitted(kafka: Listener) -> list[int]:
    r = kafka.client.get("/v1/topics/orders/partitions/0/records", params={"isolation": "read_uncommitted"})
    assert r.status_code == 200, r.text
    return [x["offset"] for x in r.json()["records"]]


def test_a_transactional_produce_joins_the_open_transaction(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        assert _codes(_add_partitions(s, "t", pid, epoch, {"orders": (0,)})) == {("orders", 0): ErrorCode.none}
        p = _txn_produce(s, "t", pid, epoch, [b'"a"', b'"b"'])
        assert (p.error_code, p.base_offset) == (ErrorCode.none, 0)
        assert _http_committed(kafka, "orders", 0) == []
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
    assert _http_committed(kafka, "orders", 0) == [(0, "a"), (1, "b")]


def test_a_transactional_produce_before_add_partitions_is_refused_and_writes_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        p = _txn_produce(s, "t", pid, epoch, [b'"a"'])
    assert p.error_code == ErrorCode.invalid_txn_state
    assert _uncommitted(kafka) == []
    assert kafka.client.get("/v1/transactions/t").json()["state"] == "Empty"


def test_a_transactional_batch_without_a_transactional_id_is_refused(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        assert _codes(_add_partitions(s, "t", pid, epoch, {"orders": (0,)})) == {("orders", 0): ErrorCode.none}
        p = _txn_produce(s, None, pid, epoch, [b'"a"'])
    assert p.error_code == ErrorCode.invalid_request
    assert _uncommitted(kafka) == []


def test_a_produce_of_a_fenced_epoch_is_refused_with_invalid_producer_epoch(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, old = _init(s, "t")
        assert _codes(_add_partitions(s, "t", pid, old, {"orders": (0,)})) == {("orders", 0): ErrorCode.none}
        _, epoch = _init(s, "t")  # fences `old` and aborts its (empty) transaction
        assert _codes(_add_partitions(s, "t", pid, epoch, {"orders": (0,)})) == {("orders", 0): ErrorCode.none}
        p = _txn_produce(s, "t", pid, old, [b'"zombie"'])
    assert p.error_code == ErrorCode.invalid_producer_epoch
    assert _uncommitted(kafka) == []


def test_end_txn_of_a_transactional_id_never_initialised_is_an_invalid_producer_id_mapping(kafka: Listener) -> None:
    with kafka.connect() as s:
        assert _end(s, "never", 1, 0, commit=True).error_code == ErrorCode.invalid_producer_id_mapping
        assert _add_offsets(s, "never", 1, 0, "billing").error_code == ErrorCode.invalid_producer_id_mapping
    assert kafka.client.get("/v1/transactions/never").status_code == 404


def _init_with(s: Any, transactional_id: str, pid: int, epoch: int) -> Any:
    return ask(s, 22, 4, request_class(22, 4)(transactional_id=transactional_id,
                                              transaction_timeout=datetime.timedelta(seconds=60),
                                              producer_id=pid, producer_epoch=epoch))


def test_init_producer_id_with_the_current_producer_bumps_its_epoch_kip_360(kafka: Listener) -> None:
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        bumped = _init_with(s, "t", pid, epoch)
        assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
        _init(s, "t")  # another instance takes the id over
        fenced = _init_with(s, "t", pid, epoch + 1)
    assert fenced.error_code == ErrorCode.producer_fenced
    assert kafka.client.get("/v1/transactions/t").json()["producer_epoch"] == epoch + 2


def test_init_producer_id_while_the_previous_transaction_completes_is_concurrent_transactions(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with deferred_completion(kafka) as deferred, deferred.connect() as s:
        pid, epoch = _init(s, "t")
        assert _codes(_add_partitions(s, "t", pid, epoch, {"orders": (0,)})) == {("orders", 0): ErrorCode.none}
        assert _txn_produce(s, "t", pid, epoch, [b'"a"']).error_code == ErrorCode.none
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
        again = ask(s, 22, 4, request_class(22, 4)(transactional_id="t", transaction_timeout=datetime.timedelta(
            seconds=60), producer_id=-1, producer_epoch=-1))
    assert again.error_code == ErrorCode.concurrent_transactions
    described = kafka.client.get("/v1/transactions/t").json()
    assert (described["state"], described["producer_epoch"]) == ("PrepareCommit", epoch)


def test_add_partitions_naming_more_than_the_most_partitions_is_refused_and_begins_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        answer = _add_partitions(s, "t", pid, epoch, {"orders": tuple(range(MAX_PARTITIONS_PER_REQUEST + 1))})
    assert set(_codes(answer).values()) == {ErrorCode.invalid_request}
    assert kafka.client.get("/v1/transactions/t").json()["state"] == "Empty"


def test_txn_offset_commit_naming_more_than_the_most_partitions_is_refused_and_stages_nothing(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        assert _add_offsets(s, "t", pid, epoch, "billing").error_code == ErrorCode.none
        answer = _txn_offset_commit(s, "t", pid, epoch, "billing",
                                    {("orders", p): 1 for p in range(MAX_PARTITIONS_PER_REQUEST + 1)})
    assert set(_offset_codes(answer).values()) == {ErrorCode.invalid_request}
    assert kafka.client.get("/v1/transactions/t").json()["pending_offsets"] == []
