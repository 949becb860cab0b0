"""kafka-python drives the listener: a producer's records read back by its consumer, exactly."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.helpers import create_topic
from tests.kafka.conftest import Listener

TIMEOUT_S = 20


def test_kafka_python_produces_and_consumes_read_committed(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, request_timeout_ms=10_000)
    try:
        offsets = [producer.send("orders", value=v, key=b"k", partition=0, headers=[("h", b"1")]).get(TIMEOUT_S).offset
                   for v in (b'{"n": 1}', b'{"n": 2}')]
    finally:
        producer.close(5)
    assert offsets == [0, 1]
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=TIMEOUT_S * 1000)
    try:
        tp = TopicPartition("orders", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        for m in consumer:
            got.append((m.offset, m.key, m.value, m.headers))
            if len(got) == 2:
                break
    finally:
        consumer.close()
    assert got == [(0, b"k", b'{"n": 1}', [("h", b"1")]), (1, b"k", b'{"n": 2}', [("h", b"1")])]


def test_kafka_python_idempotent_producer_writes_each_record_once(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, enable_idempotence=True, acks="all",
                             request_timeout_ms=10_000)
    try:
        offsets = [producer.send("orders", value=str(i).encode(), partition=0).get(TIMEOUT_S).offset for i in range(3)]
    finally:
        producer.close(5)
    assert offsets == [0, 1, 2]
    records = kafka.client.get("/v1/topics/orders/partitions/0/records").json()["records"]
    assert [(r["offset"], r["value"], r["sequence"]) for r in records] == [(0, 0, 0), (1, 1, 1), (2, 2, 2)]
    assert records[0]["producer_id"] is not None
