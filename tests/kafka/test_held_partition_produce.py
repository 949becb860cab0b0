"""A real Kafka producer against a partition whose row lock another database session holds (an
application's transaction that appends to it, until its COMMIT): its Produce is refused
KAFKA_STORAGE_ERROR once OUTBOX_DB_LOCK_TIMEOUT_MS has passed, nothing of it written, and once
the lock is let go the next Produce takes the next offset. Unit and wire tests cover the
mapping of the lock wait to that code (tests/kafka/test_busy_database_answers.py); this one
covers the path from a held lock through the service to what a client is told."""

from __future__ import annotations

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaStorageError
from sqlalchemy import text

from app.settings import Settings
from tests.helpers import create_topic
from tests.integration.test_partition_lock_waits import _held
from tests.kafka.conftest import Listener

pytestmark = [pytest.mark.kafka, pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)]

LOCK_TIMEOUT_MS = 300
TIMEOUT_S = 20


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The suite's settings, with a lock wait short enough for a test to meet."""
    return settings.model_copy(update={"db_lock_timeout_ms": LOCK_TIMEOUT_MS})


def test_a_produce_to_a_held_partition_is_refused_kafka_storage_error_and_the_next_takes_the_next_offset(
        kafka: Listener, db_url: str) -> None:
    create_topic(kafka.client, "held", 1)
    with kafka.services.db.read() as conn:
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'held'")).scalar_one()
    # Retries off: the client's own retry of a retriable code would wait the lock out and hide
    # the answer this test is about. Idempotence needs retries, so it is off too.
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, retries=0, enable_idempotence=False, acks="all",
                             request_timeout_ms=10_000)
    try:
        assert producer.send("held", value=b"1", partition=0).get(TIMEOUT_S).offset == 0
        holder = _held(db_url, topic_id, 0)
        try:
            with pytest.raises(KafkaStorageError):
                producer.send("held", value=b"2", partition=0).get(TIMEOUT_S)
        finally:
            holder.rollback()
            holder.close()
        assert producer.send("held", value=b"3", partition=0).get(TIMEOUT_S).offset == 1
    finally:
        producer.close(5)

    records = kafka.client.get("/v1/topics/held/partitions/0/records", params={"offset": 0}).json()["records"]
    assert [(r["offset"], r["value"]) for r in records] == [(0, 1), (1, 3)]
