"""A read_committed consumer of each client steps over the offsets where nothing is stored below
the last stable offset (a batch whose last records compaction removed): the door answers a batch
of no record up to there (app.domain.read.LogBatch), and the consumer stands at the end of what
it may read, as Kafka's own empty batches place it, not below records it will never be given.
On SQLite and PostgreSQL."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import delete, select, update

from app.domain.log_cleaning import record_sizes
from app.storage.tables import partitions, records
from tests.helpers import batch, begin, create_topic, init_producer, send
from tests.kafka.conftest import Listener

TIMEOUT_S = 20


def _compacted_tail(kafka: Listener) -> None:
    """orders/0: a plain batch [0, 2] whose records 1 and 2 were removed, as compaction removes
    them, then an open transaction from 3 (the last stable offset)."""
    create_topic(kafka.client, "orders")
    assert send(kafka.client, [batch("orders", 0, ["a", "b", "c"])]).status_code == 200
    with kafka.services.db.write() as conn:
        removed = conn.execute(select(records.c.key, records.c.value, records.c.headers)
                               .where(records.c.offset.in_([1, 2]))).all()
        conn.execute(delete(records).where(records.c.offset.in_([1, 2])))
        # As compaction keeps them: the partition's counters count the records left.
        conn.execute(update(partitions).values(
            record_count=partitions.c.record_count - len(removed),
            size_bytes=partitions.c.size_bytes - sum(record_sizes(*zip(*removed)))))
    p = init_producer(kafka.client, "t")
    begin(kafka.client, "t", p)
    assert send(kafka.client, [batch("orders", 0, ["open"], 0)], p, "t").status_code == 200


def test_librdkafka_reaches_the_end_past_the_removed_records(kafka: Listener) -> None:
    """librdkafka's fetcher steps over the batch of no record and reports the partition's end
    there (its application position stays past the last record it delivered)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    _compacted_tail(kafka)
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "test", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 100, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition("orders", 0, OFFSET_BEGINNING)])
        got, end, deadline = [], None, time.monotonic() + TIMEOUT_S
        while end is None and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.offset())
            elif m is not None and m.error().code() == KafkaError._PARTITION_EOF:
                end = m.offset()
    finally:
        c.close()
    assert (got, end) == ([0], 3)


def test_kafka_python_stands_past_the_removed_records(kafka: Listener) -> None:
    from kafka import KafkaConsumer, TopicPartition

    _compacted_tail(kafka)
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    tp = TopicPartition("orders", 0)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got, deadline = [], time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not (got and consumer.position(tp) == 3):
            for messages in consumer.poll(200).values():
                got += [m.offset for m in messages]
        position = consumer.position(tp)
    finally:
        consumer.close()
    assert (got, position) == ([0], 3)


def test_a_fetch_answered_only_a_batch_of_no_record_waits_its_max_wait_ms(kafka: Listener) -> None:
    """The batch of no record does not count toward min_bytes: a client that does not step over
    it (kafkajs stays at its offset) waits out max_wait_ms between its Fetches, as it did before
    the batch was answered, rather than being answered at once, a database read a turn."""
    from tests.kafka.conftest import ask
    from tests.kafka.test_wire import _fetch

    _compacted_tail(kafka)
    with kafka.connect() as s:
        started = time.monotonic()
        answer = ask(s, 1, 12, _fetch("orders", 0, 1, max_wait_ms=600))
        waited = time.monotonic() - started
    ((p,),) = [t.partitions for t in answer.responses]
    assert (p.error_code, p.last_stable_offset, len(p.records)) == (0, 3, 61)  # the batch of no record, to 3
    assert waited >= 0.55


pytestmark = pytest.mark.kafka
