"""A partition read in offset order, as Kafka's Fetch reads it (LogService.read_in_offset_order):
its stored batches (one per append, one per marker) with their records in offset order;
read_committed stops at the last stable offset and names the aborted transactions it meets;
read_uncommitted reads up to the high watermark."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.errors import OffsetOutOfRange, UnknownTopicOrPartition
from app.domain.read import AbortedTransaction
from app.domain.types import ControlType, IsolationLevel, RecordState
from app.services.log_cleaner import LogCleaner
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

RC, RU = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED
COMMITTED, ABORTED = RecordState.COMMITTED, RecordState.ABORTED


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


def _rows(answer: Any) -> list[tuple[int, Any, ControlType | None]]:
    """The read's records in offset order: (offset, value, the control type of its batch)."""
    return [(r.offset, r.value, b.control_type) for b in answer.batches for r in b.records]


def test_read_committed_stops_at_the_last_stable_offset_and_names_the_aborted_transaction(client: Any) -> None:
    log, producers = _log(client)
    answer = _read(log, RC)
    assert (answer.high_watermark, answer.last_stable_offset, answer.upper_bound) == (10, 7, 7)
    assert _rows(answer) == [
        (0, '"plain"', None), (1, '"a0"', None), (2, '"a1"', None), (3, None, ControlType.ABORT),
        (4, '"c0"', None), (5, '"c1"', None), (6, None, ControlType.COMMIT),
    ]
    assert answer.aborted_transactions == [AbortedTransaction(producers["a"]["producer_id"], 1)]


def test_read_uncommitted_reads_to_the_high_watermark_without_an_aborted_list(client: Any) -> None:
    log, _ = _log(client)
    answer = _read(log, RU)
    assert [o for o, _, _ in _rows(answer)] == list(range(10))
    assert answer.upper_bound == 10
    assert answer.aborted_transactions == []


def test_an_aborted_transaction_begun_below_the_read_is_named_with_its_first_offset(client: Any) -> None:
    log, producers = _log(client)
    answer = _read(log, RC, offset=2)
    assert _rows(answer)[0][0] == 2
    assert answer.aborted_transactions == [AbortedTransaction(producers["a"]["producer_id"], 1)]


def test_an_aborted_transaction_ended_before_the_read_is_not_named(client: Any) -> None:
    log, _ = _log(client)
    answer = _read(log, RC, offset=4)
    assert [o for o, _, _ in _rows(answer)] == [4, 5, 6]
    assert answer.aborted_transactions == []


def test_the_byte_limit_cuts_after_the_first_record_never_before(client: Any) -> None:
    log, _ = _log(client)
    assert [o for o, _, _ in _rows(_read(log, RU, max_bytes=1))] == [0]
    # "plain" is 7 bytes, "a0" 4: two records fit in 11
    assert [o for o, _, _ in _rows(_read(log, RU, max_bytes=11))] == [0, 1]


def test_without_min_one_a_first_record_larger_than_the_byte_limit_is_not_read(client: Any) -> None:
    log, _ = _log(client)
    # "plain" is 7 bytes: a later partition of a Fetch with 6 bytes left answers none
    assert _read(log, RU, max_bytes=6, min_one=False).batches == []
    assert [o for o, _, _ in _rows(_read(log, RU, max_bytes=7, min_one=False))] == [0]


def test_reading_at_the_upper_bound_returns_nothing(client: Any) -> None:
    log, _ = _log(client)
    answer = _read(log, RC, offset=7)
    assert answer.batches == [] and answer.aborted_transactions == []


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


def test_list_offsets_by_timestamp_never_answers_a_markers_offset(client: Any, clock: Any) -> None:
    create_topic(client, "orders")
    p = init_producer(client, "x")
    begin(client, "x", p)
    early = {"topic": "orders", "partition": 0, "base_sequence": 0, "records": [{"value": "x", "timestamp_ms": 1000}]}
    assert send(client, [early], p, "x").status_code == 200  # offset 0
    assert client.post("/v1/transactions/x/commit", json=ident(p)).status_code == 200  # marker 1, at the clock
    late = clock() + 1
    assert send(client, [{"topic": "orders", "partition": 0,
                          "records": [{"value": "late", "timestamp_ms": late}]}]).status_code == 200  # offset 2
    log = client.app.state.services.log
    for isolation in (RC, RU):
        assert log.partition_offsets("orders", 0, isolation=isolation, timestamp_ms=2000).found == (2, late)


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
    assert [(o, c) for o, _, c in _rows(answer)] == [(0, None), (1, None)]
    assert answer.aborted_transactions == [AbortedTransaction(a["producer_id"], 0)]


# --- the stored batches -------------------------------------------------------------------


def _batches(answer: Any) -> list[tuple[Any, ...]]:
    """Each batch read: (base offset, producer id, base sequence, transactional, control type,
    state, the offsets of its records)."""
    return [(b.base_offset, b.producer_id, b.base_sequence, b.txn_id is not None, b.control_type, b.state,
             [r.offset for r in b.records]) for b in answer.batches]


def test_each_send_is_read_as_its_own_batch_with_its_base_sequence(client: Any) -> None:
    create_topic(client, "orders")
    p = init_producer(client)
    assert send(client, [batch("orders", 0, ["x0", "x1"], 0)], p).status_code == 200
    assert send(client, [batch("orders", 0, ["x2", "x3", "x4"], 2)], p).status_code == 200
    answer = _read(client.app.state.services.log, RC)
    pid = p["producer_id"]
    assert _batches(answer) == [(0, pid, 0, False, None, COMMITTED, [0, 1]),
                                (2, pid, 2, False, None, COMMITTED, [2, 3, 4])]
    assert {b.producer_epoch for b in answer.batches} == {p["producer_epoch"]}


def test_each_marker_is_a_control_batch_of_its_transactions_producer(client: Any) -> None:
    log, producers = _log(client)
    a, c = producers["a"]["producer_id"], producers["c"]["producer_id"]
    assert _batches(_read(log, RC)) == [
        (0, None, None, False, None, COMMITTED, [0]),
        (1, a, 0, True, None, ABORTED, [1, 2]), (3, a, None, True, ControlType.ABORT, None, [3]),
        (4, c, 0, True, None, COMMITTED, [4, 5]), (6, c, None, True, ControlType.COMMIT, None, [6]),
    ]


def test_an_aborted_transaction_read_from_its_second_send_is_named_from_its_first(client: Any) -> None:
    create_topic(client, "orders")
    a = init_producer(client, "a")
    begin(client, "a", a)
    assert send(client, [batch("orders", 0, ["a0", "a1"], 0)], a, "a").status_code == 200  # 0, 1
    assert send(client, [batch("orders", 0, ["a2"], 2)], a, "a").status_code == 200  # 2
    assert client.post("/v1/transactions/a/abort", json=ident(a)).status_code == 200  # ABORT at 3
    answer = _read(client.app.state.services.log, RC, offset=2)
    pid = a["producer_id"]
    assert _batches(answer) == [(2, pid, 2, True, None, ABORTED, [2]),
                                (3, pid, None, True, ControlType.ABORT, None, [3])]
    assert answer.aborted_transactions == [AbortedTransaction(pid, 0)]


def test_a_read_from_inside_a_batch_keeps_the_batchs_head_and_only_the_records_from_there(client: Any) -> None:
    create_topic(client, "orders")
    p = init_producer(client)
    assert send(client, [batch("orders", 0, ["x0", "x1", "x2"], 0)], p).status_code == 200
    answer = _read(client.app.state.services.log, RU, offset=1)
    assert _batches(answer) == [(0, p["producer_id"], 0, False, None, COMMITTED, [1, 2])]


def test_a_batch_cut_by_the_log_start_is_read_without_its_records_below_it(client: Any) -> None:
    create_topic(client, "orders")
    assert send(client, [batch("orders", 0, ["x0", "x1", "x2"])]).status_code == 200
    services = client.app.state.services
    assert services.topics.delete_records("orders", 0, 2) == 2  # the records stay until the cleaner's pass
    answer = _read(services.log, RC, offset=2)
    assert _batches(answer) == [(0, None, None, False, None, COMMITTED, [2])]
    with pytest.raises(OffsetOutOfRange):
        _read(services.log, RC, offset=1)


def test_a_batch_with_compaction_holes_is_one_batch_of_the_records_left(client: Any, clock: Any) -> None:
    create_topic(client, "t", cleanup_policy="compact")
    x = init_producer(client, "x")
    begin(client, "x", x)
    sent = batch("t", 0, [1, 2, 3, 4], 0)
    for r, k in zip(sent["records"], "abcd", strict=True):
        r["key"] = k
    assert send(client, [sent], x, "x").status_code == 200  # 0..3
    assert client.post("/v1/transactions/x/commit", json=ident(x)).status_code == 200  # COMMIT at 4
    r = client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [
        {"key": "a", "value": 5}, {"key": "b", "value": 6}]}]})  # 5, 6
    assert r.status_code == 200, r.text
    services = client.app.state.services
    assert LogCleaner(services.db, services.settings, clock).run_once().compaction == 2  # a@0, b@1

    answer = services.log.read_in_offset_order("t", 0, offset=0, isolation=RC, max_bytes=1 << 20, max_records=100)
    pid = x["producer_id"]
    assert _batches(answer) == [(0, pid, 0, True, None, COMMITTED, [2, 3]),
                                (4, pid, None, True, ControlType.COMMIT, None, [4]),
                                (5, None, None, False, None, COMMITTED, [5, 6])]
