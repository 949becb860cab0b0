"""What offsets a request may stage, from every door (app.domain.offsets): one a partition, a
bounded count, and metadata that both databases store alike."""

from __future__ import annotations

import pytest

from app.domain.errors import InvalidRequest
from app.domain.offsets import (OFFSET_METADATA_MAX_CHARS, MetadataFault, OffsetToStage, check_offsets_to_stage,
                                metadata_fault)


@pytest.mark.parametrize(("metadata", "fault"), [
    (None, None),
    ("", None),
    ("m" * OFFSET_METADATA_MAX_CHARS, None),
    ("tab\tand\u0001control characters", None),
    ("m" * (OFFSET_METADATA_MAX_CHARS + 1), MetadataFault.TOO_LARGE),
    ("a\x00b", MetadataFault.HOLDS_NUL),
    ("m" * (OFFSET_METADATA_MAX_CHARS + 1) + "\x00", MetadataFault.TOO_LARGE),
])
def test_metadata_fault_names_what_keeps_metadata_from_being_stored(metadata: str | None,
                                                                   fault: MetadataFault | None) -> None:
    assert metadata_fault(metadata) is fault


@pytest.mark.parametrize(("metadata", "message"), [
    ("a\x00b", "orders/1: an offset's metadata must not contain NUL (U+0000)"),
    ("m" * (OFFSET_METADATA_MAX_CHARS + 1),
     f"orders/1: an offset's metadata holds at most {OFFSET_METADATA_MAX_CHARS} characters, "
     f"not {OFFSET_METADATA_MAX_CHARS + 1}"),
])
def test_offsets_whose_metadata_cannot_be_stored_are_refused_naming_the_partition(metadata: str,
                                                                                  message: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_offsets_to_stage([OffsetToStage("orders", 0, 5, "fine"), OffsetToStage("orders", 1, 5, metadata)])
    assert str(refused.value) == message


def test_two_offsets_for_one_partition_are_refused() -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_offsets_to_stage([OffsetToStage("orders", 0, 5, None), OffsetToStage("orders", 0, 6, None)])
    assert str(refused.value) == "two offsets for orders/0 in one request"
