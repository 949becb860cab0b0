"""Idempotent-producer sequence rules (app.domain.producer.check_sequence), without I/O."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.errors import (
    DuplicateSequenceNumber,
    InvalidProducerEpoch,
    OutOfOrderSequenceNumber,
    UnknownProducerId,
)
from app.domain.producer import (
    MAX_SEQUENCE,
    BatchVerdict,
    NextBatchCondition,
    RETAINED_BATCHES,
    ProducerPartitionState,
    WrittenBatch,
    check_sequence,
    next_batch_condition,
    starts_epoch,
)


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
    assert check_sequence(after(base=10, count=5), 3, 10, 5) == WrittenBatch(10, 5, 100)


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


def test_an_overlap_of_earlier_sequences_with_no_earlier_batch_found_is_a_duplicate_sequence_error() -> None:
    with pytest.raises(DuplicateSequenceNumber):
        check_sequence(after(base=10, count=5), 3, 0, 10)


# The producer's batches before its last one (10..14 at offset 100), the latest first, as storage
# answers them: 8..9 at 90, 5..7 at 80, 4 at 70, 2..3 at 60, 0..1 at 50.
_EARLIER = [WrittenBatch(8, 2, 90), WrittenBatch(5, 3, 80), WrittenBatch(4, 1, 70), WrittenBatch(2, 2, 60),
            WrittenBatch(0, 2, 50)]


class _Earlier:
    """storage.sequence_state.earlier_batches as check_sequence sees it: `batches`, the latest
    first, with each question asked kept."""

    def __init__(self, batches: list[WrittenBatch]) -> None:
        self.batches = batches
        self.asked: list[tuple[int, int, int]] = []

    def __call__(self, producer_epoch: int, before_offset: int, count: int) -> list[WrittenBatch]:
        self.asked.append((producer_epoch, before_offset, count))
        return self.batches[:count]


@pytest.mark.parametrize("retried", _EARLIER[:RETAINED_BATCHES - 1])
def test_a_retry_of_one_of_the_four_batches_before_the_last_is_answered_with_that_batch(
        retried: WrittenBatch) -> None:
    earlier = _Earlier(_EARLIER)
    assert check_sequence(after(base=10, count=5), 3, retried.base_sequence, retried.record_count,
                          earlier_batches=earlier) == retried
    # Asked once, for the batches of the state's epoch below the last batch's offset.
    assert earlier.asked == [(3, 100, RETAINED_BATCHES - 1)]


def test_a_retry_of_the_sixth_batch_back_is_a_duplicate_sequence_error_even_if_storage_answers_it() -> None:
    # Storage answering more than it was asked for does not widen the window.
    with pytest.raises(DuplicateSequenceNumber):
        check_sequence(after(base=10, count=5), 3, 0, 2, earlier_batches=lambda epoch, before, count: _EARLIER)


def test_a_retry_of_an_earlier_batch_with_another_record_count_is_a_duplicate_sequence_error() -> None:
    for count in (2, 4):  # it was 3
        with pytest.raises(DuplicateSequenceNumber):
            check_sequence(after(base=10, count=5), 3, 5, count, earlier_batches=_Earlier(_EARLIER))


def test_earlier_batches_are_not_looked_for_by_a_next_batch_a_gap_or_a_retry_of_the_last_batch() -> None:
    earlier = _Earlier(_EARLIER)
    assert check_sequence(after(base=10, count=5), 3, 15, 1, earlier_batches=earlier) is BatchVerdict.APPEND
    assert check_sequence(after(base=10, count=5), 3, 10, 5, earlier_batches=earlier) == WrittenBatch(10, 5, 100)
    for base, count in ((12, 1), (10, 4)):  # overlapping the last batch only
        with pytest.raises(DuplicateSequenceNumber):
            check_sequence(after(base=10, count=5), 3, base, count, earlier_batches=earlier)
    with pytest.raises(OutOfOrderSequenceNumber):
        check_sequence(after(base=10, count=5), 3, 16, 1, earlier_batches=earlier)
    with pytest.raises(InvalidProducerEpoch):
        check_sequence(after(base=10, count=5), 2, 5, 3, earlier_batches=earlier)
    assert earlier.asked == []


def test_an_earlier_batch_that_does_not_lead_to_the_last_one_by_its_sequences_is_no_retained_batch() -> None:
    # 5..7 at 80 is followed by 9..9, not 8..9: the rows from 80 down are of another run of the
    # producer id (before a take-back, or an earlier holder's), whose sequences only look alike.
    broken = [WrittenBatch(9, 1, 90), WrittenBatch(5, 3, 80), WrittenBatch(4, 1, 70)]
    state = ProducerPartitionState(3, 14, 10, 5, 100)
    assert check_sequence(state, 3, 9, 1, earlier_batches=_Earlier(broken)) == WrittenBatch(9, 1, 90)
    for base, count in ((5, 3), (4, 1)):
        with pytest.raises(DuplicateSequenceNumber):
            check_sequence(state, 3, base, count, earlier_batches=_Earlier(broken))


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
    assert check_sequence(state, 3, MAX_SEQUENCE - 4, 5) == WrittenBatch(MAX_SEQUENCE - 4, 5, 100)


# --- the next batch as a condition storage tests while writing --------------------------------


def test_the_next_batch_condition_asks_for_the_same_epoch_ending_just_before_the_batch() -> None:
    assert next_batch_condition(3, 15, 2) == NextBatchCondition(producer_epoch=3, last_sequence=14)


def test_a_batch_at_sequence_zero_has_no_next_batch_condition() -> None:
    assert next_batch_condition(3, 0, 5) is None


def test_a_batch_passing_the_max_sequence_has_no_next_batch_condition() -> None:
    assert next_batch_condition(3, MAX_SEQUENCE - 4, 6) is None
    assert next_batch_condition(3, MAX_SEQUENCE - 4, 5) == NextBatchCondition(3, MAX_SEQUENCE - 5)


_epochs = st.integers(0, 5)
_sequences = st.integers(0, MAX_SEQUENCE)
_counts = st.integers(1, 1_000)


@st.composite
def _states(draw: st.DrawFn) -> ProducerPartitionState:
    # often close to the 2^31-1 ceiling, where a next batch can overflow
    last = draw(st.one_of(_sequences, st.integers(MAX_SEQUENCE - 2_000, MAX_SEQUENCE)))
    count = draw(st.integers(1, last + 1))
    base = last - count + 1
    return after(epoch=draw(_epochs), base=base, count=count, base_offset=draw(st.integers(0, 10**12)))


def _verdict(state: ProducerPartitionState, epoch: int, base: int, count: int) -> BatchVerdict | str:
    try:
        return check_sequence(state, epoch, base, count)
    except Exception as e:  # noqa: BLE001 - the refusal is the verdict
        return type(e).__name__


def _meets(state: ProducerPartitionState, condition: NextBatchCondition | None) -> bool:
    return (
        condition is not None
        and state.producer_epoch == condition.producer_epoch
        and state.last_sequence == condition.last_sequence
    )


@given(_states(), st.data())
def test_a_state_meeting_the_next_batch_condition_is_one_check_sequence_appends_after(
    state: ProducerPartitionState, data: st.DataObject
) -> None:
    """Storage appends on the condition alone, so it must never accept what check_sequence refuses."""
    epoch = data.draw(st.one_of(st.just(state.producer_epoch), _epochs))
    near = st.integers(max(0, state.last_sequence - 3), min(MAX_SEQUENCE, state.last_sequence + 3))
    following = min(MAX_SEQUENCE, state.last_sequence + 1)
    base = data.draw(st.one_of(st.just(following), near, st.just(state.last_batch_base_sequence), _sequences))
    room = MAX_SEQUENCE - base + 1  # records that still fit below the ceiling
    count = data.draw(st.one_of(st.just(state.last_batch_record_count), _counts,
                                st.sampled_from([room, room + 1])))
    if _meets(state, next_batch_condition(epoch, base, count)):
        assert _verdict(state, epoch, base, count) is BatchVerdict.APPEND


@given(_states(), _counts)
def test_every_next_batch_of_the_same_epoch_meets_the_next_batch_condition(
    state: ProducerPartitionState, count: int
) -> None:
    """...and the condition is not narrower than check_sequence's APPEND for a state of the
    batch's own epoch, so a running producer's batches take the one-statement path."""
    base = state.last_sequence + 1
    if _verdict(state, state.producer_epoch, base, count) is BatchVerdict.APPEND:
        assert _meets(state, next_batch_condition(state.producer_epoch, base, count))


# --- the first batch of an epoch as a condition storage tests while writing -------------------


def _starts_epoch_accepts(state: ProducerPartitionState | None, epoch: int, base: int, count: int) -> bool:
    """What storage's upsert writes on: starts_epoch, and no state or an older epoch stored."""
    return starts_epoch(base, count) and (state is None or state.producer_epoch < epoch)


@given(st.one_of(st.none(), _states()), _epochs, st.one_of(st.just(0), _sequences),
       st.one_of(_counts, st.sampled_from([MAX_SEQUENCE, MAX_SEQUENCE + 1, MAX_SEQUENCE + 2])))
def test_a_batch_the_first_batch_upsert_writes_is_one_check_sequence_appends(
    state: ProducerPartitionState | None, epoch: int, base: int, count: int
) -> None:
    """Storage appends on the upsert's condition alone, so it must never accept what
    check_sequence refuses."""
    if _starts_epoch_accepts(state, epoch, base, count):
        assert _verdict(state, epoch, base, count) is BatchVerdict.APPEND  # type: ignore[arg-type]


@given(st.one_of(st.none(), _states()), _epochs, _counts)
def test_every_first_batch_of_a_new_epoch_meets_the_first_batch_condition(
    state: ProducerPartitionState | None, epoch: int, count: int
) -> None:
    """...and the condition is not narrower than check_sequence's APPEND at sequence 0, so the
    first batch of each version 2 transaction takes the one-statement path."""
    if state is None or state.producer_epoch < epoch:
        if _verdict(state, epoch, 0, count) is BatchVerdict.APPEND:  # type: ignore[arg-type]
            assert _starts_epoch_accepts(state, epoch, 0, count)


def test_a_taken_back_producer_s_first_batch_where_it_has_no_state_is_appended_at_any_sequence() -> None:
    # Its client's sequences went on; its state here went with its id (producer expiry).
    assert check_sequence(None, 3, 41, 2, taken_back=True) is BatchVerdict.APPEND
    state = ProducerPartitionState(3, 42, 41, 2, 7)
    # Where it has a state again, the usual rules: a retry, and a gap.
    assert check_sequence(state, 3, 41, 2, taken_back=True) == WrittenBatch(41, 2, 7)
    with pytest.raises(OutOfOrderSequenceNumber):
        check_sequence(state, 3, 45, 1, taken_back=True)
