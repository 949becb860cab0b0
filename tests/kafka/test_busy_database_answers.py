"""Through the Kafka door, a request the database did not serve (a lock waited on past
OUTBOX_DB_LOCK_TIMEOUT_MS, the database down) is answered COORDINATOR_LOAD_IN_PROGRESS by a
coordinator's API, which Kafka's clients retry there, and KAFKA_STORAGE_ERROR by a partition's,
retried there (app.kafka.errors): a Commit that only waited for a lock is retried by the client,
not turned into an abort."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.domain.errors import LockWaitTimedOut
from app.kafka.protocol import request_class
from app.storage.errors import LOCK_WAIT_TIMED_OUT
from tests.helpers import create_topic, init_producer
from tests.kafka.conftest import Listener, ask
from tests.kafka.test_wire import _partition_answer, _produce, _records


def _busy(*_: Any, **__: Any) -> Any:
    raise LockWaitTimedOut(LOCK_WAIT_TIMED_OUT)


def test_an_end_txn_the_database_did_not_serve_is_answered_coordinator_load_in_progress(
        kafka: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    p = init_producer(kafka.client, "busy-tx")
    monkeypatch.setattr(kafka.services.coordinator, "end_transaction", _busy)
    with kafka.connect() as s:
        answer = ask(s, 26, 3, request_class(26, 3)(transactional_id="busy-tx", producer_id=p["producer_id"],
                                                    producer_epoch=p["producer_epoch"], committed=True))
    assert answer.error_code == ErrorCode.coordinator_load_in_progress


def test_a_heartbeat_the_database_did_not_serve_is_answered_coordinator_load_in_progress(
        kafka: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka.services.classic_group_protocol, "heartbeat", _busy)
    with kafka.connect() as s:
        answer = ask(s, 12, 4, request_class(12, 4)(group_id="g", generation_id=1, member_id="m",
                                                    group_instance_id=None))
    assert answer.error_code == ErrorCode.coordinator_load_in_progress


def test_a_produce_the_database_did_not_serve_is_answered_kafka_storage_error(
        kafka: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    create_topic(kafka.client, "orders")
    monkeypatch.setattr(kafka.services.log, "send", _busy)
    with kafka.connect() as s:
        answer = _partition_answer(ask(s, 0, 9, _produce("orders", 0, _records([b"1"]))))
    assert answer.error_code == ErrorCode.kafka_storage_error
