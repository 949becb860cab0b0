"""Through the Kafka door, a Produce of an idempotent producer whose id producer expiry forgot
(app.services.producer_expiry) is answered UNKNOWN_PRODUCER_ID and writes nothing, as one of an
id that never existed; the producer's new id (InitProducerId again) writes from sequence 0."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from app.settings import Settings
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask
from tests.kafka.test_wire import _partition_answer, _produce, _records, _stored


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The service's settings with the expiration set (a day, as Kafka's): unset, its default,
    no producer id is forgotten."""
    return settings.model_copy(update={"producer_id_expiration_ms": 86_400_000})


def _init(s: Any) -> Any:
    init = ask(s, 22, 4, request_class(22, 4)(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                              producer_id=-1, producer_epoch=-1))
    assert init.error_code == ErrorCode.none
    return init


def _produce_one(s: Any, init: Any, value: bytes, base_sequence: int) -> Any:
    return _partition_answer(ask(s, 0, 9, _produce("orders", 0, _records(
        [value], producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=base_sequence))))


def test_a_produce_after_its_producer_id_expired_is_answered_unknown_producer_id(kafka: Listener, clock: Any) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        init = _init(s)
        assert _produce_one(s, init, b"1", 0).error_code == ErrorCode.none
        clock.advance(kafka.services.settings.producer_id_expiration_ms + 1)
        assert kafka.services.producer_expiry.expire(clock()).expired == 1

        late = _produce_one(s, init, b"2", 1)
        again = _init(s)
        renewed = _produce_one(s, again, b"2", 0)

    assert (late.error_code, late.base_offset) == (ErrorCode.unknown_producer_id, -1)
    assert again.producer_id != init.producer_id
    assert (renewed.error_code, renewed.base_offset) == (ErrorCode.none, 1)
    assert _stored(kafka) == [(0, None, 1), (1, None, 2)]
