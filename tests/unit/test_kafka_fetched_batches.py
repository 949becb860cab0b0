"""The record batches the Kafka door's Fetch answers (app.kafka.records.batches_bytes): one
RecordBatch per stored batch, its header (base offset, producer, epoch, base sequence,
transactional and control attributes) the stored batch's, its records at their own offsets
whichever of them the read returns. Read back with aiokafka's reader, as a client reads them."""

from __future__ import annotations

from typing import Any

from aiokafka.record.memory_records import MemoryRecords

from app.domain.read import LogBatch, LogRecord
from app.domain.types import ControlType, RecordState
from app.kafka.records import batches_bytes, first_record_bytes

COMMITTED, ABORTED = RecordState.COMMITTED, RecordState.ABORTED


def _record(offset: int, value: str | None = '"v"') -> LogRecord:
    return LogRecord(offset, 1_700_000_000_000 + offset, None, value, None, 0 if value is None else len(value))


def _marker(offset: int, control: ControlType, producer_id: int) -> LogBatch:
    return LogBatch(offset, producer_id, 3, None, 7, control, None, [_record(offset, None)])


def _read_back(data: bytes) -> list[tuple[Any, ...]]:
    """Each RecordBatch: (base offset, producer id, epoch, base sequence, transactional, control,
    the offsets of its records)."""
    out = []
    batches = MemoryRecords(data)
    while (b := batches.next_batch()) is not None:
        out.append((b.base_offset, b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional,
                    b.is_control_batch, [r.offset for r in b]))
    return out


def test_two_stored_batches_of_one_producer_are_two_record_batches_with_their_base_sequences() -> None:
    batches = [LogBatch(0, 9, 1, 0, None, None, COMMITTED, [_record(0), _record(1)]),
               LogBatch(2, 9, 1, 2, None, None, COMMITTED, [_record(2), _record(3), _record(4)])]
    assert _read_back(batches_bytes(batches)) == [(0, 9, 1, 0, False, False, [0, 1]),
                                                  (2, 9, 1, 2, False, False, [2, 3, 4])]


def test_a_plain_batch_has_no_producer_and_no_sequence() -> None:
    batches = [LogBatch(5, None, None, None, None, None, COMMITTED, [_record(5)])]
    assert _read_back(batches_bytes(batches)) == [(5, -1, -1, -1, False, False, [5])]


def test_a_marker_is_a_transactional_control_batch_after_its_transactions_batch() -> None:
    batches = [LogBatch(0, 9, 3, 0, 7, None, ABORTED, [_record(0), _record(1)]), _marker(2, ControlType.ABORT, 9)]
    assert _read_back(batches_bytes(batches)) == [(0, 9, 3, 0, True, False, [0, 1]),
                                                  (2, 9, 3, -1, True, True, [2])]


def test_a_batch_with_holes_keeps_its_base_offset_and_its_records_offsets() -> None:
    batches = [LogBatch(10, 9, 1, 40, 7, None, COMMITTED, [_record(12), _record(15)])]
    (read,) = _read_back(batches_bytes(batches))
    assert read == (10, 9, 1, 40, True, False, [12, 15])


def test_the_first_records_bytes_are_its_batch_with_that_record_alone() -> None:
    batches = [LogBatch(0, 9, 1, 0, None, None, COMMITTED, [_record(0), _record(1)])]
    alone = [LogBatch(0, 9, 1, 0, None, None, COMMITTED, [_record(0)])]
    assert first_record_bytes(batches) == len(batches_bytes(alone)) < len(batches_bytes(batches))
