"""Idempotent-producer sequence rules (app.domain.producer.check_sequence), without I/O."""

from __future__ import annotations

import pytest

from app.domain.errors import (
    DuplicateSequenceNumber,
    InvalidProducerEpoch,
    OutOfOrderSequenceNumber,
    UnknownProducerId,
)
from app.domain.producer import MAX_SEQUENCE, BatchVerdict, ProducerPartitionState, check_sequence


def after(epoch: int = 3, base: int = 10, count: int = 5, base_offset: int = 100) -> ProducerPartitionState:
    """The state once a batch of `count` records at `base` was written with `epoch`."""
    return ProducerPartitionState(
        producer_epoch=epoch,
        last_sequence=base + count - 1,
        last_batch_base_sequence=base,
        last_batch_record_count=count,
        last_batch_base_offset=base_offset,
    )


# --- a producer's first batch on a partition ---------------------------------------------------


def test_first_batch_at_sequence_zero_is_appended() -> None:
    assert check_sequence(None, 0, 0, 3) is BatchVerdict.APPEND


def test_first_batch_not_at_zero_is_unknown_producer_id() -> None:
    with pytest.raises(UnknownProducerId) as raised:
        check_sequence(None, 0, 1, 3)
    assert raised.value.error_code == "UNKNOWN_PRODUCER_ID"
    assert raised.value.retriable is False


def test_first_batch_of_a_later_epoch_still_starts_at_zero() -> None:
    assert check_sequence(None, 7, 0, 1) is BatchVerdict.APPEND


# --- the next batch ------------------------------------------------------------------------------


def test_next_batch_after_the_last_sequence_is_appended() -> None:
    assert check_sequence(after(base=10, count=5), 3, 15, 2) is BatchVerdict.APPEND


def test_next_single_record_batch_is_appended() -> None:
    assert check_sequence(after(base=0, count=1), 3, 1, 1) is BatchVerdict.APPEND


# --- retries -------------------------------------------------------------------------------------


def test_exact_retry_of_the_last_batch_is_a_duplicate() -> None:
    assert check_sequence(after(base=10, count=5), 3, 10, 5) is BatchVerdict.DUPLICATE


def test_retry_of_the_last_batch_with_fewer_records_is_a_duplicate_sequence_error() -> None:
    with pytest.raises(DuplicateSequenceNumber) as raised:
        check_sequence(after(base=10, count=5), 3, 10, 4)
    assert raised.value.error_code == "DUPLICATE_SEQUENCE_NUMBER"
    assert raised.value.retriable is False


def test_retry_of_the_last_batch_with_more_records_is_a_duplicate_sequence_error() -> None:
    with pytest.raises(DuplicateSequenceNumber):
        check_sequence(after(base=10, count=5), 3, 10, 6)


def test_batch_overlapping_the_last_batch_is_a_duplicate_sequence_error() -> None:
    with pytest.raises(DuplicateSequenceNumber):
        check_sequence(after(base=10, count=5), 3, 12, 5)


def test_batch_starting_at_the_last_sequence_is_a_duplicate_sequence_error() -> None:
    with pytest.raises(DuplicateSequenceNumber):
        check_sequence(after(base=10, count=5), 3, 14, 1)


def test_retry_of_an_earlier_batch_is_a_duplicate_sequence_error() -> None:
    with pytest.raises(DuplicateSequenceNumber):
        check_sequence(after(base=10, count=5), 3, 0, 10)


# --- gaps ----------------------------------------------------------------------------------------


def test_gap_after_the_last_sequence_is_out_of_order() -> None:
    with pytest.raises(OutOfOrderSequenceNumber) as raised:
        check_sequence(after(base=10, count=5), 3, 16, 1)
    assert raised.value.error_code == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert raised.value.retriable is False


def test_large_gap_is_out_of_order() -> None:
    with pytest.raises(OutOfOrderSequenceNumber):
        check_sequence(after(base=10, count=5), 3, 1_000, 1)


# --- epochs --------------------------------------------------------------------------------------


def test_new_epoch_restarts_at_sequence_zero() -> None:
    assert check_sequence(after(epoch=3, base=10, count=5), 4, 0, 2) is BatchVerdict.APPEND


def test_new_epoch_continuing_the_old_sequence_is_out_of_order() -> None:
    with pytest.raises(OutOfOrderSequenceNumber):
        check_sequence(after(epoch=3, base=10, count=5), 4, 15, 1)


def test_new_epoch_repeating_the_last_batch_is_not_a_duplicate() -> None:
    with pytest.raises(OutOfOrderSequenceNumber):
        check_sequence(after(epoch=3, base=10, count=5), 4, 10, 5)


def test_older_epoch_is_invalid_producer_epoch() -> None:
    with pytest.raises(InvalidProducerEpoch) as raised:
        check_sequence(after(epoch=3), 2, 15, 1)
    assert raised.value.error_code == "INVALID_PRODUCER_EPOCH"
    assert raised.value.retriable is False


def test_older_epoch_retrying_its_last_batch_is_invalid_producer_epoch() -> None:
    with pytest.raises(InvalidProducerEpoch):
        check_sequence(after(epoch=3, base=10, count=5), 2, 10, 5)


# --- the 2^31-1 ceiling --------------------------------------------------------------------------


def test_max_sequence_is_two_to_the_31_minus_one() -> None:
    assert MAX_SEQUENCE == 2**31 - 1


def test_batch_ending_exactly_at_the_max_sequence_is_appended() -> None:
    state = after(base=MAX_SEQUENCE - 9, count=5)  # last sequence MAX-5
    assert check_sequence(state, 3, MAX_SEQUENCE - 4, 5) is BatchVerdict.APPEND


def test_batch_passing_the_max_sequence_is_out_of_order() -> None:
    state = after(base=MAX_SEQUENCE - 9, count=5)
    with pytest.raises(OutOfOrderSequenceNumber):
        check_sequence(state, 3, MAX_SEQUENCE - 4, 6)


def test_first_batch_passing_the_max_sequence_is_out_of_order() -> None:
    with pytest.raises(OutOfOrderSequenceNumber):
        check_sequence(None, 0, MAX_SEQUENCE, 2)


def test_first_batch_of_the_max_size_is_appended() -> None:
    assert check_sequence(None, 0, 0, MAX_SEQUENCE + 1) is BatchVerdict.APPEND


def test_retry_of_a_batch_ending_at_the_max_sequence_is_a_duplicate() -> None:
    state = after(base=MAX_SEQUENCE - 4, count=5)
    assert check_sequence(state, 3, MAX_SEQUENCE - 4, 5) is BatchVerdict.DUPLICATE
