"""aiokafka drives the listener: an idempotent producer's records read back by a
read_committed consumer, exactly; a gzip producer's batches of several partitions in one
Produce, past its decompressed bound together, retried until all are written."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.helpers import create_topic
from tests.kafka.conftest import Listener, listener_with
from tests.kafka.test_door_metrics import _added

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


_PARTITIONS, _PER_PARTITION = 4, 500
_VALUE = b"x" * 1_000
_REQUEST_MAX_BYTES = 1 << 20  # two partitions' batches, decompressed (about 0.5 MB each), fit; four do not


async def _produce_compressed(bootstrap: str) -> list[tuple[int, int]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=200,
                                max_batch_size=1 << 20, max_request_size=_REQUEST_MAX_BYTES // 2,
                                request_timeout_ms=10_000, retry_backoff_ms=50)
    await producer.start()
    try:
        # Sent without waiting in between (send does not give way to the sender while there
        # is room), so that one Produce carries a batch of each partition.
        sent = [await producer.send("blobs", value=b"%04d" % i + _VALUE, partition=i % _PARTITIONS)
                for i in range(_PARTITIONS * _PER_PARTITION)]
        delivered = [await s for s in sent]
    finally:
        await producer.stop()
    return sorted((m.partition, m.offset) for m in delivered)


def test_aiokafka_gzip_batches_past_the_produce_s_decompressed_bound_together_are_retried_and_all_written(
        kafka: Listener) -> None:
    # aiokafka packs the four partitions' batches into one Produce: their records, 2 MB
    # decompressed, are past the request's bound all together, though each batch is within
    # it. The batches past what the ones before them left are NOT_ENOUGH_REPLICAS, which
    # aiokafka retries in a Produce of their own: every record is written, once.
    create_topic(kafka.client, "blobs", partitions=_PARTITIONS, value_format="bytes")
    retried = _added("outbox_kafka_errors_total", api="Produce", error="NOT_ENOUGH_REPLICAS")
    with listener_with(kafka, kafka_socket_request_max_bytes=_REQUEST_MAX_BYTES) as bounded:
        delivered = asyncio.run(_produce_compressed(bounded.bootstrap))
    assert delivered == [(p, o) for p in range(_PARTITIONS) for o in range(_PER_PARTITION)]
    assert retried() >= 1  # the bound mattered: partitions shared a Produce past it
    described = kafka.client.get("/v1/topics/blobs").json()
    assert [p["record_count"] for p in described["partitions"]] == [_PER_PARTITION] * _PARTITIONS  # each once
