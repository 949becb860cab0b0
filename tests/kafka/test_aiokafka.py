"""aiokafka drives the listener: an idempotent producer's records read back by a
read_committed consumer, exactly."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.helpers import create_topic
from tests.kafka.conftest import Listener

TIMEOUT_S = 20


async def _produce_and_consume(bootstrap: str) -> tuple[list[int], list[tuple[int, bytes | None, bytes | None]]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, request_timeout_ms=10_000)
    await producer.start()
    try:
        offsets = [(await producer.send_and_wait("orders", value=v, key=b"k", partition=0)).offset
                   for v in (b'"a"', b'"b"')]
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition("orders", 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        while len(got) < 2:
            m = await asyncio.wait_for(consumer.getone(), TIMEOUT_S)
            got.append((m.offset, m.key, m.value))
    finally:
        await consumer.stop()
    return offsets, got


def test_aiokafka_idempotent_producer_and_read_committed_consumer(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    offsets, got = asyncio.run(_produce_and_consume(kafka.bootstrap))
    assert offsets == [0, 1]
    assert got == [(0, b"k", b'"a"'), (1, b"k", b'"b"')]
    records = kafka.client.get("/v1/topics/orders/partitions/0/records").json()["records"]
    assert [(r["offset"], r["sequence"]) for r in records] == [(0, 0), (1, 1)]
    assert records[0]["producer_id"] is not None
