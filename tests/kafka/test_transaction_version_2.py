"""Transaction version 2 (KIP-890) through the Kafka door, by hand-built kio requests as a Kafka
4 client sends them once ApiVersions finalizes `transaction.version` at 2: no AddPartitionsToTxn
nor AddOffsetsToTxn (Produce 12 and TxnOffsetCommit 5 begin the transaction), EndTxn 5 answers
the bumped epoch, and a request carrying an ended transaction's epoch is refused. Records,
offsets and states are asserted exactly, through read_committed Fetch and the HTTP door."""

from __future__ import annotations

import datetime
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode
from sqlalchemy import select, update

from app.kafka.api_keys import SERVED
from app.kafka.protocol import request_class
from app.storage.tables import record_batches, records, transactions
from tests.helpers import create_topic, records_with_batches
from tests.kafka.conftest import Listener, ask, deferred_completion

TID = "tx-2"


def _init(s: Any, transactional_id: str = TID) -> tuple[int, int]:
    answer = ask(s, 22, 4, request_class(22, 4)(transactional_id=transactional_id,
                                                transaction_timeout=datetime.timedelta(seconds=60),
                                                producer_id=-1, producer_epoch=-1))
    assert answer.error_code == ErrorCode.none
    return answer.producer_id, answer.producer_epoch


def _produce(s: Any, pid: int, epoch: int, partition: int, values: list[bytes], base_sequence: int = 0,
             version: int = 12, topic: str = "orders") -> Any:
    """A transactional Produce of one batch; the partition's answer."""
    b = DefaultRecordBatchBuilder(2, 0, 1, pid, epoch, base_sequence, 1 << 20)
    for i, v in enumerate(values):
        b.append(i, 1_700_000_000_000 + i, None, v, [])
    m = request_class(0, version)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    answer = ask(s, 0, version, m(transactional_id=TID, acks=-1, timeout=datetime.timedelta(seconds=5),
                                  topic_data=(mod.TopicProduceData(name=topic, partition_data=(
                                      mod.PartitionProduceData(index=partition, records=bytes(b.build())),)),)))
    ((p,),) = [t.partition_responses for t in answer.responses]
    return p


def _end(s: Any, pid: int, epoch: int, commit: bool, version: int = 5) -> Any:
    return ask(s, 26, version, request_class(26, version)(transactional_id=TID, producer_id=pid,
                                                          producer_epoch=epoch, committed=commit))


def _txn_offset_commit(s: Any, pid: int, epoch: int, group_id: str, offsets: dict[tuple[str, int], int]) -> Any:
    from kio.schema.txn_offset_commit.v5.request import TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic

    topics = sorted({t for t, _ in offsets})
    answer = ask(s, 28, 5, request_class(28, 5)(
        transactional_id=TID, group_id=group_id, producer_id=pid, producer_epoch=epoch, generation_id=-1,
        member_id="", group_instance_id=None, topics=tuple(
            TxnOffsetCommitRequestTopic(name=t, partitions=tuple(
                TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                                committed_metadata=None)
                for (tt, p), o in sorted(offsets.items()) if tt == t))
            for t in topics)))
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def _read_committed(s: Any, partition: int, topic: str = "orders") -> list[tuple[int, bytes]]:
    """A read_committed Fetch (12) of the partition from offset 0, as a Kafka consumer takes it:
    the data records of its batches, less those of the aborted transactions the answer lists
    (each from its first offset to its producer's ABORT marker)."""
    from aiokafka.record.memory_records import MemoryRecords

    m = request_class(1, 12)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    answer = ask(s, 1, 12, m(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=1,
        session_id=0, session_epoch=-1, topics=(mod.FetchTopic(topic=topic, partitions=(mod.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20),)),), forgotten_topics_data=(), rack_id=""))
    ((p,),) = [t.partitions for t in answer.responses]
    assert p.error_code == ErrorCode.none
    aborted = sorted((a.first_offset, a.producer_id) for a in p.aborted_transactions or ())
    dropping: set[int] = set()
    out: list[tuple[int, bytes]] = []
    batches = MemoryRecords(bytes(p.records or b""))
    while (b := batches.next_batch()) is not None:
        while aborted and aborted[0][0] <= b.base_offset:
            dropping.add(aborted.pop(0)[1])
        if b.is_control_batch:
            dropping.discard(b.producer_id)
        elif not (b.is_transactional and b.producer_id in dropping):
            out.extend((r.offset, r.value) for r in b)
    return out


def _described(kafka: Listener) -> Any:
    return kafka.client.get(f"/v1/transactions/{TID}").json()


def _http_committed(kafka: Listener, partition: int) -> list[tuple[int, Any]]:
    r = kafka.client.get(f"/v1/topics/orders/partitions/{partition}/records", params={"isolation": "read_committed"})
    assert r.status_code == 200, r.text
    return [(rec["offset"], rec["value"]) for rec in r.json()["records"]]


def _committed_offsets(kafka: Listener, group_id: str) -> list[tuple[str, int, int]]:
    r = kafka.client.get(f"/v1/groups/{group_id}/offsets", params={"require_stable": "false"})
    assert r.status_code == 200, r.text
    return [(o["topic"], o["partition"], o["offset"]) for o in r.json()["offsets"]]


def _markers(kafka: Listener) -> list[tuple[int, int, int]]:
    """Every control marker of orders/0: (offset, producer_id, producer_epoch)."""
    with kafka.services.db.read() as conn:
        return [tuple(r) for r in conn.execute(
            select(records.c.offset, record_batches.c.producer_id, record_batches.c.producer_epoch)
            .select_from(records_with_batches())
            .where(records.c.partition == 0, records.c.control_type.is_not(None)).order_by(records.c.offset))]


# --- ApiVersions ------------------------------------------------------------------------------

def test_api_versions_finalizes_transaction_version_2_with_its_epoch(kafka: Listener) -> None:
    with kafka.connect() as s:
        answer = ask(s, 18, 3, request_class(18, 3)(client_software_name="test", client_software_version="1"))
    assert answer.error_code == ErrorCode.none
    assert [(f.name, f.min_version_level, f.max_version_level) for f in answer.finalized_features] == [
        ("transaction.version", 2, 2)]
    assert answer.finalized_features_epoch == 0
    # Before version 4 a supported feature whose minimum is 0 is left out, as Kafka does.
    assert answer.supported_features == ()
    versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert (versions[0], versions[26], versions[28], versions[24]) == ((3, 12), (0, 5), (0, 5), (0, 3))


def test_api_versions_4_also_answers_the_supported_range_of_transaction_version(kafka: Listener) -> None:
    with kafka.connect() as s:
        answer = ask(s, 18, 4, request_class(18, 4)(client_software_name="test", client_software_version="1"))
    assert answer.error_code == ErrorCode.none
    assert [(f.name, f.min_version, f.max_version) for f in answer.supported_features] == [
        ("transaction.version", 0, 2)]
    assert [(f.name, f.min_version_level, f.max_version_level) for f in answer.finalized_features] == [
        ("transaction.version", 2, 2)]
    assert answer.finalized_features_epoch == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == SERVED


# --- a whole transaction ----------------------------------------------------------------------

def test_a_version_2_transaction_needs_no_add_partitions_and_its_commit_answers_the_next_epoch(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        pid, epoch = _init(s)
        first = _produce(s, pid, epoch, 0, [b'"a0"', b'"a1"'])
        second = _produce(s, pid, epoch, 1, [b'"b0"'])
        assert (first.error_code, first.base_offset, second.error_code, second.base_offset) == (
            ErrorCode.none, 0, ErrorCode.none, 0)
        described = _described(kafka)
        assert (described["state"], described["transaction_version"]) == ("Ongoing", 2)
        assert [(q["topic"], q["partition"]) for q in described["partitions"]] == [("orders", 0), ("orders", 1)]
        assert _txn_offset_commit(s, pid, epoch, "billing", {("orders", 0): 7}) == {("orders", 0): ErrorCode.none}
        assert _read_committed(s, 0) == []  # nothing of the open transaction yet

        ended = _end(s, pid, epoch, commit=True)

        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
        # 0 and 1 the records, 2 the COMMIT marker (never returned as data).
        assert _read_committed(s, 0) == [(0, b'"a0"'), (1, b'"a1"')]
        assert _read_committed(s, 1) == [(0, b'"b0"')]
    assert _http_committed(kafka, 0) == [(0, "a0"), (1, "a1")]
    assert _committed_offsets(kafka, "billing") == [("orders", 0, 7)]
    described = _described(kafka)
    assert (described["state"], described["producer_id"], described["producer_epoch"]) == (
        "CompleteCommit", pid, epoch + 1)


def test_the_next_transaction_begins_at_its_first_produce_with_the_new_epoch_and_sequences_from_0(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _produce(s, pid, epoch, 0, [b'"a"', b'"b"']).error_code == ErrorCode.none
        bumped = _end(s, pid, epoch, commit=True).producer_epoch
        nxt = _produce(s, pid, bumped, 0, [b'"c"'], base_sequence=0)
        assert (nxt.error_code, nxt.base_offset) == (ErrorCode.none, 3)
        assert _described(kafka)["state"] == "Ongoing"
        assert _end(s, pid, bumped, commit=True).producer_epoch == bumped + 1
        # 0, 1 the first transaction, 2 its marker; 3 the second, 4 its marker.
        assert _read_committed(s, 0) == [(0, b'"a"'), (1, b'"b"'), (3, b'"c"')]


def test_txn_offset_commit_5_begins_the_transaction_without_add_offsets(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _txn_offset_commit(s, pid, epoch, "billing", {("orders", 0): 4}) == {("orders", 0): ErrorCode.none}
        described = _described(kafka)
        assert (described["state"], described["transaction_version"]) == ("Ongoing", 2)
        assert _committed_offsets(kafka, "billing") == []
        ended = _end(s, pid, epoch, commit=True)
        assert (ended.error_code, ended.producer_epoch) == (ErrorCode.none, epoch + 1)
    assert _committed_offsets(kafka, "billing") == [("orders", 0, 4)]


# --- abort --------------------------------------------------------------------------------------

def test_an_aborted_version_2_transaction_is_never_visible_and_its_abort_answers_the_next_epoch(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _produce(s, pid, epoch, 0, [b'"x"', b'"y"']).error_code == ErrorCode.none
        assert _txn_offset_commit(s, pid, epoch, "billing", {("orders", 0): 2}) == {("orders", 0): ErrorCode.none}

        ended = _end(s, pid, epoch, commit=False)

        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
        assert _read_committed(s, 0) == []
        assert _produce(s, pid, epoch + 1, 0, [b'"z"']).error_code == ErrorCode.none
        assert _end(s, pid, epoch + 1, commit=True).error_code == ErrorCode.none
        # 0, 1 aborted, 2 the ABORT marker, 3 the committed record, 4 its COMMIT marker.
        assert _read_committed(s, 0) == [(3, b'"z"')]
    assert _http_committed(kafka, 0) == [(3, "z")]
    assert _committed_offsets(kafka, "billing") == []


def test_an_abort_5_with_nothing_open_still_bumps_the_epoch(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        ended = _end(s, pid, epoch, commit=False)
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
        late = _produce(s, pid, epoch, 0, [b'"late"'])
        assert late.error_code == ErrorCode.invalid_producer_epoch
    described = _described(kafka)
    assert (described["state"], described["producer_epoch"], described["transaction_version"]) == (
        "Empty", epoch + 1, 2)
    assert _http_committed(kafka, 0) == []


def test_a_produce_while_the_previous_transaction_completes_is_retried_then_begins_the_next(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with deferred_completion(kafka) as deferred, deferred.connect() as s:
        pid, epoch = _init(s)
        assert _produce(s, pid, epoch, 0, [b'"a"']).error_code == ErrorCode.none
        ended = _end(s, pid, epoch, commit=True)  # answered at PrepareCommit: the worker writes the markers
        assert (ended.error_code, ended.producer_epoch) == (ErrorCode.none, epoch + 1)

        early = _produce(s, pid, epoch + 1, 0, [b'"b"'])

        assert (early.error_code, early.base_offset) == (ErrorCode.not_enough_replicas, -1)
        assert _described(kafka)["state"] == "PrepareCommit"
        kafka.services.coordinator.completion.complete(TID)
        retried = _produce(s, pid, epoch + 1, 0, [b'"b"'])
        assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 2)
    assert _described(kafka)["state"] == "Ongoing"


# --- a request of the ended transaction --------------------------------------------------------

def test_a_delayed_produce_of_the_committed_transaction_is_refused_and_never_visible(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _produce(s, pid, epoch, 0, [b'"a"']).error_code == ErrorCode.none
        assert _end(s, pid, epoch, commit=True).producer_epoch == epoch + 1

        # Delayed past the commit: refused while the transactional id is idle ...
        idle = _produce(s, pid, epoch, 0, [b'"late"'], base_sequence=1)
        assert (idle.error_code, idle.base_offset) == (ErrorCode.invalid_producer_epoch, -1)
        assert _described(kafka)["state"] == "CompleteCommit"
        # ... and once the next transaction has begun: it never joins it.
        assert _produce(s, pid, epoch + 1, 0, [b'"b"']).error_code == ErrorCode.none
        joined = _produce(s, pid, epoch, 0, [b'"late"'], base_sequence=1)
        assert joined.error_code == ErrorCode.invalid_producer_epoch
        assert _end(s, pid, epoch + 1, commit=True).error_code == ErrorCode.none
        # 0 "a", 1 its marker, 2 "b", 3 its marker: nothing of the delayed batch.
        assert _read_committed(s, 0) == [(0, b'"a"'), (2, b'"b"')]
    r = kafka.client.get("/v1/topics/orders/partitions/0/records", params={"isolation": "read_uncommitted"})
    assert [x["value"] for x in r.json()["records"]] == ["a", "b"]


def test_a_delayed_end_txn_of_the_committed_transaction_is_answered_again_then_fenced_and_ends_nothing_later(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _produce(s, pid, epoch, 0, [b'"a"']).error_code == ErrorCode.none
        assert _end(s, pid, epoch, commit=True).producer_epoch == epoch + 1
        retried = _end(s, pid, epoch, commit=True)  # its answer was lost: the same answer again
        assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
        assert _produce(s, pid, epoch + 1, 0, [b'"b"']).error_code == ErrorCode.none

        late = _end(s, pid, epoch, commit=True)

        assert (late.error_code, late.producer_id, late.producer_epoch) == (ErrorCode.producer_fenced, -1, -1)
        assert _described(kafka)["state"] == "Ongoing"
        assert _read_committed(s, 0) == [(0, b'"a"')]


def test_an_abort_5_carrying_the_epoch_a_recovery_bumped_from_is_fenced_not_answered_as_a_retry(
        kafka: Listener) -> None:
    # The recovery (KIP-360) bumped the epoch at version 1; no Commit or Abort ended a
    # transaction at the old epoch, so version 2 has nothing to answer again.
    with kafka.connect() as s:
        pid, epoch = _init(s)
        recovered = ask(s, 22, 4, request_class(22, 4)(transactional_id=TID,
                                                       transaction_timeout=datetime.timedelta(seconds=60),
                                                       producer_id=pid, producer_epoch=epoch))
        assert (recovered.error_code, recovered.producer_id, recovered.producer_epoch) == (ErrorCode.none, pid, epoch + 1)

        stale = _end(s, pid, epoch, commit=False)

        assert (stale.error_code, stale.producer_id, stale.producer_epoch) == (ErrorCode.producer_fenced, -1, -1)
        described = _described(kafka)
        assert (described["producer_epoch"], described["state"]) == (epoch + 1, "Empty")


def test_a_commit_5_with_the_new_epoch_after_a_commit_is_invalid_txn_state_and_changes_nothing(
        kafka: Listener) -> None:
    # Only the epoch before the bump retries the commit; the new one names a transaction that
    # has not begun.
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _produce(s, pid, epoch, 0, [b'"a"']).error_code == ErrorCode.none
        assert _end(s, pid, epoch, commit=True).producer_epoch == epoch + 1

        again = _end(s, pid, epoch + 1, commit=True)

        assert again.error_code == ErrorCode.invalid_txn_state
        described = _described(kafka)
        assert (described["producer_epoch"], described["state"]) == (epoch + 1, "CompleteCommit")
        assert _read_committed(s, 0) == [(0, b'"a"')]


def test_a_delayed_txn_offset_commit_of_the_committed_transaction_is_refused_and_stages_nothing(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _produce(s, pid, epoch, 0, [b'"a"']).error_code == ErrorCode.none
        assert _end(s, pid, epoch, commit=True).error_code == ErrorCode.none
        late = _txn_offset_commit(s, pid, epoch, "billing", {("orders", 0): 1})
    assert late == {("orders", 0): ErrorCode.invalid_producer_epoch}
    assert _described(kafka)["state"] == "CompleteCommit"
    assert _committed_offsets(kafka, "billing") == []


# --- epoch exhaustion ----------------------------------------------------------------------------

def test_end_txn_hands_out_epoch_32766_then_a_new_producer_id_at_epoch_0_and_answers_its_retry_again(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, _ = _init(s)
        with kafka.services.db.write() as conn:
            conn.execute(update(transactions).where(transactions.c.transactional_id == TID).values(producer_epoch=32765))
        assert _produce(s, pid, 32765, 0, [b'"a"']).error_code == ErrorCode.none
        last = _end(s, pid, 32765, commit=True)
        assert (last.error_code, last.producer_id, last.producer_epoch) == (ErrorCode.none, pid, 32766)
        assert _produce(s, pid, 32766, 0, [b'"b"']).error_code == ErrorCode.none

        ended = _end(s, pid, 32766, commit=True)

        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (ErrorCode.none, pid + 1, 0)
        retried = _end(s, pid, 32766, commit=True)
        assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (ErrorCode.none, pid + 1, 0)
        late = _produce(s, pid, 32766, 0, [b'"late"'], base_sequence=1)
        assert late.error_code == ErrorCode.invalid_producer_epoch
        assert _produce(s, pid + 1, 0, 0, [b'"c"']).error_code == ErrorCode.none
        again = _end(s, pid + 1, 0, commit=True)
        assert (again.error_code, again.producer_id, again.producer_epoch) == (ErrorCode.none, pid + 1, 1)
        # 0 "a", 1 its marker (32766), 2 "b", 3 its marker (the old id at 32767), 4 "c" (the
        # new id), 5 its marker.
        assert _read_committed(s, 0) == [(0, b'"a"'), (2, b'"b"'), (4, b'"c"')]
    assert _http_committed(kafka, 0) == [(0, "a"), (2, "b"), (4, "c")]
    assert _markers(kafka) == [(1, pid, 32766), (3, pid, 32767), (5, pid + 1, 1)]


# --- version 1 beside it ------------------------------------------------------------------------

def test_a_version_1_client_keeps_its_epoch_across_transactions(kafka: Listener) -> None:
    from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnTopic

    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        for n, value in enumerate([b'"a"', b'"b"']):
            added = ask(s, 24, 3, request_class(24, 3)(
                v3_and_below_transactional_id=TID, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=(AddPartitionsToTxnTopic(name="orders", partitions=(0,)),)))
            assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code \
                == ErrorCode.none
            assert _produce(s, pid, epoch, 0, [value], base_sequence=n, version=11).error_code == ErrorCode.none
            ended = _end(s, pid, epoch, commit=True, version=4)
            assert ended.error_code == ErrorCode.none
        assert _read_committed(s, 0) == [(0, b'"a"'), (2, b'"b"')]
    described = _described(kafka)
    assert (described["producer_epoch"], described["transaction_version"]) == (epoch, 1)


def test_an_end_txn_4_decides_by_version_1_s_rules_and_keeps_the_epoch(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        assert _produce(s, pid, epoch, 0, [b'"a"']).error_code == ErrorCode.none  # begun as version 2
        assert _end(s, pid, epoch, commit=True, version=4).error_code == ErrorCode.none
        assert _read_committed(s, 0) == [(0, b'"a"')]
    described = _described(kafka)
    assert (described["state"], described["producer_epoch"], described["transaction_version"]) == (
        "CompleteCommit", epoch, 1)


def test_a_version_1_produce_to_an_idle_transactional_id_begins_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s)
        refused = _produce(s, pid, epoch, 0, [b'"a"'], version=11)
    assert refused.error_code == ErrorCode.transaction_abortable  # KIP-890: Produce 11 knows it
    assert (_described(kafka)["state"], _described(kafka)["transaction_version"]) == ("Empty", 1)
    assert _http_committed(kafka, 0) == []
