"""A consumer group's committed offset read through the other door: an HTTP reader commits a
commit position (commit order), a Kafka consumer an offset (offset order). Each is stored with
its read order, and read through the other door as the same number only where it means the
same there: where no transaction that has not aborted has records on both sides of it. Where
one has, the reader is refused (INCONSISTENT_GROUP_PROTOCOL; UNSTABLE_OFFSET_COMMIT while that
transaction is open), never started where it would skip or repeat it. On SQLite and PostgreSQL.

The partition of every test: orders/0; the group: billing."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from kio.schema.errors import ErrorCode

from app.domain.offsets import ReadOrder
from app.storage import offsets as stored_offsets
from tests.helpers import batch, begin, create_topic, ident, init_producer, send
from tests.kafka.conftest import Listener
from tests.kafka.test_offset_leader_epoch import _commit, _fetched, _stage
from tests.kafka.test_transactions import _end as _end_kafka
from tests.kafka.test_transactions import _init

pytestmark = pytest.mark.kafka

NOT_FETCHED = -1  # OffsetFetch's committed_offset beside an error
CLIENT_WAIT_S = 15  # the most a Kafka client is given to fetch the group's offset


def _plain(kafka: Listener, value: str) -> int:
    """A plain record of orders/0; its offset."""
    r = send(kafka.client, [batch("orders", 0, [value])])
    assert r.status_code == 200, r.text
    return r.json()["results"][0]["base_offset"]


def _open_transaction(kafka: Listener, tid: str, value: str) -> dict:
    """A transaction of `tid` with one record in orders/0, left open; its producer."""
    producer = init_producer(kafka.client, tid)
    begin(kafka.client, tid, producer)
    r = send(kafka.client, [batch("orders", 0, [value], base_sequence=0)], producer, tid)
    assert r.status_code == 200, r.text
    return producer


def _end(kafka: Listener, tid: str, producer: dict, *, commit: bool) -> None:
    r = kafka.client.post(f"/v1/transactions/{tid}/{'commit' if commit else 'abort'}", json=ident(producer))
    assert r.status_code == 200, r.text


def _http_commit(kafka: Listener, offset: int) -> dict:
    r = kafka.client.post("/v1/groups/billing/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": offset}]})
    assert r.status_code == 200, r.text
    return r.json()


def _straddle(kafka: Listener, *, http_commit: bool) -> None:
    """The straddle most tests here build: orders created, transaction T1's record at 0 (left
    open), a plain record P1 at 1, T1 committed (its marker at 2, at commit position 2). With
    `http_commit`, an HTTP reader that read P1 commits position 2 while T1 is open: T1, committed
    at that position, straddles it."""
    create_topic(kafka.client, "orders")
    t1 = _open_transaction(kafka, "t1", "T1")
    assert _plain(kafka, "P1") == 1
    if http_commit:
        _http_commit(kafka, 2)
    _end(kafka, "t1", t1, commit=True)


def _http_fetch(kafka: Listener) -> Any:
    return kafka.client.get("/v1/groups/billing/offsets", params={"require_stable": "false"})


def _stored(kafka: Listener) -> list[tuple[int, ReadOrder]]:
    services = kafka.client.app.state.services
    with services.db.read() as conn:
        return [(o.committed_offset, o.read_order) for o in stored_offsets.fetch(conn, "billing")]


# --- an HTTP reader's commit position, read by a Kafka consumer ---------------------------


def test_a_commit_position_past_a_transaction_that_committed_later_is_refused_to_a_kafka_consumer(
        kafka: Listener) -> None:
    """The review's case: T1's record at 0 (open), a plain record at 1; the HTTP reader reads
    the plain record and commits 2; T1 commits at 2. A Kafka consumer starting at 2 would never
    get T1: refused, while the HTTP door still answers 2."""
    _straddle(kafka, http_commit=True)
    with kafka.connect() as s:
        assert _fetched(s) == (NOT_FETCHED, -1, ErrorCode.inconsistent_group_protocol)
    r = _http_fetch(kafka)
    assert r.status_code == 200, r.text
    assert [(o["offset"], o["read_order"]) for o in r.json()["offsets"]] == [(2, "commit")]


def test_a_commit_position_past_an_open_transaction_is_unstable_for_a_kafka_consumer(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    _open_transaction(kafka, "t1", "T1")
    _plain(kafka, "P1")
    _http_commit(kafka, 2)
    with kafka.connect() as s:
        assert _fetched(s) == (NOT_FETCHED, -1, ErrorCode.unstable_offset_commit)
        # Before version 7 (no require_stable, and no such code): the retriable "loading" instead.
        assert _fetched(s, version=6)[2] == ErrorCode.coordinator_load_in_progress


def test_a_commit_position_past_a_transaction_that_aborted_is_the_same_offset_for_a_kafka_consumer(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    t1 = _open_transaction(kafka, "t1", "T1")
    _plain(kafka, "P1")
    _http_commit(kafka, 2)
    _end(kafka, "t1", t1, commit=False)
    with kafka.connect() as s:
        assert _fetched(s) == (2, -1, ErrorCode.none)


def test_a_commit_position_of_plain_records_is_the_same_offset_for_a_kafka_consumer(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    for value in ("a", "b", "c"):
        _plain(kafka, value)
    _http_commit(kafka, 2)
    with kafka.connect() as s:
        assert _fetched(s) == (2, -1, ErrorCode.none)


def test_a_commit_position_past_a_whole_committed_transaction_is_the_same_offset_for_a_kafka_consumer(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    t1 = _open_transaction(kafka, "t1", "T1")
    _end(kafka, "t1", t1, commit=True)  # its record at 0, its marker at 1
    _plain(kafka, "P1")  # at 2
    _http_commit(kafka, 3)
    with kafka.connect() as s:
        assert _fetched(s) == (3, -1, ErrorCode.none)


# --- a Kafka consumer's offset, read by an HTTP reader ------------------------------------


def test_a_kafka_offset_below_a_transactions_marker_is_refused_to_an_http_reader(kafka: Listener) -> None:
    """T1's record at 0, a plain record at 1, T1's marker at 2: a Kafka consumer that read T1's
    record commits 1. From commit position 1 an HTTP reader would read T1 again (at 2)."""
    _straddle(kafka, http_commit=False)
    with kafka.connect() as s:
        assert _commit(s, 8, 1) == ErrorCode.none
    r = _http_fetch(kafka)
    assert r.status_code == 409, r.text
    assert r.json()["error_code"] == "INCONSISTENT_GROUP_PROTOCOL"
    assert r.json()["details"] == {"partitions": [{"topic": "orders", "partition": 0}]}
    assert _stored(kafka) == [(1, ReadOrder.OFFSET)]  # the refusal changed nothing


@pytest.mark.parametrize(("door", "offset", "lag"), [
    # A Kafka consumer at 1 has read T1's record, not P1: one record left, P1. Counted in
    # commit order 1 would also leave T1 (positioned at its marker, 2).
    ("kafka", 1, 1),
    # An HTTP reader at commit position 1 has read nothing: P1 (position 1) and T1 (2) left.
    ("http", 1, 2),
    # An HTTP reader at commit position 2 has read P1: T1 left, though it lies below 2.
    ("http", 2, 1),
])
def test_the_lag_counts_an_offset_in_its_own_read_order(kafka: Listener, door: str, offset: int, lag: int) -> None:
    _straddle(kafka, http_commit=False)
    if door == "kafka":
        with kafka.connect() as s:
            assert _commit(s, 8, offset) == ErrorCode.none
    else:
        _http_commit(kafka, offset)
    r = kafka.client.get("/v1/groups/billing/lag")
    assert r.status_code == 200, r.text
    assert [(p["committed_offset"], p["read_order"], p["lag"]) for p in r.json()["partitions"]] == [
        (offset, "offset" if door == "kafka" else "commit", lag)]


def test_a_kafka_offset_past_a_transactions_marker_is_the_same_position_for_an_http_reader(kafka: Listener) -> None:
    _straddle(kafka, http_commit=False)
    with kafka.connect() as s:
        assert _commit(s, 8, 3) == ErrorCode.none
    r = _http_fetch(kafka)
    assert r.status_code == 200, r.text
    assert [(o["offset"], o["read_order"]) for o in r.json()["offsets"]] == [(3, "commit")]


def test_a_kafka_offset_past_an_open_transactions_records_is_unstable_for_an_http_reader(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    _open_transaction(kafka, "t1", "T1")
    _plain(kafka, "P1")
    with kafka.connect() as s:
        assert _commit(s, 8, 2) == ErrorCode.none  # as a read_uncommitted consumer may
    r = _http_fetch(kafka)
    assert r.status_code == 409, r.text
    assert r.json()["error_code"] == "UNSTABLE_OFFSET_COMMIT"


def test_the_answer_to_an_http_commit_shows_each_offset_in_the_order_it_was_committed_in(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        assert _commit(s, 8, 0) == ErrorCode.none
    r = kafka.client.post("/v1/groups/billing/offsets", json={"offsets": [
        {"topic": "orders", "partition": 1, "offset": 0}]})
    assert r.status_code == 200, r.text
    assert [(o["partition"], o["read_order"]) for o in r.json()["offsets"]] == [(0, "offset"), (1, "commit")]


# --- the order a commit stores, by every path that commits ------------------------------


def test_offsets_staged_in_an_http_transaction_commit_in_commit_order(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    producer = init_producer(kafka.client, "t")
    begin(kafka.client, "t", producer)
    r = kafka.client.post("/v1/transactions/t/offsets", json={**ident(producer), "group_id": "billing", "offsets": [
        {"topic": "orders", "partition": 0, "offset": 0}]})
    assert r.status_code == 200, r.text
    _end(kafka, "t", producer, commit=True)
    assert _stored(kafka) == [(0, ReadOrder.COMMIT)]


def test_a_reset_keeps_the_order_of_the_offset_it_moves(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    for value in ("a", "b", "c"):
        _plain(kafka, value)
    with kafka.connect() as s:
        assert _commit(s, 8, 2) == ErrorCode.none
    r = kafka.client.post("/v1/groups/billing/offsets/reset", json={"topic": "orders", "to": "shift", "shift_by": -1})
    assert r.status_code == 200, r.text
    assert _stored(kafka) == [(1, ReadOrder.OFFSET)]


# --- what Kafka's own clients do with the refusal -----------------------------------------


def test_librdkafka_assigned_a_partition_whose_http_position_it_cannot_read_gets_the_error_and_no_record(
        kafka: Listener) -> None:
    """The refusal reaches the application as an error, and the consumer does not fall back to
    auto.offset.reset: it reads nothing, neither T1 again from the log start nor past it."""
    _straddle(kafka, http_commit=True)
    _plain(kafka, "P2")  # at 3, after T1's marker
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "billing", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    got: list[Any] = []
    errors: list[Any] = []
    try:
        c.assign([TopicPartition("orders", 0)])
        deadline = time.monotonic() + CLIENT_WAIT_S
        while time.monotonic() < deadline and not errors:
            m = c.poll(0.2)
            if m is not None:
                (errors if m.error() is not None else got).append(m.error() or m.value())
        # A while longer: no record follows the error.
        for _ in range(5):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    assert [e.code() for e in errors] == [KafkaError.INCONSISTENT_GROUP_PROTOCOL]
    assert got == []


def test_a_kafka_offset_past_the_log_end_with_no_transaction_open_is_the_same_position_for_an_http_reader(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    _plain(kafka, "P1")
    with kafka.connect() as s:
        assert _commit(s, 8, 5) == ErrorCode.none
    r = _http_fetch(kafka)
    assert r.status_code == 200, r.text
    assert [(o["offset"], o["read_order"]) for o in r.json()["offsets"]] == [(5, "commit")]


def test_a_reset_for_kafka_consumers_moves_a_group_they_were_refused_to_them(kafka: Listener) -> None:
    _straddle(kafka, http_commit=True)
    r = kafka.client.post("/v1/groups/billing/offsets/reset", json={
        "topic": "orders", "to": "offset", "offset": 0, "read_order": "offset"})
    assert r.status_code == 200, r.text
    assert _stored(kafka) == [(0, ReadOrder.OFFSET)]
    with kafka.connect() as s:
        assert _fetched(s) == (0, -1, ErrorCode.none)


def test_a_reset_to_the_current_offset_for_the_other_doors_readers_is_refused_where_it_would_skip(
        kafka: Listener) -> None:
    """The committed offset kept, only its order changed: refused where no offset of the other
    order means the same (T1 straddles 2), as a reader of that order would be."""
    _straddle(kafka, http_commit=True)
    for to in ({"to": "current"}, {"to": "shift", "shift_by": 0}):
        r = kafka.client.post("/v1/groups/billing/offsets/reset", json={"topic": "orders", **to, "read_order": "offset"})
        assert r.status_code == 409, r.text
        assert r.json()["error_code"] == "INCONSISTENT_GROUP_PROTOCOL"
    assert _stored(kafka) == [(2, ReadOrder.COMMIT)]


def test_a_reset_to_the_current_offset_for_the_other_doors_readers_moves_it_where_it_means_the_same(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    _plain(kafka, "P0")
    _plain(kafka, "P1")
    _http_commit(kafka, 1)
    r = kafka.client.post("/v1/groups/billing/offsets/reset", json={"topic": "orders", "to": "current",
                                                                   "read_order": "offset"})
    assert r.status_code == 200, r.text
    assert _stored(kafka) == [(1, ReadOrder.OFFSET)]


def test_a_kafka_transactional_offset_commit_stores_offset_order(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        _stage(s, "t", pid, epoch, 20, 4)
        assert _end_kafka(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
    assert _stored(kafka) == [(20, ReadOrder.OFFSET)]


def test_a_kafka_offset_at_a_transactions_marker_is_the_position_past_it_for_an_http_reader(kafka: Listener) -> None:
    """A consumer that commits after each record commits T1's marker offset after T1's last
    record: the same place in offset order as the offset past the marker, which an HTTP reader
    starts from (T1 read, nothing else)."""
    create_topic(kafka.client, "orders")
    _plain(kafka, "P0")
    t1 = _open_transaction(kafka, "t1", "T1")  # at 1
    _end(kafka, "t1", t1, commit=True)  # its marker at 2
    _plain(kafka, "P3")
    with kafka.connect() as s:
        assert _commit(s, 8, 2) == ErrorCode.none
    r = _http_fetch(kafka)
    assert r.status_code == 200, r.text
    assert [(o["offset"], o["read_order"]) for o in r.json()["offsets"]] == [(3, "commit")]


def test_a_fetch_naming_its_topics_is_not_refused_for_another_topics_offset(kafka: Listener) -> None:
    _straddle(kafka, http_commit=False)
    create_topic(kafka.client, "other")
    with kafka.connect() as s:
        assert _commit(s, 8, 1) == ErrorCode.none  # orders/0: refused to an HTTP reader
    r = kafka.client.post("/v1/groups/billing/offsets", json={"offsets": [{"topic": "other", "partition": 0, "offset": 0}]})
    assert r.status_code == 200, r.text

    named = kafka.client.get("/v1/groups/billing/offsets", params={"topic": ["other"]})
    every = kafka.client.get("/v1/groups/billing/offsets")

    assert named.status_code == 200, named.text
    assert [(o["topic"], o["offset"]) for o in named.json()["offsets"]] == [("other", 0)]
    assert (every.status_code, every.json()["error_code"]) == (409, "INCONSISTENT_GROUP_PROTOCOL")
    both = kafka.client.get("/v1/groups/billing/offsets", params={"topic": ["other", "orders"]})
    assert (both.status_code, both.json()["error_code"]) == (409, "INCONSISTENT_GROUP_PROTOCOL")


def test_the_http_client_library_of_a_group_reads_its_topic_beside_another_topics_refused_offset(
        kafka: Listener) -> None:
    from app.client.consumer import Consumer as HttpConsumer

    _straddle(kafka, http_commit=False)
    create_topic(kafka.client, "other")
    with kafka.connect() as s:
        assert _commit(s, 8, 1) == ErrorCode.none
    r = kafka.client.post("/v1/groups/billing/offsets", json={"offsets": [{"topic": "other", "partition": 0, "offset": 0}]})
    assert r.status_code == 200, r.text
    send(kafka.client, [batch("other", 0, ["x"])])
    consumer = HttpConsumer(str(kafka.client.base_url), "billing", client=kafka.client)
    consumer.subscribe(["other"])
    try:
        got = consumer.poll(5.0)
    finally:
        consumer.close()
    assert [r.value for r in got] == ["x"]


def test_a_reset_to_the_current_kafka_offset_on_a_marker_for_http_readers_takes_the_position_past_it(
        kafka: Listener) -> None:
    """As GET translates it: the same place, past T1's marker."""
    create_topic(kafka.client, "orders")
    _plain(kafka, "P0")
    t1 = _open_transaction(kafka, "t1", "T1")  # at 1
    _end(kafka, "t1", t1, commit=True)  # its marker at 2
    with kafka.connect() as s:
        assert _commit(s, 8, 2) == ErrorCode.none
    r = kafka.client.post("/v1/groups/billing/offsets/reset", json={"topic": "orders", "to": "current",
                                                                   "read_order": "commit"})
    assert r.status_code == 200, r.text
    assert [(o["committed_offset"], o["committed_read_order"], o["new_offset"], o["read_order"])
            for o in r.json()["offsets"]] == [(2, "offset", 3, "commit")]
    assert _stored(kafka) == [(3, ReadOrder.COMMIT)]


def test_a_fetch_naming_a_topic_that_does_not_exist_answers_the_others(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    _http_commit(kafka, 0)
    r = kafka.client.get("/v1/groups/billing/offsets", params={"topic": ["orders", "gone"]})
    assert r.status_code == 200, r.text
    assert [(o["topic"], o["offset"]) for o in r.json()["offsets"]] == [("orders", 0)]
