"""Group membership rules both doors' services share (app.services.group_service, the HTTP
door's; app.services.classic_group_protocol, the Kafka door's), as functions on the caller's
connection: which door manages a group with members (`check_door`), the group size limit
(`check_size`), the rebalance's join phase with Kafka's initial rebalance delay
(`prepare_rebalance`, `member_added`, `join_completes`, `complete_join`, `awaiting_join`),
when a member's session has ended (`session_ended`) and what follows members leaving or
expiring (`members_left`), which group expiry runs too.
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
    """After members of a Kafka door's group left or expired: the others rebalance. During an
    initial rebalance delay nothing more: as in Kafka, only the delay's deadline ends it
    (complete_join, from the next join, the waiting joins or group expiry), so that consumers
    still starting are in the first generation even if one of those started with them closed."""
    g = groups.group(conn, group_id)
    assert g is not None
    if g.state is not StoredGroupState.PREPARING_REBALANCE:
        prepare_rebalance(conn, group_id, now)
    elif g.initial_rebalance_remaining_ms is not None:
        return
    complete_join(conn, group_id, now, initial_delay_ms=0)  # no initial delay is under way to extend


def complete_join(conn: Connection, group_id: str, now: int, *, initial_delay_ms: int) -> int:
    """Ends the join phase when it may (app.domain.group): removes the dynamic members that
    did not join again in time, bumps the generation, chooses the leader and the protocol.
    Returns how many members it removed. The group's row is locked by the caller.

    In an initial rebalance delay (prepare_rebalance) whose current period has ended: if a
    member was added during it and some of the first member's rebalance timeout is left, the
    delay goes on for another `initial_delay_ms` (OUTBOX_GROUP_INITIAL_REBALANCE_DELAY_MS) or
    what is left, whichever is less (Kafka's InitialDelayedJoin), else the join phase ends.
    The next period starts where the last ended, not when this runs, as Kafka's timer fires at
    the deadline: a join runs this before it adds a member (ClassicGroupProtocol.join), so a
    member added after a deadline counts in the period it came in."""
    g = groups.group(conn, group_id)
    assert g is not None
    members = groups.members(conn, group_id)
    if not join_completes(g, members, now):
        return 0
    remaining = g.initial_rebalance_remaining_ms
    if remaining is not None and g.new_member_added and remaining > 0:
        assert g.rebalance_deadline_ms is not None
        # Kafka's arithmetic: the next period is at most the delay, and what is left shrinks by
        # the delay, so the periods together last at most the first member's rebalance timeout.
        deadline = g.rebalance_deadline_ms + min(initial_delay_ms, remaining)
        groups.update_group(conn, group_id, rebalance_deadline_ms=deadline,
                            initial_rebalance_remaining_ms=max(remaining - initial_delay_ms, 0),
                            new_member_added=False, updated_ms=now)
        if now < deadline:
            return 0
        # Past the next period too: no member was added in it (a join would have run this first).
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
        groups.update_group(conn, group_id, rebalance_deadline_ms=now + timeout, updated_ms=now,
                            **_NO_INITIAL_DELAY)
        return len(late)
    if not joined:
        # Empty: either door may take the group now (check_door asks only of a group with
        # members; the door that takes it sets the protocol type). Until then the protocol
        # type stays, as in Kafka: ListGroups and DescribeGroups show an emptied consumer
        # group as "consumer", not as a simple group.
        groups.update_group(conn, group_id, generation_id=target, state=StoredGroupState.STABLE,
                            protocol_name=None, leader_id=None, rebalance_deadline_ms=None, updated_ms=now,
                            **_NO_INITIAL_DELAY)
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
                        protocol_name=protocol, leader_id=leader, rebalance_deadline_ms=None, updated_ms=now,
                        **_NO_INITIAL_DELAY)
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


# What a join phase that is not an initial rebalance delay has of one (tables.consumer_groups).
_NO_INITIAL_DELAY = {"initial_rebalance_remaining_ms": None, "new_member_added": False,
                     "initial_rebalance_generation": None}


def prepare_rebalance(conn: Connection, group_id: str, now: int, *, initial_delay_ms: int = 0) -> None:
    """Moves the group to PreparingRebalance, its deadline the longest rebalance timeout of
    its members.

    `initial_delay_ms`: the group was empty when its member joined, and its first generation
    waits that long (OUTBOX_GROUP_INITIAL_REBALANCE_DELAY_MS, Kafka's
    group.initial.rebalance.delay.ms), so that members started together join it together: the
    deadline ends the delay's first period, no join ends it sooner (join_completes), and what
    the member's rebalance timeout leaves beyond it extends it while members keep being added
    (complete_join). 0: no delay, as for a group that had members."""
    members = groups.members(conn, group_id)
    timeout = max((m.rebalance_timeout_ms or m.session_timeout_ms for m in members), default=0)
    if initial_delay_ms > 0:
        # The generation it begins at names the delay (groups.group): columns a process that
        # does not know them leaves behind when it ends the join phase are not taken for one.
        period, delay = initial_delay_ms, {"initial_rebalance_remaining_ms": max(timeout - initial_delay_ms, 0),
                                           "new_member_added": False,
                                           "initial_rebalance_generation": groups.generation(conn, group_id)}
    else:
        period, delay = timeout, _NO_INITIAL_DELAY
    groups.update_group(conn, group_id, state=StoredGroupState.PREPARING_REBALANCE,
                        rebalance_deadline_ms=now + period, updated_ms=now, **delay)


def member_added(conn: Connection, g: groups.Group) -> None:
    """A new member was added to `g` (not one that joined again, nor a static member's
    replacement): during an initial rebalance delay, the delay's current period is extended
    when it ends (Kafka's newMemberAdded)."""
    if g.state is StoredGroupState.PREPARING_REBALANCE and g.initial_rebalance_remaining_ms is not None:
        groups.update_group(conn, g.group_id, new_member_added=True)


def join_completes(g: groups.Group, members: list[groups.Member], now: int) -> bool:
    """Whether the join phase of a Kafka door's group may end: every member has joined again,
    or the rebalance deadline has passed (the others are then removed). During an initial
    rebalance delay, only its deadline: every member has joined (each as it was added), and
    the members started with them are still to come (complete_join may extend it)."""
    if g.state is not StoredGroupState.PREPARING_REBALANCE:
        return False
    if g.initial_rebalance_remaining_ms is not None:
        return g.rebalance_deadline_ms is not None and now >= g.rebalance_deadline_ms
    every_joined = all(m.join_generation == g.generation_id + 1 for m in members)
    return every_joined or (g.rebalance_deadline_ms is not None and now >= g.rebalance_deadline_ms)
