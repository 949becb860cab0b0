"""A Fetch or ListOffsets asking for an isolation level Kafka does not define (0 is
read_uncommitted, 1 read_committed) has every partition refused with INVALID_REQUEST, as Kafka
refuses it, not read as read_uncommitted (which would hand a client that meant read_committed
the records of open and aborted transactions). On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import batch, create_topic, send
from tests.kafka.conftest import Listener, ask
from tests.kafka.test_wire import _fetch

pytestmark = pytest.mark.kafka

LATEST = -1


def _list_offsets(isolation: int) -> Any:
    m = request_class(2, 7)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    return m(replica_id=-1, isolation_level=isolation, topics=(mod.ListOffsetsTopic(name="orders", partitions=(
        mod.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=LATEST),)),))


@pytest.fixture
def orders(kafka: Listener) -> Listener:
    create_topic(kafka.client, "orders")
    r = send(kafka.client, [batch("orders", 0, ["a"])])
    assert r.status_code == 200, r.text
    return kafka


@pytest.mark.parametrize("isolation", [2, -1])
def test_a_fetch_of_an_unknown_isolation_level_is_refused(orders: Listener, isolation: int) -> None:
    with orders.connect() as s:
        answer = ask(s, 1, 12, _fetch("orders", 0, 0, isolation=isolation))
    ((p,),) = [t.partitions for t in answer.responses]
    assert (p.error_code, p.high_watermark, len(p.records or b"")) == (ErrorCode.invalid_request, -1, 0)


@pytest.mark.parametrize("isolation", [2, -1])
def test_a_list_offsets_of_an_unknown_isolation_level_is_refused(orders: Listener, isolation: int) -> None:
    with orders.connect() as s:
        answer = ask(s, 2, 7, _list_offsets(isolation))
    ((p,),) = [t.partitions for t in answer.topics]
    assert (p.error_code, p.offset) == (ErrorCode.invalid_request, -1)


@pytest.mark.parametrize("isolation", [0, 1])
def test_the_two_isolation_levels_kafka_defines_are_read(orders: Listener, isolation: int) -> None:
    with orders.connect() as s:
        fetched = ask(s, 1, 12, _fetch("orders", 0, 0, isolation=isolation))
        listed = ask(s, 2, 7, _list_offsets(isolation))
    ((p,),) = [t.partitions for t in fetched.responses]
    ((o,),) = [t.partitions for t in listed.topics]
    assert (p.error_code, p.high_watermark, o.error_code, o.offset) == (ErrorCode.none, 1, ErrorCode.none, 1)
