"""app.domain.records: the one definition of a valid record, which the HTTP Send and the
in-database Python API both apply (tests/appender_cases.py holds every appender to it)."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from datetime import datetime, timedelta, timezone

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.errors import InvalidRequest, RecordListTooLarge
from app.domain import records as records_module
from app.domain.log_cleaning import record_sizes
from app.storage.sql import load
from app.domain.records import (
    JOIN_CHUNK_BYTES,
    MAX_DEPTH,
    MAX_MESSAGE_ID_LENGTH,
    MAX_TIMESTAMP_MS,
    RecordColumns,
    RecordToAppend,
    batch_of,
    check_depth,
    check_record_count,
    check_timestamp,
    chunk_bounds,
    first_largest,
)


class _Record:
    def __init__(self, value: bytes | None, key: str | None = None, headers: dict[str, str] | None = None,
                 timestamp_ms: int | None = None) -> None:
        self.value, self.key, self.headers, self.timestamp_ms = value, key, headers, timestamp_ms


def test_a_send_may_hold_exactly_the_record_limit() -> None:
    check_record_count(3, 3)


def test_a_send_over_the_record_limit_is_refused_naming_the_setting() -> None:
    with pytest.raises(RecordListTooLarge, match=r"^4 records in one request; the limit is 3 \(OUTBOX_MAX_RECORDS_PER_REQUEST\)$"):
        check_record_count(4, 3)


def test_a_batch_counts_each_records_bytes_as_stored_and_names_the_largest() -> None:
    batch = batch_of("t", 1, [_Record(b"1", key="é"), _Record(None, headers={"h": "v"}, timestamp_ms=7)], now_ms=5)

    assert batch.records == [RecordToAppend("é", "1", None, 5), RecordToAppend(None, "null", '{"h":"v"}', 7)]
    assert (batch.size_bytes, batch.largest_record) == (3 + 4 + 9, (1, 13))


def test_records_sent_without_timestamps_all_take_the_sends_clock() -> None:
    batch = batch_of("t", 1, [_Record(b"1"), _Record(b"2")], now_ms=5)

    assert batch.records == [RecordToAppend(None, "1", None, 5), RecordToAppend(None, "2", None, 5)]


# Text as JSON carries it (no lone surrogates), ASCII or not.
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_records = st.lists(st.builds(
    _Record,
    st.none() | _text.map(orjson.dumps),
    key=st.none() | _text,
    headers=st.none() | st.dictionaries(_text, _text, max_size=3),
), max_size=12)


@given(_records)
def test_a_batchs_bytes_and_largest_record_are_record_sizes_of_the_records_as_stored(records) -> None:  # type: ignore[no-untyped-def]
    batch = batch_of("t", 0, records, now_ms=5)

    stored = batch.records
    sizes = record_sizes([r.key for r in stored], [r.value for r in stored], [r.headers for r in stored])
    assert (batch.size_bytes, batch.largest_record) == (sum(sizes), first_largest(sizes))


def test_a_value_nesting_max_depth_levels_is_accepted_and_one_more_refused() -> None:
    check_depth(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, 0, "t", 0)
    with pytest.raises(InvalidRequest, match=f"record 2 of t/0: the value nests deeper than {MAX_DEPTH} levels"):
        check_depth(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), 2, "t", 0)


def test_the_in_database_api_loads_no_web_framework() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, app.in_database; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette') or m.startswith('app.api')))"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert loaded == "[]\n"


def test_a_batchs_records_held_by_column_read_as_records_equal_to_their_list() -> None:
    columns = RecordColumns(["k", None], ['{"a":1}', "null"], [None, '{"h":"v"}'], [5, 6])

    assert (len(columns), columns[1], columns[-1:]) == (2, RecordToAppend(None, "null", '{"h":"v"}', 6),
                                                        [RecordToAppend(None, "null", '{"h":"v"}', 6)])
    assert columns == [RecordToAppend("k", '{"a":1}', None, 5), RecordToAppend(None, "null", '{"h":"v"}', 6)]
    assert columns != [RecordToAppend("k", '{"a":1}', None, 5)]


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="^a batch's columns must be of one length$"):
        RecordColumns(["k"], ["1", "2"], [None], [5])


def test_chunk_bounds_cut_items_in_order_into_runs_within_the_limit_a_longer_item_alone() -> None:
    assert chunk_bounds([3, 3, 3, 10, 1, 1], 6) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert chunk_bounds([3, 3], 6) == [(0, 2)]
    assert chunk_bounds([], 6) == []


def test_chunk_bounds_take_lengths_from_an_iterator_once() -> None:
    assert chunk_bounds(iter([3, 3, 3, 10, 1, 1]), 6) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert chunk_bounds(iter([3, 3]), 6) == [(0, 2)]


def test_values_decoded_a_chunk_at_a_time_are_the_texts_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records_module, "JOIN_CHUNK_BYTES", 8)
    values = [b'"ab"', None, '"\U0001F600"'.encode(), b"[1,2,3,4,5,6,7,8]", '"\xe9"'.encode(), b"1"]

    batch = batch_of("t", 0, [_Record(v, timestamp_ms=1) for v in values], 5)

    assert [r.value for r in batch.records] == ['"ab"', "null", '"\U0001F600"', "[1,2,3,4,5,6,7,8]", '"\xe9"', "1"]


def test_a_large_batch_with_one_character_outside_the_bmp_is_decoded_in_bounded_memory() -> None:
    # 5,000 values of 1.6 KB: decoded whole, the one emoji made a 32 MB string for a moment.
    values = [b'{"p":"' + b"x" * 1592 + b'"}'] * 5000
    values[2500] = '{"p":"\U0001F600'.encode() + b"x" * 1588 + b'"}'
    batch_records = [_Record(v, timestamp_ms=1) for v in values]
    tracemalloc.start()
    try:
        batch = batch_of("t", 0, batch_records, 5)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert batch.records[2500].value == values[2500].decode()
    assert peak - kept < 4 * JOIN_CHUNK_BYTES


def test_outbox_append_bounds_a_message_id_by_the_domains_maximum_length() -> None:
    # The PL/pgSQL twin cannot import the constant; tests/appender_cases.py runs it at the bound,
    # and this holds its text to the constant without a database.
    assert f"char_length(message_id) BETWEEN 1 AND {MAX_MESSAGE_ID_LENGTH}" in load("appender.postgresql.sql")


def test_a_records_last_timestamp_is_9999_12_31_23_59_59_999_utc_the_last_instant_of_spark_and_python() -> None:
    last = datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=timezone.utc)
    assert MAX_TIMESTAMP_MS == (last - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)
    assert MAX_TIMESTAMP_MS == 253_402_300_799_999
    # A millisecond later is past Python's datetime (and so past what a Spark collect() gives back).
    with pytest.raises(OverflowError):
        last + timedelta(milliseconds=1)


@pytest.mark.parametrize("timestamp_ms", [0, 1, 1_700_000_000_000, 253_402_300_799_999])
def test_a_timestamp_from_0_to_the_last_instant_is_valid(timestamp_ms: int) -> None:
    check_timestamp(timestamp_ms, "records.0")


@pytest.mark.parametrize("timestamp_ms", [-1, 253_402_300_800_000, 9_223_372_036_854_776, 2**63 - 1, 2**63, True, 1.0])
def test_a_timestamp_below_0_or_past_the_last_instant_is_refused_naming_the_bound(timestamp_ms: object) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_timestamp(timestamp_ms, "records.0")
    assert refused.value.message == (
        "records.0: timestamp_ms must be an integer from 0 to 253402300799999 (9999-12-31T23:59:59.999Z), "
        f"not {timestamp_ms!r}")


def test_outbox_append_bounds_a_timestamp_by_the_domains_last_instant() -> None:
    # The PL/pgSQL twin holds the number itself; tests/appender_cases.py runs it at the bound.
    assert f"NOT timestamp_ms BETWEEN 0 AND {MAX_TIMESTAMP_MS} THEN" in load("appender.postgresql.sql")
