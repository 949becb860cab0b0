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
LONG_WAIT_MS = 30_000  # a Fetch's max_wait_ms that an answer "at once" stays far below


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


def test_a_fetch_of_an_unknown_isolation_level_is_answered_at_once_whatever_its_max_wait(orders: Listener) -> None:
    import time

    with orders.connect() as s:
        started = time.monotonic()
        answer = ask(s, 1, 12, _fetch("orders", 0, 1, isolation=2, max_wait_ms=LONG_WAIT_MS))
        waited = time.monotonic() - started
    ((p,),) = [t.partitions for t in answer.responses]
    assert p.error_code == ErrorCode.invalid_request
    assert waited < LONG_WAIT_MS / 1000 / 2, waited  # not the wait: far below it, however loaded the machine


def test_a_fetch_with_a_partition_read_in_error_is_answered_at_once(kafka: Listener) -> None:
    """Kafka answers a Fetch at once when reading one of its partitions fails (an offset out
    of range), however long max_wait_ms: the
    client resets that partition's offset and fetches again, rather than waiting out the wait
    on the others."""
    import datetime
    import time

    create_topic(kafka.client, "pair", partitions=2)
    m = request_class(1, 12)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    body = m(replica_id=-1, max_wait=datetime.timedelta(milliseconds=LONG_WAIT_MS), min_bytes=1, max_bytes=1 << 20,
             isolation_level=1, session_id=0, session_epoch=-1, topics=(mod.FetchTopic(topic="pair", partitions=tuple(
                 mod.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                                    log_start_offset=-1, partition_max_bytes=1 << 20)
                 for p, offset in ((0, 0), (1, 5)))),), forgotten_topics_data=(), rack_id="")
    with kafka.connect() as s:
        started = time.monotonic()
        answer = ask(s, 1, 12, body)
        waited = time.monotonic() - started
    ((p0, p1),) = [t.partitions for t in answer.responses]
    assert (p0.error_code, p1.error_code) == (ErrorCode.none, ErrorCode.offset_out_of_range)
    assert waited < LONG_WAIT_MS / 1000 / 2, waited


def test_a_fetch_naming_an_unknown_partition_beside_a_caught_up_one_still_waits(kafka: Listener) -> None:
    """An unknown partition is no read that failed: Kafka answers it beside the others and the
    Fetch waits for them, as it waits without it."""
    import datetime
    import time

    create_topic(kafka.client, "pair")
    m = request_class(1, 12)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    body = m(replica_id=-1, max_wait=datetime.timedelta(milliseconds=1000), min_bytes=1, max_bytes=1 << 20,
             isolation_level=1, session_id=0, session_epoch=-1, topics=(mod.FetchTopic(topic="pair", partitions=tuple(
                 mod.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                    log_start_offset=-1, partition_max_bytes=1 << 20)
                 for p in (0, 7))),), forgotten_topics_data=(), rack_id="")
    with kafka.connect() as s:
        started = time.monotonic()
        answer = ask(s, 1, 12, body)
        waited = time.monotonic() - started
    ((p0, p7),) = [t.partitions for t in answer.responses]
    assert (p0.error_code, p7.error_code) == (ErrorCode.none, ErrorCode.unknown_topic_or_partition)
    assert waited >= 0.9, waited
