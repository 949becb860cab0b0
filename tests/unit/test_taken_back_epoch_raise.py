"""What a Send refused at a taken-back row's epoch does to that row (StoredProducer.epoch_raise,
storage.producers.raise_taken_back_epoch's decision), and the epoch range a take-back's row may
have (check_producer_epoch): the domain's rules, without a database."""

from __future__ import annotations

import pytest

from app.domain.errors import InvalidProducerEpoch
from app.domain.producer import EpochRaise, StoredProducer, check_producer_epoch, is_producer_epoch
from app.domain.types import MAX_PRODUCER_EPOCH

ROW = StoredProducer(7, 3, None, "User:alice", taken_back=True)


@pytest.mark.parametrize(("row", "principal", "epoch", "verdict"), [
    (ROW, "User:alice", 4, EpochRaise.RAISE),
    (ROW, "User:alice", MAX_PRODUCER_EPOCH, EpochRaise.RAISE),
    (ROW, "User:alice", 3, EpochRaise.ALREADY_RAISED),  # a concurrent Send of its sender raised it
    (ROW, "User:alice", 2, EpochRaise.REFUSED),  # a lower epoch stays refused
    (ROW, "User:alice", -1, EpochRaise.REFUSED),
    (ROW, "User:alice", MAX_PRODUCER_EPOCH + 1, EpochRaise.REFUSED),  # no producer has it
    (ROW, "User:mallory", 4, EpochRaise.REFUSED),  # another's row
    (StoredProducer(7, 3, None, "User:alice"), "User:alice", 4, EpochRaise.REFUSED),  # made by InitProducerId
    (StoredProducer(7, 3, "tx", "User:alice", taken_back=True), "User:alice", 4, EpochRaise.REFUSED),
])
def test_a_taken_back_row_is_raised_only_for_its_sender_to_a_higher_epoch_a_producer_can_have(
        row: StoredProducer, principal: str, epoch: int, verdict: EpochRaise) -> None:
    assert row.epoch_raise(principal, epoch) is verdict


@pytest.mark.parametrize("epoch", [-1, MAX_PRODUCER_EPOCH + 1, -32768])
def test_a_take_back_s_epoch_outside_what_a_producer_can_have_is_refused(epoch: int) -> None:
    with pytest.raises(InvalidProducerEpoch, match=f"producer epoch {epoch} is outside 0..{MAX_PRODUCER_EPOCH}"):
        check_producer_epoch(epoch)


@pytest.mark.parametrize("epoch", [0, MAX_PRODUCER_EPOCH])
def test_a_take_back_s_epoch_a_producer_can_have_passes(epoch: int) -> None:
    check_producer_epoch(epoch)


@pytest.mark.parametrize(("epoch", "expected"), [
    (-1, False), (0, True), (1, True), (MAX_PRODUCER_EPOCH, True), (MAX_PRODUCER_EPOCH + 1, False),
])
def test_the_epochs_a_producer_can_have_are_0_to_the_largest_int16(epoch: int, expected: bool) -> None:
    assert is_producer_epoch(epoch) is expected
