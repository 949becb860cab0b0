"""app.domain.offsets.offset_in_order: when a committed offset of one read order is handed to a
reader of the other as the same number, and how it is refused where it is not."""

from __future__ import annotations

import pytest

from app.domain.errors import InconsistentGroupProtocol, UnstableOffsetCommit
from app.domain.offsets import ReadOrder, Straddle, offset_in_order

COMMIT, OFFSET = ReadOrder.COMMIT, ReadOrder.OFFSET


def _refusal(stored: ReadOrder, wanted: ReadOrder, straddle: Straddle) -> object:
    return offset_in_order(stored, wanted, straddle, group_id="billing", topic="orders", partition=3, offset=7)


@pytest.mark.parametrize("straddle", list(Straddle))
@pytest.mark.parametrize("order", list(ReadOrder))
def test_an_offset_read_in_the_order_it_was_committed_in_is_never_refused(order: ReadOrder,
                                                                          straddle: Straddle) -> None:
    assert _refusal(order, order, straddle) is None


@pytest.mark.parametrize(("stored", "wanted"), [(COMMIT, OFFSET), (OFFSET, COMMIT)])
def test_an_offset_no_transaction_straddles_means_the_same_in_the_other_order(stored: ReadOrder,
                                                                             wanted: ReadOrder) -> None:
    assert _refusal(stored, wanted, Straddle.NONE) is None


@pytest.mark.parametrize(("stored", "wanted"), [(COMMIT, OFFSET), (OFFSET, COMMIT)])
def test_an_offset_a_committed_transaction_straddles_is_refused_in_the_other_order(stored: ReadOrder,
                                                                                  wanted: ReadOrder) -> None:
    refusal = _refusal(stored, wanted, Straddle.COMMITTED)
    assert isinstance(refusal, InconsistentGroupProtocol) and not refusal.retriable
    assert refusal.details == {"partitions": [{"topic": "orders", "partition": 3}]}
    assert "group 'billing''s offset 7 in orders/3" in refusal.message and "reset" in refusal.message


@pytest.mark.parametrize(("stored", "wanted"), [(COMMIT, OFFSET), (OFFSET, COMMIT)])
def test_an_offset_an_open_transaction_straddles_waits_for_its_outcome(stored: ReadOrder, wanted: ReadOrder) -> None:
    refusal = _refusal(stored, wanted, Straddle.UNDECIDED)
    assert isinstance(refusal, UnstableOffsetCommit) and refusal.retriable
    assert refusal.details == {"partitions": [{"topic": "orders", "partition": 3}]}
