"""The group metadata a Kafka request's fields give (GroupMetadata.given): None only for Kafka's
"no group metadata", whose offsets the group's generation does not fence."""

from __future__ import annotations

import pytest

from app.domain.offsets import GroupMetadata


def test_generation_minus_one_without_a_member_or_an_instance_is_no_group_metadata() -> None:
    assert GroupMetadata.given(-1, "", None) is None


@pytest.mark.parametrize("generation_id, member_id, instance_id", [
    (0, "", None), (3, "m-1", None), (-1, "m-1", None), (-1, "", "static-1")])
def test_any_generation_member_or_instance_is_group_metadata_fenced_by_the_group(
        generation_id: int, member_id: str, instance_id: str | None) -> None:
    assert GroupMetadata.given(generation_id, member_id, instance_id) == GroupMetadata(
        generation_id, member_id, instance_id)
