"""DeleteRecords' new log start (app.domain.topic_admin.new_log_start): never backwards, never
past the last stable offset, only to a clean cut (app.domain.log_start), and None (the Kafka
door's -1) as far as it may go."""

from __future__ import annotations

import pytest

from app.domain.errors import OffsetOutOfRange
from app.domain.log_start import Across, clean_cut_at_or_above, clean_cut_at_or_below
from app.domain.topic_admin import new_log_start

BOUNDS = {"log_start": 2, "last_stable": 5, "log_end": 8, "across": lambda offset: None}


def across_of(*transactions: tuple[int, int]) -> object:
    """What lies across an offset, given the committed transactions as (first record, marker),
    as app.storage.read_committed.committed_across reads them (log start 0)."""
    def across(offset: int) -> Across | None:
        cut = [(first, marker) for first, marker in transactions if first < offset <= marker]
        if not cut:
            return None
        return Across(min(f for f, _ in cut), min(m for _, m in cut), max(m for _, m in cut))
    return across


def test_none_moves_the_log_start_to_the_last_stable_offset() -> None:
    assert new_log_start(None, **BOUNDS) == 5


def test_an_offset_below_the_log_start_leaves_it() -> None:
    assert new_log_start(1, **BOUNDS) == 2


def test_an_offset_up_to_the_last_stable_offset_is_the_new_log_start() -> None:
    assert new_log_start(4, **BOUNDS) == 4
    assert new_log_start(5, **BOUNDS) == 5


@pytest.mark.parametrize("offset", [-1, 6, 8])
def test_a_negative_offset_or_one_past_the_last_stable_offset_is_out_of_range(offset: int) -> None:
    with pytest.raises(OffsetOutOfRange):
        new_log_start(offset, **BOUNDS)


# A transaction's record at 0, plain records at 1 and 2, its COMMIT marker at 3.
SCENARIO = {"log_start": 0, "last_stable": 4, "log_end": 4, "across": across_of((0, 3))}


@pytest.mark.parametrize("offset", [1, 2, 3])
def test_an_offset_that_would_cut_a_committed_transaction_is_refused_naming_the_clean_cuts(offset: int) -> None:
    with pytest.raises(OffsetOutOfRange) as refused:
        new_log_start(offset, **SCENARIO)
    assert str(refused.value).startswith(
        f"offset {offset} would cut a transaction committed at 3 whose records begin at 0 ")
    assert "delete up to 0, or up to 4" in str(refused.value)
    assert refused.value.details == {"log_start_offset": 0, "last_stable_offset": 4, "log_end_offset": 4}


@pytest.mark.parametrize("offset", [0, 4])
def test_a_clean_cut_is_the_new_log_start(offset: int) -> None:
    assert new_log_start(offset, **SCENARIO) == offset


def test_none_goes_to_the_highest_clean_cut_at_or_below_the_last_stable_offset() -> None:
    # A committed at 4 with a record at 0, while B (records from 2) is still open: the last
    # stable offset 2 lies across A, which a reader in commit order at 2 has not read.
    bounds = {"log_start": 0, "last_stable": 2, "log_end": 5, "across": across_of((0, 4))}
    assert new_log_start(None, **bounds) == 0
    with pytest.raises(OffsetOutOfRange, match=r"delete up to 0 \(no clean cut lies above it"):
        new_log_start(2, **bounds)


def test_lowering_past_one_transaction_can_meet_another() -> None:
    # T8: records from 1, committed at 5; T7: records from 3, committed at 9.
    across = across_of((1, 5), (3, 9))
    assert clean_cut_at_or_below(8, across) == 1  # 3 (T7), where T8 lies across: 1
    assert clean_cut_at_or_above(2, across, at_most=20) == 10  # past 5 (T8), where T7 lies across: past 9
    assert clean_cut_at_or_above(2, across, at_most=9) is None
    with pytest.raises(OffsetOutOfRange, match="transactions committed at 5 to 9 whose records begin at 1 .*"
                                               "delete up to 1, or up to 10"):
        new_log_start(4, log_start=0, last_stable=12, log_end=12, across=across)
