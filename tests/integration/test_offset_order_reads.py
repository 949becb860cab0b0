"""A partition read in offset order, as Kafka's Fetch reads it (LogService.read_in_offset_order):
data records and markers in offset order; read_committed stops at the last stable offset and
names the aborted transactions it meets; read_uncommitted reads up to the high watermark."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.errors import OffsetOutOfRange, UnknownTopicOrPartition
from app.domain.read import AbortedTransaction
from app.domain.types import ControlType, IsolationLevel
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

RC, RU = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED


def _log(client: Any) -> Any:
    """plain 0; a: 1, 2, ABORT 3; c: 4, 5, COMMIT 6; o: 7, 8 (open); plain 9."""
    create_topic(client, "orders")
    assert send(client, [batch("orders", 0, ["plain"])]).status_code == 200
    producers = {}
    for tid, end in (("a", "abort"), ("c", "commit"), ("o", None)):
        p = producers[tid] = init_producer(client, tid)
        begin(client, tid, p)
        assert send(client, [batch("orders", 0, [f"{tid}0", f"{tid}1"], 0)], p, tid).status_code == 200
        if end:
            assert client.post(f"/v1/transactions/{tid}/{end}", json=ident(p)).status_code == 200
    assert send(client, [batch("orders", 0, ["plain2"])]).status_code == 200
    return client.app.state.services.log, producers


def _read(log: Any, isolation: IsolationLevel, offset: int = 0, max_bytes: int = 1 << 20,
          min_one: bool = True) -> Any:
    return log.read_in_offset_order("orders", 0, offset=offset, isolation=isolation, max_bytes=max_bytes,
                                    max_records=100, min_one=min_one)


def test_read_committed_stops_at_the_last_stable_offset_and_names_the_aborted_transaction(client: Any) -> None:
    log, producers = _log(client)
    answer = _read(log, RC)
    assert (answer.high_watermark, answer.last_stable_offset, answer.upper_bound) == (10, 7, 7)
    assert [(e.offset, e.value, e.control_type) for e in answer.entries] == [
        (0, '"plain"', None), (1, '"a0"', None), (2, '"a1"', None), (3, None, ControlType.ABORT),
        (4, '"c0"', None), (5, '"c1"', None), (6, None, ControlType.COMMIT),
    ]
    assert answer.aborted_transactions == [AbortedTransaction(producers["a"]["producer_id"], 1)]


def test_read_uncommitted_reads_to_the_high_watermark_without_an_aborted_list(client: Any) -> None:
    log, _ = _log(client)
    answer = _read(log, RU)
    assert [e.offset for e in answer.entries] == list(range(10))
    assert answer.upper_bound == 10
    assert answer.aborted_transactions == []


def test_an_aborted_transaction_begun_below_the_read_is_named_with_its_first_offset(client: Any) -> None:
    log, producers = _log(client)
    answer = _read(log, RC, offset=2)
    assert answer.entries[0].offset == 2
    assert answer.aborted_transactions == [AbortedTransaction(producers["a"]["producer_id"], 1)]


def test_an_aborted_transaction_ended_before_the_read_is_not_named(client: Any) -> None:
    log, _ = _log(client)
    answer = _read(log, RC, offset=4)
    assert [e.offset for e in answer.entries] == [4, 5, 6]
    assert answer.aborted_transactions == []


def test_the_byte_limit_cuts_after_the_first_record_never_before(client: Any) -> None:
    log, _ = _log(client)
    assert [e.offset for e in _read(log, RU, max_bytes=1).entries] == [0]
    # "plain" is 7 bytes, "a0" 4: two records fit in 11
    assert [e.offset for e in _read(log, RU, max_bytes=11).entries] == [0, 1]


def test_without_min_one_a_first_record_larger_than_the_byte_limit_is_not_read(client: Any) -> None:
    log, _ = _log(client)
    # "plain" is 7 bytes: a later partition of a Fetch with 6 bytes left answers none
    assert _read(log, RU, max_bytes=6, min_one=False).entries == []
    assert [e.offset for e in _read(log, RU, max_bytes=7, min_one=False).entries] == [0]


def test_reading_at_the_upper_bound_returns_nothing(client: Any) -> None:
    log, _ = _log(client)
    answer = _read(log, RC, offset=7)
    assert answer.entries == [] and answer.aborted_transactions == []


def test_an_offset_outside_the_log_is_out_of_range(client: Any) -> None:
    log, _ = _log(client)
    with pytest.raises(OffsetOutOfRange):
        _read(log, RC, offset=11)


def test_an_unknown_partition_is_refused(client: Any) -> None:
    log, _ = _log(client)
    with pytest.raises(UnknownTopicOrPartition):
        log.read_in_offset_order("orders", 5, offset=0, isolation=RC, max_bytes=100, max_records=10)


def _timestamps(client: Any) -> Any:
    """Offsets 0, 1, 2 at 1000, 3000, 2000 ms (a producer's own clocks need not agree)."""
    create_topic(client, "orders")
    records = [{"value": i, "timestamp_ms": ts} for i, ts in enumerate((1000, 3000, 2000))]
    r = client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": records}]})
    assert r.status_code == 200, r.text
    return client.app.state.services.log


def test_list_offsets_by_timestamp_finds_the_first_record_in_offset_order_at_or_after_it(client: Any) -> None:
    log = _timestamps(client)
    found = log.partition_offsets("orders", 0, isolation=RC, timestamp_ms=1500)
    assert (found.log_start_offset, found.high_watermark, found.last_stable_offset, found.found) == (0, 3, 3, (1, 3000))
    assert log.partition_offsets("orders", 0, isolation=RC, timestamp_ms=1000).found == (0, 1000)


def test_list_offsets_by_a_timestamp_later_than_every_record_finds_none(client: Any) -> None:
    log = _timestamps(client)
    assert log.partition_offsets("orders", 0, isolation=RC, timestamp_ms=3001).found is None


def test_list_offsets_by_timestamp_under_read_committed_stops_at_the_last_stable_offset(client: Any) -> None:
    log, _ = _log(client)  # offsets 7, 8 are an open transaction's; 9 is plain, past the LSO
    r = client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [
        {"value": "late", "timestamp_ms": 9_000_000_000_000}]}]})
    assert r.status_code == 200, r.text
    assert log.partition_offsets("orders", 0, isolation=RU, timestamp_ms=9_000_000_000_000).found == (
        10, 9_000_000_000_000)
    assert log.partition_offsets("orders", 0, isolation=RC, timestamp_ms=9_000_000_000_000).found is None


def test_an_aborted_transaction_whose_marker_lies_past_the_last_stable_offset_is_named(client: Any) -> None:
    create_topic(client, "orders")
    a, o = init_producer(client, "a"), init_producer(client, "o")
    begin(client, "a", a)
    assert send(client, [batch("orders", 0, ["a0", "a1"], 0)], a, "a").status_code == 200  # 0, 1
    begin(client, "o", o)
    assert send(client, [batch("orders", 0, ["o0"], 0)], o, "o").status_code == 200  # 2, still open
    assert client.post("/v1/transactions/a/abort", json=ident(a)).status_code == 200  # ABORT at 3
    answer = _read(client.app.state.services.log, RC)
    assert answer.last_stable_offset == 2
    assert [(e.offset, e.control_type) for e in answer.entries] == [(0, None), (1, None)]
    assert answer.aborted_transactions == [AbortedTransaction(a["producer_id"], 0)]
