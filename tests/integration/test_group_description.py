"""GroupService.describe_groups: the one description of a group and its members that the HTTP
API, `outbox groups describe` and the Kafka door's DescribeGroups all show, on both databases."""

from __future__ import annotations

import pytest

from app.domain.errors import GroupIdNotFound
from app.domain.group import GroupState
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder
from app.services.group_service import GroupDescription, MemberDescription
from tests.helpers import create_topic

START_MS = 1_700_000_000_000  # the FakeClock's start


def test_a_member_of_the_http_doors_group_is_described_with_its_host_subscription_and_assignment(  # type: ignore[no-untyped-def]
        client, services) -> None:
    create_topic(client, "t", 2)
    m = services.groups.join("g", member_id=None, topic_names=["t"], session_timeout_ms=10_000,
                             client_host="10.0.0.7")

    assert services.groups.describe_group("g") == GroupDescription(
        "g", GroupState.STABLE, 1, None, None,
        [MemberDescription(m.member_id, None, None, "10.0.0.7", ["t"], [("t", 0), ("t", 1)], 10_000, START_MS,
                           b"", b"")])


def test_a_member_of_the_kafka_doors_group_is_described_with_its_client_id_metadata_and_assignment(  # type: ignore[no-untyped-def]
        client, services) -> None:
    create_topic(client, "t", 1)
    kafka = services.classic_group_protocol
    joined = kafka.join("k", member_id="", client_id="app-1", protocol_type="consumer",
                        protocols=[("range", b"meta-r"), ("roundrobin", b"meta-rr")], topic_names=["t"],
                        session_timeout_ms=10_000, rebalance_timeout_ms=10_000, group_instance_id="i-1",
                        client_host="10.0.0.8")
    kafka.sync("k", joined.member_id, joined.generation_id, protocol_type="consumer", protocol_name="range",
               assignments={joined.member_id: (b"assigned", [("t", 0)])})

    assert services.groups.describe_groups(["k"]) == [GroupDescription(
        "k", GroupState.STABLE, 1, "consumer", "range",
        [MemberDescription(joined.member_id, "i-1", "app-1", "10.0.0.8", ["t"], [("t", 0)], 10_000, START_MS,
                           b"meta-r", b"assigned")])]


def test_a_group_with_offsets_only_is_empty_without_generation_nor_members(client, services) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    services.group_offsets.commit("o", [OffsetToStage("t", 0, 3, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)])

    assert services.groups.describe_group("o") == GroupDescription("o", GroupState.EMPTY, None, None, None, [])


def test_a_group_the_service_does_not_know_is_dead_to_describe_groups_and_not_found_to_describe_group(  # type: ignore[no-untyped-def]
        services) -> None:
    assert services.groups.describe_groups(["nobody"]) == [
        GroupDescription("nobody", GroupState.DEAD, None, None, None, [])]
    with pytest.raises(GroupIdNotFound):
        services.groups.describe_group("nobody")


def test_as_dict_leaves_out_the_topics_the_caller_may_not_describe(client, services) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "seen", 1)
    create_topic(client, "hidden", 1)
    m = services.groups.join("g", member_id=None, topic_names=["seen", "hidden"], session_timeout_ms=10_000)

    shown = services.groups.describe_group("g").as_dict(visible=lambda topic: topic == "seen")

    assert shown == {"group_id": "g", "generation_id": 1, "members": [
        {"member_id": m.member_id, "topics": ["seen"], "assignment": [{"topic": "seen", "partition": 0}],
         "session_timeout_ms": 10_000, "last_heartbeat_ms": START_MS, "client_id": None, "client_host": None}]}
