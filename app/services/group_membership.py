"""Group membership rules both doors' services share (app.services.group_service, the HTTP
door's; app.services.classic_group_protocol, the Kafka door's), as functions on the caller's
connection: which door manages a group with members (`check_door`), the group size limit
(`check_size`), the rebalance's join phase (`prepare_rebalance`, `join_completes`,
`complete_join`, `awaiting_join`), when a member's session has ended (`session_ended`) and
what follows members leaving or expiring (`members_left`), which group expiry runs too.
"""

from __future__ import annotations

from sqlalchemy import Connection

from app.domain.errors import GroupMaxSizeReached, InconsistentGroupProtocol
from app.domain.group import StoredGroupState, select_protocol
from app.storage import groups


def check_door(conn: Connection, group_id: str, current: dict[str, groups.Member], *,
               protocol_type: str | None) -> None:
    """A group with members is managed by one door (app.domain.group): the other's joins,
    syncs, heartbeats and leaves are refused rather than mixing two rebalance protocols.
    `protocol_type`: the door of the request, None for the HTTP door's."""
    if not current:
        return
    g = groups.group(conn, group_id)
    managed = None if g is None else g.protocol_type
    if managed != protocol_type:
        by = "the HTTP door" if managed is None else f"the Kafka door (protocol type {managed!r})"
        raise InconsistentGroupProtocol(f"group {group_id!r} has members managed by {by}")


def check_size(group_id: str, size: int, max_size: int) -> None:
    """A new member may join a group of `size` members while it has fewer than OUTBOX_GROUP_MAX_SIZE."""
    if size >= max_size:
        raise GroupMaxSizeReached(f"group {group_id!r} has {size} members, as many as OUTBOX_GROUP_MAX_SIZE allows")


def members_left(conn: Connection, group_id: str, now: int) -> None:
    """After members of a Kafka door's group left or expired: the others rebalance."""
    g = groups.group(conn, group_id)
    assert g is not None
    if g.state is not StoredGroupState.PREPARING_REBALANCE:
        prepare_rebalance(conn, group_id, now)
    complete_join(conn, group_id, now)


def complete_join(conn: Connection, group_id: str, now: int) -> int:
    """Ends the join phase when it may (app.domain.group): removes the dynamic members that
    did not join again in time, bumps the generation, chooses the leader and the protocol.
    Returns how many members it removed. The group's row is locked by the caller."""
    g = groups.group(conn, group_id)
    assert g is not None
    members = groups.members(conn, group_id)
    if not join_completes(g, members, now):
        return 0
    target = g.generation_id + 1
    joined = sorted((m for m in members if m.join_generation == target), key=lambda m: (m.joined_ms, m.member_id))
    # A static member (KIP-345) that did not join again keeps its place, as in Kafka: its
    # session or a LeaveGroup removes it, and the leader assigns to it meanwhile, so that it
    # finds its partitions when it comes back.
    kept = [m for m in members if m.join_generation != target and m.group_instance_id is not None]
    late = [m.member_id for m in members if m.join_generation != target and m.group_instance_id is None]
    if late:
        groups.remove_members(conn, group_id, late)
    if not joined and kept:
        # None joined again: the join phase goes on until the static members' sessions expire
        # (or one joins), as Kafka's coordinator postpones it.
        timeout = max(m.rebalance_timeout_ms or m.session_timeout_ms for m in kept)
        groups.update_group(conn, group_id, rebalance_deadline_ms=now + timeout, updated_ms=now)
        return len(late)
    if not joined:
        # Empty: either door may take the group now (check_door asks only of a group with
        # members; the door that takes it sets the protocol type). Until then the protocol
        # type stays, as in Kafka: ListGroups and DescribeGroups show an emptied consumer
        # group as "consumer", not as a simple group.
        groups.update_group(conn, group_id, generation_id=target, state=StoredGroupState.STABLE,
                            protocol_name=None, leader_id=None, rebalance_deadline_ms=None, updated_ms=now)
        return len(late)
    leader = g.leader_id if g.leader_id in {m.member_id for m in joined} else joined[0].member_id
    ordered = sorted(joined + kept, key=lambda m: m.member_id != leader)  # the leader's preference breaks ties
    protocol = select_protocol([[n for n, _ in m.protocols or []] for m in ordered])
    for m in joined:
        # The session restarts when the join ends: the member did not heartbeat while it waited.
        groups.update_member(conn, group_id, m.member_id, last_heartbeat_ms=now, member_assignment=None)
    for m in kept:
        # A member of the new generation; its session goes on from its last heartbeat.
        groups.update_member(conn, group_id, m.member_id, join_generation=target, member_assignment=None)
    groups.update_group(conn, group_id, generation_id=target, state=StoredGroupState.COMPLETING_REBALANCE,
                        protocol_name=protocol, leader_id=leader, rebalance_deadline_ms=None, updated_ms=now)
    return len(late)


def awaiting_join(g: groups.Group, m: groups.Member) -> bool:
    """Whether the member has joined the rebalance under way and waits in JoinGroup (so it
    does not heartbeat: the rebalance deadline bounds it instead of its session)."""
    return g.state is StoredGroupState.PREPARING_REBALANCE and m.join_generation == g.generation_id + 1


def session_ended(g: groups.Group, m: groups.Member, now: int) -> bool:
    """Whether the member's session has ended at `now`: no heartbeat for longer than its
    session timeout, unless it waits in JoinGroup (`awaiting_join`). The one definition group
    expiry and the requests that answer from a group's members use
    (groups.groups_with_expired_members finds the groups to look at with the same bound)."""
    return m.last_heartbeat_ms + m.session_timeout_ms < now and not awaiting_join(g, m)


def prepare_rebalance(conn: Connection, group_id: str, now: int) -> None:
    """Moves the group to PreparingRebalance, its deadline the longest rebalance timeout of
    its members."""
    members = groups.members(conn, group_id)
    timeout = max((m.rebalance_timeout_ms or m.session_timeout_ms for m in members), default=0)
    groups.update_group(conn, group_id, state=StoredGroupState.PREPARING_REBALANCE,
                        rebalance_deadline_ms=now + timeout, updated_ms=now)


def join_completes(g: groups.Group, members: list[groups.Member], now: int) -> bool:
    """Whether the join phase of a Kafka door's group may end: every member has joined again,
    or the rebalance deadline has passed (the others are then removed)."""
    if g.state is not StoredGroupState.PREPARING_REBALANCE:
        return False
    every_joined = all(m.join_generation == g.generation_id + 1 for m in members)
    return every_joined or (g.rebalance_deadline_ms is not None and now >= g.rebalance_deadline_ms)
