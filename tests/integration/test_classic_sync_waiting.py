"""A Kafka member's SyncGroup that waits for the leader's, when another member joins again in
between (ClassicGroupProtocol.sync, `waited`), on both databases.

Kafka's coordinator answers every waiting SyncGroup the moment the leader's arrives, before any
later JoinGroup. A cooperative consumer that gives a partition up joins again at once, so it
may start the next rebalance before the waiting follower's request asks again: that follower
must still get its assignment of the generation it synced for (it joins again on its next
heartbeat), and a SyncGroup made once the rebalance has started is refused, as Kafka refuses it."""

from __future__ import annotations

import pytest

from app.domain.errors import RebalanceInProgress
from app.services.classic_group_protocol import Joined
from tests.helpers import create_topic


def _join(kafka, member_id: str = ""):  # type: ignore[no-untyped-def]
    return kafka.join("g", member_id=member_id, client_id=None, protocol_type="consumer",
                      protocols=[("cooperative-sticky", b"")], topic_names=["t"], session_timeout_ms=10_000,
                      rebalance_timeout_ms=10_000)


def _sync(kafka, joined, assignments=None, *, waited: bool = False):  # type: ignore[no-untyped-def]
    return kafka.sync("g", joined.member_id, joined.generation_id, protocol_type="consumer",
                      protocol_name="cooperative-sticky", assignments=assignments, waited=waited)


@pytest.fixture
def follower_waiting_then_leader_rejoins(client, services):  # type: ignore[no-untyped-def]
    """Generation 2 of leader and follower: the follower's SyncGroup waited, the leader synced
    (giving the follower b"for-follower") and then joined again (the group rebalances)."""
    create_topic(client, "t", 2)
    kafka = services.classic_group_protocol
    first = _join(kafka)
    assert isinstance(first, Joined)
    _sync(kafka, first, {first.member_id: (b"both", [("t", 0), ("t", 1)])})
    follower_joining = _join(kafka)
    leader = _join(kafka, first.member_id)
    follower = kafka.joined("g", follower_joining.member_id, follower_joining.generation_id)
    assert isinstance(leader, Joined) and isinstance(follower, Joined)
    assert (leader.generation_id, follower.generation_id, leader.leader_id) == (2, 2, first.member_id)
    assert _sync(kafka, follower) is None  # waits for the leader
    _sync(kafka, leader, {leader.member_id: (b"for-leader", [("t", 1)]), follower.member_id: (b"for-follower", [])})
    _join(kafka, leader.member_id)  # gave a partition up: joins again at once
    return kafka, follower


def test_a_syncgroup_that_waited_gets_its_assignment_although_the_leader_joined_again(  # type: ignore[no-untyped-def]
        follower_waiting_then_leader_rejoins) -> None:
    kafka, follower = follower_waiting_then_leader_rejoins

    assert _sync(kafka, follower, waited=True) == b"for-follower"


def test_a_syncgroup_made_after_the_rebalance_began_is_refused(  # type: ignore[no-untyped-def]
        follower_waiting_then_leader_rejoins) -> None:
    kafka, follower = follower_waiting_then_leader_rejoins

    with pytest.raises(RebalanceInProgress):
        _sync(kafka, follower)
