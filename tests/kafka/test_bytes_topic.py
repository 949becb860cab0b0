"""Guarantee 19 through the Kafka door: a record produced to a bytes topic is stored byte for
byte (key, value, headers in order, repeats and nulls kept) and reads back so through Kafka
and, as {"type": "BINARY", "data": base64}, over HTTP. On both databases, with librdkafka
(confluent-kafka) and kafka-python."""

from __future__ import annotations

import base64
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.helpers import create_topic
from tests.kafka.conftest import Listener
from tests.kafka.test_door_metrics import _added

TIMEOUT_S = 20
KEY = b"\x00\xffkey"
VALUE = b"\x80\x00not json\xfe"
HEADERS = [("h", b"\xff\x00"), ("h", None), ("empty", b"")]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _over_http(kafka: Listener) -> list[tuple[Any, ...]]:
    r = kafka.client.get("/v1/topics/blobs/partitions/0/records", params={"isolation": "read_uncommitted"})
    assert r.status_code == 200, r.text
    return [(x["offset"], x["key"], x["value"], x["headers"]) for x in r.json()["records"]]


EXPECTED_HTTP = [(0, {"type": "BINARY", "data": _b64(KEY)}, {"type": "BINARY", "data": _b64(VALUE)},
                  [{"name": "h", "value": _b64(b"\xff\x00")}, {"name": "h", "value": None},
                   {"name": "empty", "value": ""}]),
                 (1, None, None, None)]


def test_confluent_kafka_stores_and_reads_a_bytes_topics_records_byte_for_byte(kafka: Listener) -> None:
    create_topic(kafka.client, "blobs", value_format="bytes")
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "message.timeout.ms": 10_000})
    reports: list[Any] = []
    p.produce("blobs", value=VALUE, key=KEY, partition=0, headers=HEADERS,
              on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    p.produce("blobs", value=None, key=None, partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(TIMEOUT_S) == 0
    assert reports == [(None, 0), (None, 1)]
    assert _over_http(kafka) == EXPECTED_HTTP
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "test", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition("blobs", 0, OFFSET_BEGINNING)])
        got: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 2 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m)
    finally:
        c.close()
    assert [(m.offset(), m.key(), m.value(), m.headers()) for m in got] == [
        (0, KEY, VALUE, HEADERS), (1, None, None, None)]


def test_kafka_python_stores_and_reads_a_bytes_topics_records_byte_for_byte(kafka: Listener) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    # kafka-python sends no null header value, and no record with neither key nor value.
    headers = [("h", b"\xff\x00"), ("h", b""), ("empty", b"")]
    create_topic(kafka.client, "blobs", value_format="bytes")
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, request_timeout_ms=10_000)
    try:
        offsets = [producer.send("blobs", value=VALUE, key=KEY, partition=0, headers=headers).get(TIMEOUT_S).offset,
                   producer.send("blobs", value=None, key=b"", partition=0).get(TIMEOUT_S).offset]
    finally:
        producer.close(5)
    assert offsets == [0, 1]
    assert _over_http(kafka) == [
        (0, {"type": "BINARY", "data": _b64(KEY)}, {"type": "BINARY", "data": _b64(VALUE)},
         [{"name": "h", "value": _b64(b"\xff\x00")}, {"name": "h", "value": ""}, {"name": "empty", "value": ""}]),
        (1, {"type": "BINARY", "data": ""}, None, None)]
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=TIMEOUT_S * 1000)
    try:
        tp = KafkaTopicPartition("blobs", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        for m in consumer:
            got.append((m.offset, m.key, m.value, m.headers))
            if len(got) == 2:
                break
    finally:
        consumer.close()
    assert got == [(0, KEY, VALUE, headers), (1, b"", None, [])]


def test_a_topic_deleted_and_created_again_as_bytes_takes_bytes_at_once(kafka: Listener) -> None:
    create_topic(kafka.client, "blobs")
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "message.timeout.ms": 10_000})
    reports: list[Any] = []
    failed = _added("outbox_kafka_connections_closed_total", reason="error")
    p.produce("blobs", value=b'{"n": 1}', partition=0, on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(TIMEOUT_S) == 0
    assert kafka.client.delete("/v1/topics/blobs").status_code == 204
    create_topic(kafka.client, "blobs", value_format="bytes")
    p.produce("blobs", value=VALUE, partition=0, on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(TIMEOUT_S) == 0
    assert reports == [None, None]
    assert [(o, v) for o, _, v, _ in _over_http(kafka)] == [(0, {"type": "BINARY", "data": _b64(VALUE)})]
    assert failed() == 0  # taken on its first Produce, not on the client's retry after a failure


def test_a_value_shaped_like_https_typed_json_is_kept_byte_for_byte_by_a_topic_created_again_as_bytes(
        kafka: Listener) -> None:
    # The door last saw a json topic, so it builds the batch as JSON first; the bytes topic must
    # refuse that batch (the door builds it again as bytes), never read the value as HTTP's
    # {"type": "STRING", "data": …} and store "x".
    typed = b'{"type": "STRING", "data": "x"}'
    create_topic(kafka.client, "blobs")
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "message.timeout.ms": 10_000})
    reports: list[Any] = []
    p.produce("blobs", value=b'{"n": 1}', partition=0, on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(TIMEOUT_S) == 0
    assert kafka.client.delete("/v1/topics/blobs").status_code == 204
    create_topic(kafka.client, "blobs", value_format="bytes")
    p.produce("blobs", value=typed, partition=0, on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(TIMEOUT_S) == 0
    assert reports == [None, None]
    assert [(o, v) for o, _, v, _ in _over_http(kafka)] == [(0, {"type": "BINARY", "data": _b64(typed)})]
