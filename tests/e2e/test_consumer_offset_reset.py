"""The consumer's auto_offset_reset against a live service, on both databases: a group whose
committed offset fell below the log start (retention, DeleteRecords: tests/log_start.py moves
it), and a new group starting at the log end behind an open transaction."""

from __future__ import annotations

import logging

import pytest

from app.client import Consumer, OffsetOutOfRangeError, Producer
from tests.e2e.api import ok, partition_offsets
from tests.log_start import move_log_start

pytestmark = pytest.mark.e2e

ORDERS = ("orders", 0)
COMMITTED, LOG_START = 5, 8


def _send(url: str, *values: object) -> None:
    producer = Producer(url)
    for v in values:
        producer.send("orders", v, partition=0)
    producer.flush()
    producer.close()


def _transaction(url: str, tid: str, *values: object, commit: bool = True) -> Producer:
    producer = Producer(url, tid)
    producer.init_transactions()
    producer.begin_transaction()
    for v in values:
        producer.send("orders", v, partition=0)
    producer.flush()
    if commit:
        producer.commit_transaction()
    return producer


@pytest.fixture
def url(launcher):  # type: ignore[no-untyped-def]
    """orders/0: plain 0..9 at offsets 0..9, a committed transaction of 10 and 11 (marker at
    12), an aborted one (13, marker 14), plain 12 at 15; group g committed offset 5, then the
    log start moved to 8."""
    server = launcher.server()
    with server.client() as client:
        ok(client.post("/v1/topics", json={"name": "orders", "partitions": 1}), 201)
        _send(server.url, *range(10))
        _transaction(server.url, "shop", 10, 11).close()
        _transaction(server.url, "shop", "aborted", commit=False).abort_transaction()
        _send(server.url, 12)
        ok(client.post("/v1/groups/g/offsets", json={"offsets": [
            {"topic": "orders", "partition": 0, "offset": COMMITTED}]}))
        move_log_start(launcher.backend.engine, "orders", 0, LOG_START)
        assert partition_offsets(client, "orders") == {0: (LOG_START, 16, 16)}
    return server.url


def _poll_all(consumer: Consumer) -> list:
    out = []
    while got := consumer.poll(timeout_s=0.5):
        out += got
    return out


def _resets(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "app.client.consumer"]


def test_earliest_reads_from_the_log_start_exactly_the_committed_records_still_there(url, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="app.client.consumer")
    consumer = Consumer(url, "g", auto_offset_reset="earliest", session_timeout_ms=6000)
    consumer.subscribe(["orders"])
    try:
        records = _poll_all(consumer)
        assert [(r.offset, r.commit_position, r.value) for r in records] == [
            (8, 8, 8), (9, 9, 9), (10, 12, 10), (11, 12, 11), (15, 15, 12)]
        assert consumer.position(ORDERS) == 16
    finally:
        consumer.close()
    assert _resets(caplog) == [(
        "WARNING",
        "group g: orders/0: position 5 is below the log start 8 (the records before it were deleted); "
        "resetting it to the log start, offset 8 (auto_offset_reset=earliest)")]


def test_latest_reads_nothing_old_and_then_a_new_record(url, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="app.client.consumer")
    consumer = Consumer(url, "g", auto_offset_reset="latest", session_timeout_ms=6000)
    consumer.subscribe(["orders"])
    try:
        assert consumer.poll(timeout_s=0.5) == []
        assert consumer.position(ORDERS) == 16
        _send(url, "new")
        assert [(r.offset, r.value) for r in _poll_all(consumer)] == [(16, "new")]
    finally:
        consumer.close()
    assert [level for level, _ in _resets(caplog)] == ["WARNING"]


def test_none_raises_offset_out_of_range_and_reads_nothing(url) -> None:  # type: ignore[no-untyped-def]
    consumer = Consumer(url, "g", auto_offset_reset="none", session_timeout_ms=6000)
    consumer.subscribe(["orders"])
    try:
        with pytest.raises(OffsetOutOfRangeError) as raised:
            consumer.poll(timeout_s=0.5)
        e = raised.value
        assert (e.topic, e.partition, e.position, e.log_start_offset, e.log_end_offset) == ("orders", 0, 5, 8, 16)
        assert consumer.position(ORDERS) == COMMITTED
    finally:
        consumer.close()


def test_latest_under_read_committed_starts_at_the_log_end_not_behind_an_open_transaction(launcher) -> None:  # type: ignore[no-untyped-def]
    """The last stable offset stops at an open transaction; a read_committed position there
    would read again what committed behind it. Its records surface at its COMMIT marker, past
    the log end, so a consumer started at the log end reads it when it commits."""
    server = launcher.server()
    url = server.url
    with server.client() as client:
        ok(client.post("/v1/topics", json={"name": "orders", "partitions": 1}), 201)
        still_open = _transaction(url, "open", "open-then-committed", commit=False)  # offset 0
        _send(url, "behind")  # 1
        _transaction(url, "behind", "committed-behind").close()  # 2, marker 3
        assert partition_offsets(client, "orders") == {0: (0, 4, 0)}  # LSO 0, log end 4
        behind_lso = ok(client.get("/v1/topics/orders/partitions/0/records",
                                   params={"offset": 0, "isolation": "read_committed"}))
        assert [r["value"] for r in behind_lso["records"]] == ["behind", "committed-behind"]

    consumer = Consumer(url, "new-group", auto_offset_reset="latest", session_timeout_ms=6000)
    consumer.subscribe(["orders"])
    try:
        assert consumer.poll(timeout_s=0.5) == []
        assert consumer.position(ORDERS) == 4
        still_open.commit_transaction()  # marker at 4
        assert [(r.offset, r.commit_position, r.value) for r in _poll_all(consumer)] == [
            (0, 4, "open-then-committed")]
    finally:
        consumer.close()
        still_open.close()
