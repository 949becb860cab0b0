"""librdkafka, through confluent-kafka, drives the listener: plain and idempotent producers,
read_committed and read_uncommitted consumers, offsets. Records and offsets are asserted
exactly, through Kafka and through the HTTP door of the same process."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from tests.helpers import batch, begin, create_topic, ident, init_producer, send
from tests.kafka.conftest import Listener

TIMEOUT_S = 20


def _producer(kafka: Listener, **config: Any) -> Producer:
    return Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "message.timeout.ms": 10_000, **config})


def _consume(kafka: Listener, topic: str, partition: int, count: int, *, isolation: str = "read_committed",
             quiet_s: float = 0.0) -> list[Any]:
    """The first `count` records of the partition (from its start), and then whatever else
    arrives within `quiet_s`: a test that expects no more records waits that long for them."""
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "test", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 100})
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


def _deliver(p: Producer, topic: str, partition: int, records: list[tuple[bytes | None, bytes, Any]]) -> list[Any]:
    """Produce and wait for every delivery report: (error, offset) of each."""
    reports: list[Any] = []
    for key, value, headers in records:
        p.produce(topic, value=value, key=key, partition=partition, headers=headers,
                  on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(TIMEOUT_S) == 0
    return reports


def _stored(kafka: Listener, topic: str = "orders", partition: int = 0) -> list[dict[str, Any]]:
    r = kafka.client.get(f"/v1/topics/{topic}/partitions/{partition}/records",
                         params={"isolation": "read_uncommitted"})
    assert r.status_code == 200, r.text
    return r.json()["records"]


def test_a_plain_producer_appends_and_a_consumer_reads_back_exactly(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    reports = _deliver(_producer(kafka), "orders", 1, [
        (b"order-1", b'{"pizza": "margherita"}', [("source", b"kafka")]),
        (None, b'"two"', None),
        (b"order-3", b"3", None),
    ])
    assert reports == [(None, 0), (None, 1), (None, 2)]
    got = _consume(kafka, "orders", 1, 3)
    assert [(m.offset(), m.key(), m.value(), m.headers()) for m in got] == [
        (0, b"order-1", b'{"pizza": "margherita"}', [("source", b"kafka")]),
        (1, None, b'"two"', None),
        (2, b"order-3", b"3", None),
    ]
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in _stored(kafka, partition=1)] == [
        (0, "order-1", {"pizza": "margherita"}, {"source": "kafka"}), (1, None, "two", None), (2, "order-3", 3, None)]


def test_a_record_sent_over_http_reads_as_its_json_bytes_through_kafka(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    r = kafka.client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [
        {"key": "k", "value": {"a": [1, 2]}, "headers": {"h": "v"}}]}]})
    assert r.status_code == 200, r.text
    (m,) = _consume(kafka, "orders", 0, 1)
    assert (m.offset(), m.key(), m.value(), m.headers()) == (0, b"k", b'{"a":[1,2]}', [("h", b"v")])


def test_an_idempotent_producer_writes_with_its_producer_id_and_sequences(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    reports = _deliver(_producer(kafka, **{"enable.idempotence": True}), "orders", 0,
                       [(None, b'"a"', None), (None, b'"b"', None), (None, b'"c"', None)])
    assert reports == [(None, 0), (None, 1), (None, 2)]
    stored = _stored(kafka)
    assert [(r["value"], r["sequence"], r["transactional"]) for r in stored] == [
        ("a", 0, False), ("b", 1, False), ("c", 2, False)]
    assert stored[0]["producer_id"] is not None
    assert {(r["producer_id"], r["producer_epoch"]) for r in stored} == {(stored[0]["producer_id"], 0)}


def test_a_value_that_is_not_json_is_refused_invalid_record_and_not_written(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    reports = _deliver(_producer(kafka), "orders", 0, [(None, b"not json", None)])
    ((error, _),) = reports
    assert error is not None and error.code() == KafkaError.INVALID_RECORD
    assert _stored(kafka) == []


# 9999-12-31T23:59:59.999Z: the last timestamp a record may have (app.domain.records.MAX_TIMESTAMP_MS),
# the last instant Spark's and Python's timestamps hold.
LAST_TIMESTAMP_MS = 253_402_300_799_999


def test_a_timestamp_past_9999_12_31_fails_invalid_timestamp_with_its_batch_and_the_last_instant_is_written(
        kafka: Listener) -> None:
    """As a broker answers a timestamp it refuses: INVALID_TIMESTAMP for the partition, nothing of
    the batch written. librdkafka fails every record of such a batch with it (it reads the
    records named, KIP-467, for INVALID_RECORD only: tests/kafka/test_wire.py reads the names)."""
    create_topic(kafka.client, "orders")
    p = _producer(kafka, **{"linger.ms": 1000})
    reports: list[Any] = []
    for ts in (LAST_TIMESTAMP_MS, LAST_TIMESTAMP_MS + 1):  # one batch: sent together by the flush
        p.produce("orders", value=b"1", partition=0, timestamp=ts,
                  on_delivery=lambda err, msg: reports.append(err and err.code()))
    assert p.flush(TIMEOUT_S) == 0
    assert reports == [KafkaError.INVALID_TIMESTAMP, KafkaError.INVALID_TIMESTAMP]
    assert _stored(kafka) == []

    assert _deliver_at(_producer(kafka), "orders", LAST_TIMESTAMP_MS) == [(None, 0)]
    (m,) = _consume(kafka, "orders", 0, 1)
    assert (m.offset(), m.timestamp()) == (0, (1, LAST_TIMESTAMP_MS))  # TIMESTAMP_CREATE_TIME
    assert [(r["offset"], r["timestamp_ms"]) for r in _stored(kafka)] == [(0, LAST_TIMESTAMP_MS)]


def _deliver_at(p: Producer, topic: str, timestamp_ms: int) -> list[Any]:
    reports: list[Any] = []
    p.produce(topic, value=b"1", partition=0, timestamp=timestamp_ms,
              on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(TIMEOUT_S) == 0
    return reports


def test_keyless_records_in_a_batch_to_a_compacted_topic_fail_invalid_record_and_the_rest_of_it_with_them(
        kafka: Listener) -> None:
    """Kafka's Produce names the records at fault by their index in the batch (KIP-467): the
    client fails those INVALID_RECORD, the others of the batch _INVALID_DIFFERENT_RECORD, and
    nothing of the batch is written."""
    create_topic(kafka.client, "orders", cleanup_policy="compact")
    # One batch: linger long enough to gather all four, sent by the flush.
    reports = _deliver(_producer(kafka, **{"linger.ms": 1000}), "orders", 0,
                       [(b"a", b"1", None), (None, b"2", None), (b"c", b"3", None), (None, b"4", None)])
    assert [error.code() for error, _ in reports] == [
        KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
        KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD]
    assert _stored(kafka) == []


def test_a_produce_to_a_partition_that_does_not_exist_fails_and_writes_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    reports = _deliver(_producer(kafka, **{"message.timeout.ms": 3000}), "orders", 5, [(None, b"1", None)])
    ((error, _),) = reports
    assert error is not None and error.code() in (KafkaError._UNKNOWN_PARTITION, KafkaError._MSG_TIMED_OUT)
    assert _stored(kafka) == []


def _transactions_over_http(kafka: Listener) -> dict[str, dict[str, Any]]:
    """plain 0; a: 1, 2, ABORT 3; c: 4, 5, COMMIT 6; o: 7, 8 (still open); plain 9."""
    client = kafka.client
    create_topic(client, "orders")
    assert send(client, [batch("orders", 0, ["p0"])]).status_code == 200
    producers = {}
    for tid, end in (("a", "abort"), ("c", "commit"), ("o", None)):
        p = producers[tid] = init_producer(client, tid)
        begin(client, tid, p)
        assert send(client, [batch("orders", 0, [f"{tid}0", f"{tid}1"], 0)], p, tid).status_code == 200
        if end:
            assert client.post(f"/v1/transactions/{tid}/{end}", json=ident(p)).status_code == 200
    assert send(client, [batch("orders", 0, ["p9"])]).status_code == 200
    return producers


def test_read_committed_reads_in_offset_order_up_to_the_last_stable_offset_without_aborted_records(
        kafka: Listener) -> None:
    _transactions_over_http(kafka)
    got = _consume(kafka, "orders", 0, 3, quiet_s=1.5)
    assert [(m.offset(), m.value()) for m in got] == [(0, b'"p0"'), (4, b'"c0"'), (5, b'"c1"')]


def test_read_uncommitted_reads_every_data_record_up_to_the_high_watermark(kafka: Listener) -> None:
    _transactions_over_http(kafka)
    got = _consume(kafka, "orders", 0, 8, isolation="read_uncommitted", quiet_s=0.5)
    assert [(m.offset(), m.value()) for m in got] == [
        (0, b'"p0"'), (1, b'"a0"'), (2, b'"a1"'), (4, b'"c0"'), (5, b'"c1"'), (7, b'"o0"'), (8, b'"o1"'), (9, b'"p9"')]


def test_a_read_committed_consumer_gets_the_rest_once_the_open_transaction_commits(kafka: Listener) -> None:
    producers = _transactions_over_http(kafka)
    assert kafka.client.post("/v1/transactions/o/commit", json=ident(producers["o"])).status_code == 200
    got = _consume(kafka, "orders", 0, 6)
    assert [(m.offset(), m.value()) for m in got] == [
        (0, b'"p0"'), (4, b'"c0"'), (5, b'"c1"'), (7, b'"o0"'), (8, b'"o1"'), (9, b'"p9"')]


def test_the_high_watermark_a_consumer_sees_is_the_last_stable_offset_under_read_committed(kafka: Listener) -> None:
    _transactions_over_http(kafka)
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "test", "isolation.level": "read_committed"})
    try:
        assert c.get_watermark_offsets(TopicPartition("orders", 0), timeout=TIMEOUT_S) == (0, 7)
        u = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "test", "isolation.level": "read_uncommitted"})
        try:
            assert u.get_watermark_offsets(TopicPartition("orders", 0), timeout=TIMEOUT_S) == (0, 10)
        finally:
            u.close()
    finally:
        c.close()


def test_offsets_for_times_finds_the_first_record_at_or_after_a_timestamp(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    p = _producer(kafka)
    for i, ts in enumerate((1_000, 2_000, 3_000)):
        p.produce("orders", value=str(i).encode(), partition=0, timestamp=ts)
    assert p.flush(TIMEOUT_S) == 0
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "test"})
    try:
        found = c.offsets_for_times([TopicPartition("orders", 0, 1_500), TopicPartition("orders", 0, 2_000)],
                                    timeout=TIMEOUT_S)
        later = c.offsets_for_times([TopicPartition("orders", 0, 9_000)], timeout=TIMEOUT_S)
    finally:
        c.close()
    assert [t.offset for t in found] == [1, 1]
    assert [t.offset for t in later] == [-1]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_compressed_batch_is_read_and_appended_record_by_record(kafka: Listener, codec: str) -> None:
    create_topic(kafka.client, "orders")
    reports = _deliver(_producer(kafka, **{"compression.type": codec, "linger.ms": 50}), "orders", 0,
                       [(None, b'{"n": %d, "pad": "%s"}' % (i, b"x" * 500), None) for i in range(5)])
    assert reports == [(None, i) for i in range(5)]
    # Repetitive values: librdkafka sends a batch compressed only where that makes it smaller.
    assert [(r["offset"], r["value"]) for r in _stored(kafka)] == [(i, {"n": i, "pad": "x" * 500}) for i in range(5)]
