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


async def _produce_compressed(bootstrap: str, partitions: int, per_partition: int) -> list[tuple[int, int]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=200,
                                max_batch_size=1 << 20, request_timeout_ms=10_000)
    await producer.start()
    try:
        # Sent without waiting in between, so that a Produce carries the batches of several partitions.
        sent = [await producer.send("blobs", value=b"%04d" % i + b"x" * 1_000, partition=i % partitions)
                for i in range(partitions * per_partition)]
        delivered = [await s for s in sent]
    finally:
        await producer.stop()
    return sorted((m.partition, m.offset) for m in delivered)


def test_aiokafka_compressed_batches_of_several_partitions_in_one_produce_are_all_taken(kafka: Listener) -> None:
    # Their records decompressed, 2 MB, are within the request's bound all together.
    create_topic(kafka.client, "blobs", partitions=4, value_format="bytes")
    delivered = asyncio.run(_produce_compressed(kafka.bootstrap, 4, 500))
    assert delivered == [(p, o) for p in range(4) for o in range(500)]
