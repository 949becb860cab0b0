"""app.domain.offsets.offsets_to_write: once the group is checked, what a commit of offsets
writes, by each offset's metadata (Kafka's offset.metadata.max.bytes, 4,096 characters)."""

from __future__ import annotations

import pytest

from app.domain.errors import OffsetMetadataTooLarge
from app.domain.offsets import NO_LEADER_EPOCH, OFFSET_METADATA_MAX_CHARS, OffsetToStage, ReadOrder, offsets_to_write

FITS = OffsetToStage("orders", 0, 5, "m" * OFFSET_METADATA_MAX_CHARS, NO_LEADER_EPOCH, ReadOrder.COMMIT)
NONE = OffsetToStage("orders", 1, 6, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)
TOO_LONG = OffsetToStage("orders", 2, 7, "m" * (OFFSET_METADATA_MAX_CHARS + 1), NO_LEADER_EPOCH, ReadOrder.COMMIT)


def test_answered_per_partition_the_offsets_whose_metadata_fits_are_written_and_the_others_left_out() -> None:
    assert offsets_to_write([FITS, TOO_LONG, NONE], each_partition=True) == [FITS, NONE]


def test_all_or_nothing_one_offset_whose_metadata_is_too_long_refuses_the_commit_naming_it() -> None:
    with pytest.raises(OffsetMetadataTooLarge) as refused:
        offsets_to_write([FITS, TOO_LONG, NONE], each_partition=False)
    assert (refused.value.error_code, refused.value.message) == (
        "OFFSET_METADATA_TOO_LARGE", "the metadata of orders/2's offset holds 4097 characters; at most 4096")


def test_all_or_nothing_offsets_that_all_fit_are_all_written() -> None:
    assert offsets_to_write([FITS, NONE], each_partition=False) == [FITS, NONE]
