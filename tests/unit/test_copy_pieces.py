"""app.storage.record_rows' COPY of a JSON topic's records on PostgreSQL: lines of COPY's text
format in pieces of about COPY_PIECE_CHARS, the same rows as the row path writes, in the same
column order, and rows for the driver from the first chunk whose texts cannot go as lines."""

from __future__ import annotations

import tracemalloc

import pytest

from app.domain.log_cleaning import record_sizes
from app.domain.records import RecordColumns, RecordToAppend
from app.storage import record_rows
from app.storage.record_rows import COPY_PIECE_CHARS, DATA_RECORD_COLUMNS, BatchToAppend


def _batch(values: list[str], keys: list[str | None] | None = None, topic_id: int = 7) -> BatchToAppend:
    keys = keys or [None] * len(values)
    records = RecordColumns(keys, values, [None] * len(values), list(range(100, 100 + len(values))))
    sizes = record_sizes(records.keys, records.values, records.headers)
    return BatchToAppend(topic_id, 1, records, size_bytes=sum(sizes))


def test_each_line_holds_its_rows_fields_in_the_record_columns_order() -> None:
    batch = BatchToAppend(3, 2, [RecordToAppend("k", "[1]", '{"h":"v"}', 9)], size_bytes=12)

    (lines,) = record_rows._copy_pieces([(batch, 40)])

    assert dict(zip(DATA_RECORD_COLUMNS, lines.rstrip("\n").split("\t"))) == {
        "topic_id": "3", "partition": "2", "offset": "40", "timestamp_ms": "9", "key": "k", "value": "[1]",
        "headers": '{"h":"v"}'}
    assert lines == "\t".join(map(str, record_rows._rows([(batch, 40)])[0])) + "\n"


def test_a_batch_of_one_timestamp_without_headers_is_copied_with_those_fields_in_every_line() -> None:
    records = RecordColumns(["a", None], ["1", '"x"'], [None, None], [500, 500])
    batch = BatchToAppend(3, 2, records, size_bytes=5)

    (lines,) = record_rows._copy_pieces([(batch, 40)])

    assert lines == "3\t2\t40\t500\ta\t1\t\\N\n3\t2\t41\t500\t\\N\t\"x\"\t\\N\n"


def test_a_batch_of_several_timestamps_is_copied_with_each_records_own() -> None:
    records = RecordColumns(["a", "b"], ["1", "2"], [None, None], [500, 501])
    batch = BatchToAppend(3, 2, records, size_bytes=4)

    (lines,) = record_rows._copy_pieces([(batch, 40)])

    assert lines == "3\t2\t40\t500\ta\t1\t\\N\n3\t2\t41\t501\tb\t2\t\\N\n"


def test_batches_larger_than_a_piece_are_copied_in_pieces_of_whole_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first batch's records are of 1, 6 and 5 bytes: cut after the second.
    monkeypatch.setattr(record_rows, "COPY_PIECE_CHARS", 8)
    first, second = _batch(["1", '"\U0001F600"', '"a\tb"']), _batch(["[2]"], topic_id=8)

    pieces = list(record_rows._copy_pieces([(first, 5), (second, 0)]))

    assert pieces == [
        "7\t1\t5\t100\t\\N\t1\t\\N\n7\t1\t6\t101\t\\N\t\"\U0001F600\"\t\\N\n",
        "7\t1\t7\t102\t\\N\t\"a\\tb\"\t\\N\n",
        "8\t1\t0\t100\t\\N\t[2]\t\\N\n",
    ]


def test_from_the_first_chunk_holding_nul_to_the_end_the_records_go_as_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_rows, "COPY_PIECE_CHARS", 4)
    first, second = _batch(["1", "2", "3"], keys=["a", "b\x00", "c"]), _batch(["4"], topic_id=8)

    pieces = [p if isinstance(p, str) else list(p) for p in record_rows._copy_pieces([(first, 0), (second, 0)])]

    assert pieces == [
        "7\t1\t0\t100\ta\t1\t\\N\n",
        [(7, 1, 1, 101, "b\x00", "2", None), (7, 1, 2, 102, "c", "3", None)],
        [(8, 1, 0, 100, None, "4", None)],
    ]


def test_records_copied_with_markers_carry_a_null_control_type_after_their_fields_as_lines_and_as_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_rows, "COPY_PIECE_CHARS", 4)
    first, second = _batch(["1", "2"], keys=["a", "b\x00"]), _batch(["3"], topic_id=8)

    pieces = [p if isinstance(p, str) else list(p)
              for p in record_rows._copy_pieces([(first, 0), (second, 0)], record_rows._NO_CONTROL_TYPE[1])]

    assert pieces == [
        "7\t1\t0\t100\ta\t1\t\\N\t\\N\n",
        [(7, 1, 1, 101, "b\x00", "2", None, None)],
        [(8, 1, 0, 100, None, "3", None, None)],
    ]


def test_self_committed_records_carry_a_true_self_committed_after_their_fields_as_lines_and_as_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_rows, "COPY_PIECE_CHARS", 4)
    first, second = _batch(["1", "2"], keys=["a", "b\x00"]), _batch(["3"], topic_id=8)

    pieces = [p if isinstance(p, str) else list(p)
              for p in record_rows._copy_pieces([(first, 0), (second, 0)], record_rows._SELF_COMMITTED[1])]

    assert pieces == [
        "7\t1\t0\t100\ta\t1\t\\N\tt\n",
        [(7, 1, 1, 101, "b\x00", "2", None, True)],
        [(8, 1, 0, 100, None, "3", None, True)],
    ]


def test_a_large_batch_with_one_character_outside_the_bmp_is_copied_in_bounded_memory() -> None:
    # 5,000 values of 1.6 KB: built as one string, the one emoji made it 4 bytes a character.
    values = ['{"p":"' + "x" * 1592 + '"}'] * 5000
    values[2500] = '{"p":"\U0001F600' + "x" * 1591 + '"}'
    batch = _batch(values)
    tracemalloc.start()
    try:
        written = sum(len(piece) for piece in record_rows._copy_pieces([(batch, 0)]))  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert written == sum(len(f"7\t1\t{i}\t{100 + i}\t\\N\t{v}\t\\N\n") for i, v in enumerate(values))
    assert peak < 12 * COPY_PIECE_CHARS


@pytest.mark.parametrize("base_offset", [0, 998, 999_997, 10**15 - 2])
def test_offsets_across_a_thousand_are_copied_as_the_rows_hold_them(base_offset: int) -> None:
    # Lines take an offset's last three digits from a table: below 1,000 unpadded, above it
    # padded after the digits before them.
    for timestamps in ([500] * 1_003, list(range(1_003))):
        records = RecordColumns([f"k{i}" for i in range(1_003)], ["1"] * 1_003, [None] * 1_003, timestamps)
        batch = BatchToAppend(3, 2, records, size_bytes=4_012)

        (lines,) = record_rows._copy_pieces([(batch, base_offset)])

        assert lines == "".join("\t".join("\\N" if f is None else str(f) for f in row) + "\n"
                                for row in record_rows._rows([(batch, base_offset)]))
