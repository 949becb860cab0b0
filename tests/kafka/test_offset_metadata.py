"""A committed offset's metadata is any string, NUL included, and reads back byte for byte,
as Kafka gives it back: committed through either door (OffsetCommit, or TxnOffsetCommit and a
commit; HTTP's offset commit, or AddOffsets and a commit), read by OffsetFetch and by the HTTP
door, on SQLite and PostgreSQL (whose text cannot hold NUL: storage keeps it escaped,
app.storage.tables.OffsetMetadataText)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import begin, create_topic, ident, init_producer
from tests.kafka.conftest import Listener, ask
from tests.kafka.test_transactions import _add_offsets, _end, _init

pytestmark = pytest.mark.kafka

# A NUL, a backslash, and the two characters the escaping writes for a NUL, given literally.
_METADATAS = ("nul\x00", "back\\slash", "\\0", "\\\\0\x00\\")


def _partitions(module: str, kind: str, metadatas: tuple[str, ...]) -> Any:
    """One topic, "orders", of a commit request's module: partition p at offset 10 + p, with
    metadatas[p]."""
    classes = __import__(module, fromlist=["x"])
    partition = getattr(classes, f"{kind}RequestPartition")
    return (getattr(classes, f"{kind}RequestTopic")(name="orders", partitions=tuple(
        partition(partition_index=p, committed_offset=10 + p, committed_leader_epoch=-1, committed_metadata=m)
        for p, m in enumerate(metadatas))),)


def _offset_fetch(s: Any, group: str) -> list[tuple[int, int, str | None, ErrorCode]]:
    """OffsetFetch v7 of every partition of "orders" the group has committed."""
    topic = getattr(__import__(request_class(9, 7).__module__, fromlist=["x"]), "OffsetFetchRequestTopic")  # type: ignore[union-attr]
    answer = ask(s, 9, 7, request_class(9, 7)(  # type: ignore[misc]
        group_id=group, require_stable=True,
        topics=(topic(name="orders", partition_indexes=tuple(range(len(_METADATAS)))),)))
    assert answer.error_code == ErrorCode.none
    return [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
            for t in answer.topics for p in t.partitions]


def _over_http(kafka: Listener, group: str) -> list[tuple[int, int, str | None]]:
    r = kafka.client.get(f"/v1/groups/{group}/offsets")
    assert r.status_code == 200, r.text
    return [(o["partition"], o["offset"], o["metadata"]) for o in r.json()["offsets"]]


_READ_BACK = [(p, 10 + p, m, ErrorCode.none) for p, m in enumerate(_METADATAS)]


def test_offset_commit_metadata_with_nul_and_backslashes_reads_back_byte_for_byte(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=len(_METADATAS))
    with kafka.connect() as s:
        answer = ask(s, 8, 8, request_class(8, 8)(  # type: ignore[misc]
            group_id="billing", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=_partitions(request_class(8, 8).__module__, "OffsetCommit", _METADATAS)))  # type: ignore[union-attr]
        assert [p.error_code for p in answer.topics[0].partitions] == [ErrorCode.none] * len(_METADATAS)
        assert _offset_fetch(s, "billing") == _READ_BACK
    assert _over_http(kafka, "billing") == [(p, o, m) for p, o, m, _ in _READ_BACK]


def test_txn_offset_commit_metadata_with_nul_and_backslashes_reads_back_byte_for_byte_once_committed(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=len(_METADATAS))
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        assert _add_offsets(s, "t", pid, epoch, "billing").error_code == ErrorCode.none
        staged = ask(s, 28, 3, request_class(28, 3)(  # type: ignore[misc]
            transactional_id="t", group_id="billing", producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None,
            topics=_partitions(request_class(28, 3).__module__, "TxnOffsetCommit", _METADATAS)))  # type: ignore[union-attr]
        assert [p.error_code for p in staged.topics[0].partitions] == [ErrorCode.none] * len(_METADATAS)
        pending = kafka.client.get("/v1/transactions/t").json()["pending_offsets"]
        assert [(o["partition"], o["metadata"]) for o in pending] == list(enumerate(_METADATAS))
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
        assert _offset_fetch(s, "billing") == _READ_BACK


def test_confluent_kafkas_commit_with_metadata_reads_back_through_committed(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "billing", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("orders", 0, 3, metadata="Hello world!")], asynchronous=False)
        [got] = c.committed([TopicPartition("orders", 0)], timeout=20)
    finally:
        c.close()
    assert (got.topic, got.partition, got.offset, got.metadata, got.error) == ("orders", 0, 3, "Hello world!", None)
    # What librdkafka sent: its metadata with a trailing NUL, kept as it came.
    assert _over_http(kafka, "billing") == [(0, 3, "Hello world!\x00")]


def _http_offsets() -> list[dict[str, Any]]:
    return [{"topic": "orders", "partition": p, "offset": 10 + p, "metadata": m} for p, m in enumerate(_METADATAS)]


def test_an_http_offset_commit_with_nul_and_backslashes_in_its_metadata_reads_back_through_both_doors(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=len(_METADATAS))
    r = kafka.client.post("/v1/groups/billing/offsets", json={"offsets": _http_offsets()})
    assert r.status_code == 200, r.text
    assert _over_http(kafka, "billing") == [(p, o, m) for p, o, m, _ in _READ_BACK]
    with kafka.connect() as s:
        assert _offset_fetch(s, "billing") == _READ_BACK


def test_http_add_offsets_with_nul_and_backslashes_in_their_metadata_read_back_through_both_doors_once_committed(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=len(_METADATAS))
    producer = init_producer(kafka.client, "t")
    begin(kafka.client, "t", producer)
    r = kafka.client.post("/v1/transactions/t/offsets",
                          json={**ident(producer), "group_id": "billing", "offsets": _http_offsets()})
    assert r.status_code == 200, r.text
    assert kafka.client.post("/v1/transactions/t/commit", json=ident(producer)).status_code == 200
    assert _over_http(kafka, "billing") == [(p, o, m) for p, o, m, _ in _READ_BACK]
    with kafka.connect() as s:
        assert _offset_fetch(s, "billing") == _READ_BACK
