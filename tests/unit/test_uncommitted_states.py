"""read_uncommitted takes each record's producer, sequence and state from its batch row
(app.storage.read._with_states): a record no batch row covers is an error naming it, never
the state of a neighbouring batch."""

from __future__ import annotations

import pytest

from app.domain.types import RecordState
from app.storage.read import _with_states

NO_BATCH = ("the record at offset {} has no batch row in record_batches: a process older than migration 0019 "
            "appended it (README, 'Upgrading': stop them first)")


def row(offset: int) -> tuple[object, ...]:
    """A page row: offset, timestamp, key, value, headers, key bytes, value bytes."""
    return (offset, 0, None, '"v"', None, None, None)


def batch(base: int, count: int, *, producer_id: int = 7, txn_id: int | None = None) -> tuple[object, ...]:
    """A batch row: base_offset, producer, epoch, base_sequence, txn_id, state, commit_position, count."""
    return (base, producer_id, 0, 0, txn_id, "committed", None, count)


def test_a_record_past_the_last_batch_row_is_an_error_naming_it() -> None:
    with pytest.raises(RuntimeError) as raised:
        _with_states([row(0), row(1), row(2)], [batch(0, 2)])

    assert str(raised.value) == NO_BATCH.format(2)


def test_a_record_with_no_batch_row_at_all_is_an_error_naming_it() -> None:
    with pytest.raises(RuntimeError) as raised:
        _with_states([row(5)], [])

    assert str(raised.value) == NO_BATCH.format(5)


def test_a_record_in_a_gap_between_batch_rows_is_an_error_naming_it() -> None:
    with pytest.raises(RuntimeError) as raised:
        _with_states([row(0), row(1), row(2)], [batch(0, 1), batch(2, 1, producer_id=8)])

    assert str(raised.value) == NO_BATCH.format(1)


def test_records_each_take_their_own_batch_rows_producer_and_sequence() -> None:
    out = _with_states([row(0), row(1), row(2)], [batch(0, 2), batch(2, 1, producer_id=8)])

    assert [(r.offset, r.producer_id, r.sequence, r.state) for r in out] == [
        (0, 7, 0, RecordState.COMMITTED), (1, 7, 1, RecordState.COMMITTED), (2, 8, 0, RecordState.COMMITTED)]
