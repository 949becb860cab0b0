"""Through the Kafka door, a Produce of an idempotent producer whose id producer expiry forgot
(app.services.producer_expiry) takes the id back (LogService.send) and is written at the
sequence it carries, as a Kafka broker writes a produce of a producer whose state it no longer
holds; one naming an id never handed out is answered UNKNOWN_PRODUCER_ID and writes nothing. And
librdkafka's idempotent producer, idle past the expiration, just goes on producing."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from app.settings import Settings
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask
from tests.kafka.secured import Secured, start_secured
from tests.kafka.test_security import _sasl
from tests.kafka.test_wire import _partition_answer, _produce, _records, _stored

EXPIRATION_MS = 1_000  # short: the test's clock is moved past it

TIMEOUT_S = 20


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"producer_id_expiration_ms": EXPIRATION_MS})


def _init(s: Any) -> Any:
    init = ask(s, 22, 4, request_class(22, 4)(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                              producer_id=-1, producer_epoch=-1))
    assert init.error_code == ErrorCode.none
    return init


def _produce_one(s: Any, producer_id: int, producer_epoch: int, value: bytes, base_sequence: int,
                 partition: int = 0) -> Any:
    return _partition_answer(ask(s, 0, 9, _produce("orders", partition, _records(
        [value], producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence))))


def _forget(kafka: Listener, clock: Any) -> None:
    clock.advance(EXPIRATION_MS + 1)
    assert kafka.services.producer_expiry.expire(clock()).expired == 1


def test_a_produce_after_its_producer_id_expired_takes_the_id_back(kafka: Listener, clock: Any) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        init = _init(s)
        assert _produce_one(s, init.producer_id, init.producer_epoch, b"1", 0).error_code == ErrorCode.none
        _forget(kafka, clock)

        late = _produce_one(s, init.producer_id, init.producer_epoch, b"2", 1)
        following = _produce_one(s, init.producer_id, init.producer_epoch, b"3", 2)
        gap = _produce_one(s, init.producer_id, init.producer_epoch, b"5", 4)
        elsewhere = _produce_one(s, init.producer_id, init.producer_epoch, b"9", 8, partition=1)

    assert [(a.error_code, a.base_offset) for a in (late, following, gap, elsewhere)] == [
        (ErrorCode.none, 1), (ErrorCode.none, 2), (ErrorCode.out_of_order_sequence_number, -1), (ErrorCode.none, 0)]
    assert _stored(kafka) == [(0, None, 1), (1, None, 2), (2, None, 3)]
    assert _stored(kafka, partition=1) == [(0, None, 9)]


def test_a_produce_naming_an_id_never_handed_out_is_answered_unknown_producer_id(kafka: Listener, clock: Any) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        init = _init(s)
        unknown = _produce_one(s, init.producer_id + 1, 0, b"1", 3)
        again = _init(s)

    assert (unknown.error_code, unknown.base_offset) == (ErrorCode.unknown_producer_id, -1)
    assert again.producer_id == init.producer_id + 1  # nothing took it meanwhile
    assert _stored(kafka) == []


def test_librdkafka_s_idempotent_producer_idle_past_the_expiration_goes_on_producing(kafka: Listener, clock: Any) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                  "message.timeout.ms": 10_000})
    reports: list[tuple[Any, int, int]] = []

    def deliver(partition: int, value: bytes) -> None:
        p.produce("orders", value=value, partition=partition,
                  on_delivery=lambda err, msg: reports.append((err, msg.partition(), msg.offset())))
        assert p.flush(TIMEOUT_S) == 0

    for partition, value in ((0, b"1"), (0, b"2"), (1, b"3")):
        deliver(partition, value)
    _forget(kafka, clock)
    # The take-back (its next batch to partition 0, at sequence 2), then a later Send to the
    # other partition, whose state went with it (at sequence 1).
    deliver(0, b"4")
    deliver(1, b"5")
    deliver(0, b"6")

    assert reports == [(None, 0, 0), (None, 0, 1), (None, 1, 0), (None, 0, 2), (None, 1, 1), (None, 0, 3)]
    assert _stored(kafka) == [(0, None, 1), (1, None, 2), (2, None, 4), (3, None, 6)]
    assert _stored(kafka, partition=1) == [(0, None, 3), (1, None, 5)]


@pytest.fixture
def secured(db_url: str, clock: Any) -> Iterator[Secured]:
    yield from start_secured(db_url, clock, producer_id_expiration_ms=EXPIRATION_MS)


def test_another_principal_s_produce_with_a_forgotten_id_is_answered_unknown_producer_id(
        secured: Secured, clock: Any) -> None:
    # alice's producer is forgotten; bob, who may write the same topic, is answered as for an id
    # never handed out while its row of forgotten_producers lives, and alice takes it back as before.
    for who in ("User:alice", "User:bob"):
        secured.grant(who, "topic", "orders", "write")
    services = secured.client.app.state.services
    with secured.connect() as alice, secured.connect() as bob:
        assert _sasl(alice, "alice", secured.keys["alice"]).error_code == ErrorCode.none
        assert _sasl(bob, "bob", secured.keys["bob"]).error_code == ErrorCode.none
        init = _init(alice)
        assert _produce_one(alice, init.producer_id, init.producer_epoch, b"1", 0).error_code == ErrorCode.none
        clock.advance(EXPIRATION_MS + 1)
        assert services.producer_expiry.expire(clock()).expired == 1

        stolen = _produce_one(bob, init.producer_id, init.producer_epoch, b"8", 1)
        late = _produce_one(alice, init.producer_id, init.producer_epoch, b"2", 1)
        after = _produce_one(bob, init.producer_id, init.producer_epoch, b"9", 2)

    assert [(a.error_code, a.base_offset) for a in (stolen, late, after)] == [
        (ErrorCode.unknown_producer_id, -1), (ErrorCode.none, 1), (ErrorCode.unknown_producer_id, -1)]
    assert [r["value"] for r in secured.stored()] == [1, 2]
