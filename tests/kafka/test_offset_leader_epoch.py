"""A committed offset's leader epoch (Kafka's committed_leader_epoch) is stored with it and read
back as Kafka gives it back: committed by OffsetCommit (version 6 and later) or by
TxnOffsetCommit (version 2 and later) and a commit, read by OffsetFetch (version 5 and later)
and by the HTTP door; -1 (NO_LEADER_EPOCH) where the commit carried none. On SQLite and
PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask
from tests.kafka.test_transactions import _add_offsets, _end, _init

pytestmark = pytest.mark.kafka


def _module(api_key: int, version: int) -> Any:
    return __import__(request_class(api_key, version).__module__, fromlist=["x"])  # type: ignore[union-attr]


def _commit(s: Any, version: int, offset: int, **epoch: int) -> ErrorCode:
    """OffsetCommit of `version`, a simple consumer's, of group "billing": orders/0 at `offset`,
    with committed_leader_epoch if given."""
    m = _module(8, version)
    answer = ask(s, 8, version, request_class(8, version)(  # type: ignore[misc]
        group_id="billing", generation_id_or_member_epoch=-1, member_id="",
        **({"group_instance_id": None} if version >= 7 else {}),
        topics=(m.OffsetCommitRequestTopic(name="orders", partitions=(m.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_metadata="", **epoch),)),)))
    [partition] = answer.topics[0].partitions
    return partition.error_code


def _fetched(s: Any, version: int = 7) -> tuple[int, int, ErrorCode]:
    """OffsetFetch of `version`: orders/0's committed offset and leader epoch for "billing"."""
    answer = ask(s, 9, version, request_class(9, version)(  # type: ignore[misc]
        group_id="billing", **({"require_stable": True} if version >= 7 else {}),
        topics=(_module(9, version).OffsetFetchRequestTopic(name="orders", partition_indexes=(0,)),)))
    [partition] = answer.topics[0].partitions
    return partition.committed_offset, partition.committed_leader_epoch, partition.error_code


def _over_http(kafka: Listener) -> list[tuple[int, int]]:
    r = kafka.client.get("/v1/groups/billing/offsets")
    assert r.status_code == 200, r.text
    return [(o["offset"], o["leader_epoch"]) for o in r.json()["offsets"]]


def test_offset_commit_with_leader_epoch_7_reads_back_7_through_offset_fetch_and_http(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        assert _commit(s, 8, 12, committed_leader_epoch=7) == ErrorCode.none
        assert _fetched(s) == (12, 7, ErrorCode.none)
        assert _fetched(s, version=5) == (12, 7, ErrorCode.none)
    assert _over_http(kafka) == [(12, 7)]


def test_an_offset_commit_before_version_6_has_no_leader_epoch_and_reads_back_minus_1(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        assert _commit(s, 8, 12, committed_leader_epoch=7) == ErrorCode.none
        assert _commit(s, 5, 13) == ErrorCode.none  # replaces the offset and its epoch
        assert _fetched(s) == (13, -1, ErrorCode.none)
    assert _over_http(kafka) == [(13, -1)]


def test_an_http_offset_commit_replaces_the_leader_epoch_with_none(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        assert _commit(s, 8, 12, committed_leader_epoch=7) == ErrorCode.none
        r = kafka.client.post("/v1/groups/billing/offsets", json={"offsets": [
            {"topic": "orders", "partition": 0, "offset": 14}]})
        assert r.status_code == 200, r.text
        assert _fetched(s) == (14, -1, ErrorCode.none)


def test_a_reset_of_the_groups_offsets_replaces_the_leader_epoch_with_none(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        assert _commit(s, 8, 0, committed_leader_epoch=7) == ErrorCode.none
        r = kafka.client.post("/v1/groups/billing/offsets/reset", json={"topic": "orders", "to": "current"})
        assert r.status_code == 200, r.text
        assert _fetched(s) == (0, -1, ErrorCode.none)


def _stage(s: Any, tid: str, pid: int, epoch: int, offset: int, leader_epoch: int = -1) -> None:
    """TxnOffsetCommit v3 of transaction `tid`: group "billing"'s orders/0 at `offset`,
    `leader_epoch` (-1: none)."""
    m = _module(28, 3)
    assert _add_offsets(s, tid, pid, epoch, "billing").error_code == ErrorCode.none
    staged = ask(s, 28, 3, request_class(28, 3)(  # type: ignore[misc]
        transactional_id=tid, group_id="billing", producer_id=pid, producer_epoch=epoch, generation_id=-1,
        member_id="", group_instance_id=None,
        topics=(m.TxnOffsetCommitRequestTopic(name="orders", partitions=(m.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_leader_epoch=leader_epoch,
            committed_metadata=""),)),)))
    assert [p.error_code for p in staged.topics[0].partitions] == [ErrorCode.none]


def test_txn_offset_commits_leader_epoch_is_answered_once_the_transaction_commits(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        _stage(s, "t", pid, epoch, 20, 4)
        pending = kafka.client.get("/v1/transactions/t").json()["pending_offsets"]
        assert [(o["offset"], o["leader_epoch"]) for o in pending] == [(20, 4)]
        assert _fetched(s) == (-1, -1, ErrorCode.unstable_offset_commit)
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
        assert _fetched(s) == (20, 4, ErrorCode.none)
    assert _over_http(kafka) == [(20, 4)]


def test_an_offset_staged_again_in_the_transaction_commits_with_the_last_leader_epoch(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        _stage(s, "t", pid, epoch, 20, 4)
        _stage(s, "t", pid, epoch, 21, 9)  # replaces the staged offset, and its leader epoch with it
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
        assert _fetched(s) == (21, 9, ErrorCode.none)
    assert _over_http(kafka) == [(21, 9)]


def test_an_aborted_txn_offset_commit_leaves_the_committed_offset_and_its_leader_epoch(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        assert _commit(s, 8, 12, committed_leader_epoch=7) == ErrorCode.none
        pid, epoch = _init(s, "t")
        _stage(s, "t", pid, epoch, 20, 9)
        assert _end(s, "t", pid, epoch, commit=False).error_code == ErrorCode.none
        assert _fetched(s) == (12, 7, ErrorCode.none)
    assert _over_http(kafka) == [(12, 7)]


def test_confluent_kafkas_admin_alters_and_lists_a_group_offsets_leader_epoch(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("billing", [
        TopicPartition("orders", 0, 5, leader_epoch=2), TopicPartition("orders", 1, 6)])])
    assert [tp.error for tp in altered["billing"].result(timeout=20).topic_partitions] == [None, None]
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("billing", [
        TopicPartition("orders", 0), TopicPartition("orders", 1)])])
    read = listed["billing"].result(timeout=20).topic_partitions
    assert [(tp.partition, tp.offset, tp.leader_epoch) for tp in read] == [(0, 5, 2), (1, 6, None)]
