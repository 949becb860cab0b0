"""DeleteRecords' new log start (app.domain.topic_admin.new_log_start): never backwards, never
past the last stable offset, and None (the Kafka door's -1) as far as it may go."""

from __future__ import annotations

import pytest

from app.domain.errors import OffsetOutOfRange
from app.domain.topic_admin import new_log_start

BOUNDS = {"log_start": 2, "last_stable": 5, "log_end": 8}


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
