"""A member whose session has ended is gone for the requests that answer from whether a group
has members, though group expiry has not removed it yet (as in Kafka, which removes it the
moment its session ends): DeleteGroups and OffsetDelete, on both databases. The session ends
once the test's clock is past its last heartbeat plus its session timeout."""

from __future__ import annotations

import pytest

from app.domain.errors import GroupIdNotFound, NonEmptyGroup
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder
from app.storage import groups
from tests.helpers import create_topic

SESSION_MS = 10_000


def _member_of(client, services, group_id: str) -> str:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    return services.groups.join(group_id, member_id=None, topic_names=["t"], session_timeout_ms=SESSION_MS).member_id


def test_delete_groups_deletes_a_group_whose_only_members_session_has_ended(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    _member_of(client, services, "g")
    clock.advance(SESSION_MS + 1)

    services.groups.delete("g")

    with pytest.raises(GroupIdNotFound):
        services.groups.describe_group("g")


def test_delete_groups_refuses_a_group_whose_members_session_ends_only_after_now(client, services, clock,  # type: ignore[no-untyped-def]
                                                                                 database) -> None:
    member = _member_of(client, services, "g")
    clock.advance(SESSION_MS)  # the last moment the session lasts (group expiry: heartbeat + timeout < now)

    with pytest.raises(NonEmptyGroup):
        services.groups.delete("g")

    with database.read() as conn:
        assert [m.member_id for m in groups.members(conn, "g")] == [member]


def test_offset_delete_deletes_the_offsets_of_a_topic_only_a_member_whose_session_ended_subscribes_to(  # type: ignore[no-untyped-def]
        client, services, clock) -> None:
    _member_of(client, services, "g")
    services.group_offsets.commit("g", [OffsetToStage("t", 0, 4, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)])
    clock.advance(SESSION_MS + 1)

    assert services.group_offsets.delete_offsets("g", [("t", 0)]) == {}

    assert [(o.topic, o.partition) for o in services.group_offsets.fetch("g", topic_names=None, require_stable=False, order=None)] == []
