"""Kafka's classic group protocol on the engine's groups: JoinGroup, SyncGroup, Heartbeat,
and LeaveGroup, as the Kafka door (app/kafka/groups.py) serves them. The HTTP
door's membership, the offsets both doors commit, the lag and the description of a group
(DescribeGroups) are app.services.group_service's.

The rebalance lives in the group's row and its members' rows (app.domain.group): a join moves
a Stable group to PreparingRebalance; each member joins again (its join_generation becomes the
generation being formed) until all have or the rebalance deadline passes, when the dynamic
members that did not are removed (static ones stay, KIP-345), the generation is bumped, a leader and protocol are chosen
(CompletingRebalance); the leader's SyncGroup stores every member's assignment (Stable). Only
the requests waiting for that are in memory, in the door, which asks again (`joined`, `sync`):
so any process may complete a rebalance and several `serve` processes are one coordinator.

What the HTTP door's service shares with this one (which door manages a group, the size
limit, the end of a join phase) is app.services.group_membership.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sqlalchemy import Connection

from app.domain.clock import Clock
from app.domain.errors import (
    FencedInstanceId,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidRequest,
    InvalidSessionTimeout,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)
from app.domain.group import (
    StoredGroupState,
    check_assignments_bytes,
    check_current_member,
    check_group_instance_id,
    check_group_protocols_bytes,
    check_protocols_bytes,
    instance_holder,
    member_client,
    new_member_id,
    select_protocol,
)
from app.domain.ids import check_group_id
from app.services.group_membership import (
    check_door,
    check_size,
    complete_join,
    join_completes,
    member_added,
    members_left,
    prepare_rebalance,
)
from app.settings import Settings
from app.storage import groups
from app.storage.dialect import RowLock
from app.storage.engine import Database


@dataclass(frozen=True, slots=True)
class Joined:
    """A Kafka member's JoinGroup answer: the generation it is in, and, for the leader, every
    member with its group instance id (None: a dynamic member) and its metadata for the chosen
    protocol (the others get no members).

    `others`: when the request answered formed the generation (its transaction ended the join
    phase), the answers of the generation's other members, which the door gives those of its
    requests waiting in JoinGroup at once, as Kafka's coordinator answers every member when the
    join phase ends; empty otherwise."""

    member_id: str
    generation_id: int
    protocol_type: str
    protocol_name: str
    leader_id: str
    members: list[tuple[str, str | None, bytes]]
    others: tuple[Joined, ...] = ()


@dataclass(frozen=True, slots=True)
class Joining:
    """A Kafka member that has joined the rebalance forming `generation_id` and waits for the
    other members (JoinGroup's barrier): the door asks again (ClassicGroupProtocol.joined)."""

    member_id: str
    generation_id: int


class ClassicGroupProtocol:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock

    def join(self, group_id: str, *, member_id: str, client_id: str | None, protocol_type: str, protocols: list[tuple[str, bytes]],
             topic_names: list[str], session_timeout_ms: int, rebalance_timeout_ms: int,
             require_member_id: bool = False, handed_out: bool = False,
             group_instance_id: str | None = None, client_host: str | None = None) -> Joined | Joining:
        """A member joins (or rejoins) the group. `require_member_id` (JoinGroup 4 and later,
        KIP-394): a new member is not added but refused with MemberIdRequired carrying the id
        it is to join with, after every check a join makes, so nothing is written. `handed_out`:
        `member_id` is such an id, which the door handed out and the member now joins with.
        `group_instance_id` (JoinGroup 5 and later, KIP-345): the member is static; without a
        member id it is added at once (no MemberIdRequired, as in Kafka), or, if a member holds
        the instance id, takes that member's place (`_replace`). `client_id` and `client_host`
        (the address it joins from): what DescribeGroups shows of a member added, or of a static
        member's replacement."""
        check_group_id(group_id)  # first, as Kafka's coordinator checks it (INVALID_GROUP_ID)
        check_group_instance_id(group_instance_id)
        if session_timeout_ms not in self.settings.session_timeout_limit:
            raise InvalidSessionTimeout(f"session_timeout_ms must be in {self.settings.session_timeout_limit}")
        if not protocol_type or not protocols:
            raise InconsistentGroupProtocol("a member names its protocol type and at least one protocol")
        if len({name for name, _ in protocols}) != len(protocols):
            raise InvalidRequest("a member names each protocol once")
        # Before the group is read: a refused join changes nothing, not even a member's heartbeat.
        check_protocols_bytes(protocols, self.settings.kafka_group_max_metadata_bytes)
        # Kafka's JoinGroup v0 has no rebalance timeout: the session timeout is it. Bounded like
        # a session, so that no member holds a rebalance longer than the service allows one.
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        rebalance_timeout_ms = min(rebalance_timeout_ms, self.settings.group_max_session_timeout_ms)
        now = self.clock()
        delay_ms = self.settings.group_initial_rebalance_delay_ms
        with self.db.write() as conn:
            groups.lock_group(conn, group_id, now)
            g = groups.group(conn, group_id)
            assert g is not None
            if g.initial_rebalance_remaining_ms is not None:
                # What the initial delay's passed deadline does, before this join changes the
                # group: Kafka's timer fires at the deadline, so a member added after it belongs
                # to the delay's next period or, if the delay ended there, to the next rebalance.
                complete_join(conn, group_id, now, initial_delay_ms=delay_ms)
                g = groups.group(conn, group_id)
                assert g is not None
            current = {m.member_id: m for m in groups.members(conn, group_id)}
            check_door(conn, group_id, current, protocol_type=protocol_type)
            replaced = None
            if group_instance_id is not None and not member_id:
                replaced = instance_holder(group_instance_id, groups.instances(list(current.values())))
            elif group_instance_id is not None:
                check_current_member(group_id, member_id, group_instance_id, groups.instances(list(current.values())))
            elif member_id and member_id not in current and not handed_out:
                raise UnknownMemberId(f"{member_id!r} is not a member of group {group_id!r}; join without member_id")
            others = [[n for n, _ in m.protocols or []] for mid, m in current.items() if mid not in (member_id, replaced)]
            if select_protocol([[n for n, _ in protocols], *others]) is None:
                raise InconsistentGroupProtocol(f"the member shares no protocol with the members of group {group_id!r}")
            # Here, under the group's row lock (lock_group) and before the member is written in
            # this transaction: checked before it, two joins at once could each find room for
            # itself alone and pass the bound together.
            check_group_protocols_bytes(protocols, replaced or member_id,
                                        {mid: m.protocols for mid, m in current.items()},
                                        self.settings.kafka_group_max_total_metadata_bytes)
            if not current:
                groups.update_group(conn, group_id, protocol_type=protocol_type, protocol_name=None, leader_id=None,
                                    state=StoredGroupState.STABLE, rebalance_deadline_ms=None)
                g = groups.group(conn, group_id)
                assert g is not None
            if replaced is not None:
                return self._replace(conn, g, current[replaced], new_member_id(client_id), protocols=protocols,
                                     topic_names=topic_names, session_timeout_ms=session_timeout_ms,
                                     rebalance_timeout_ms=rebalance_timeout_ms, now=now,
                                     client_id=client_id, client_host=client_host)
            me = current.get(member_id)
            if me is not None and me.protocols == protocols and (
                    g.state is StoredGroupState.COMPLETING_REBALANCE
                    or (g.state is StoredGroupState.STABLE and member_id != g.leader_id)):
                # A member of the current generation asking again with nothing changed (it
                # missed the answer, or a follower rejoins): the current generation's answer,
                # as Kafka gives it; only the leader's rejoin starts a rebalance.
                groups.update_member(conn, group_id, member_id, last_heartbeat_ms=now)
                return _joined(conn, group_id, member_id)
            if me is None:
                check_size(group_id, len(current), self.settings.group_max_size)
                if require_member_id and group_instance_id is None:
                    raise MemberIdRequired(member_id=new_member_id(client_id))
                member_id = member_id or new_member_id(client_id)
                groups.add_member(conn, group_id, groups.Member(
                    member_id, sorted(set(topic_names)), [], session_timeout_ms, now, now, protocols,
                    rebalance_timeout_ms, None, None, group_instance_id, client_id, client_host))
                member_added(conn, g)
            else:
                groups.update_member(conn, group_id, member_id, topics=sorted(set(topic_names)), protocols=protocols,
                                     session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
                                     last_heartbeat_ms=now)
            # A group that was empty delays its first generation (Kafka's initial rebalance).
            return _rebalance_joining(conn, g, member_id, now, delay_ms, initial=not current)

    def _replace(self, conn: Connection, g: groups.Group, old: groups.Member, member_id: str, *,
                 protocols: list[tuple[str, bytes]], topic_names: list[str], session_timeout_ms: int,
                 rebalance_timeout_ms: int, now: int, client_id: str | None,
                 client_host: str | None) -> Joined | Joining:
        """A static member joins again without its member id (it restarted): `member_id`, a new
        one, takes the place of `old`, the member that held its instance id, keeping its
        generation, its assignment and, if it led the group, the lead; `old` is fenced from now
        on. A Stable group whose member offers the same protocols does not rebalance: the
        answer is the current generation's, and the member's SyncGroup gets the assignment it
        had. Otherwise the group rebalances, as for any join (Kafka's coordinator rebalances a
        CompletingRebalance group too: the leader may be assigning to the old member id)."""
        group_id = g.group_id
        groups.replace_member_id(conn, group_id, old.member_id, member_id)
        # The restarted client's id and address, which may differ from the replaced one's.
        groups.update_member(conn, group_id, member_id, topics=sorted(set(topic_names)), protocols=protocols,
                             session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
                             last_heartbeat_ms=now, client_id=member_client(client_id),
                             client_host=member_client(client_host))
        if g.leader_id == old.member_id:
            groups.update_group(conn, group_id, leader_id=member_id)
        if g.state is StoredGroupState.STABLE and old.protocols == protocols:
            assert g.protocol_type is not None and g.protocol_name is not None and g.leader_id is not None
            # The leader id from before the replacement, as Kafka answers before JoinGroup 9: a
            # replaced leader does not take itself for the leader and assign again (a Stable
            # group would not pass a new assignment on).
            return Joined(member_id, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id, [])
        return _rebalance_joining(conn, g, member_id, now, self.settings.group_initial_rebalance_delay_ms)

    def joined(self, group_id: str, member_id: str, generation_id: int,
               group_instance_id: str | None = None) -> Joined | Joining:
        """Where a member waiting in JoinGroup for `generation_id` stands now; completes the
        rebalance when every member has joined or its deadline has passed. A static member
        replaced while it waited is answered FencedInstanceId."""
        now = self.clock()
        with self.db.read() as conn:
            g = groups.group(conn, group_id)
            members = groups.members(conn, group_id)
            if g is None:
                raise UnknownMemberId(f"{member_id!r} is no longer a member of group {group_id!r}: join again")
            check_current_member(group_id, member_id, group_instance_id, groups.instances(members))
            if not join_completes(g, members, now):
                return _joined_or_joining(conn, group_id, member_id, generation_id)
        with self.db.write() as conn:
            # Not lock_group: a group deleted since the read above is not created again.
            before = groups.generation(conn, group_id, lock=RowLock.UPDATE)
            if before is None:
                raise UnknownMemberId(f"{member_id!r} is no longer a member of group {group_id!r}: join again")
            complete_join(conn, group_id, now, initial_delay_ms=self.settings.group_initial_rebalance_delay_ms)
            return _joined_or_joining(conn, group_id, member_id, generation_id, formed_from=before)

    def sync(self, group_id: str, member_id: str, generation_id: int, *, protocol_type: str | None,
             protocol_name: str | None, assignments: dict[str, tuple[bytes, list[tuple[str, int]]]] | None,
             group_instance_id: str | None = None, waited: bool = False) -> bytes | None:
        """The member's assignment once the leader has given it; None while the group waits for
        the leader (the door asks again, with `waited`). The leader's `assignments`: member id →
        (the bytes for it, the partitions they name, where the door could read them).

        A SyncGroup that waited for the leader's is answered with what the leader gave it even
        if a member has joined again since (the group is rebalancing once more): Kafka's
        coordinator answers its waiting SyncGroups the moment the leader's arrives, before any
        later JoinGroup. Here the waiting request asks again a little later, and a member quick
        to join again in between (a cooperative consumer that gave a partition up) would
        otherwise leave it refused, its assignment for the generation never seen. A SyncGroup
        made once the group is rebalancing is refused, as Kafka refuses it."""
        # Whoever sends them: a follower's are ignored, but a request that carries such an
        # assignment is refused all the same, before it changes anything.
        check_assignments_bytes([(mid, data) for mid, (data, _) in (assignments or {}).items()],
                                self.settings.kafka_group_max_metadata_bytes,
                                self.settings.kafka_group_max_total_metadata_bytes)
        now = self.clock()
        with self.db.write() as conn:
            g, current = _current_member(conn, group_id, member_id, generation_id, lock=RowLock.UPDATE,
                                         protocol_type=protocol_type, group_instance_id=group_instance_id)
            if protocol_name is not None and protocol_name != g.protocol_name:
                raise InconsistentGroupProtocol(f"group {group_id!r} uses protocol {g.protocol_name!r}")
            given_before = current[member_id].member_assignment  # None until the leader's SyncGroup of this generation
            if g.state is StoredGroupState.PREPARING_REBALANCE and not (waited and given_before is not None):
                raise RebalanceInProgress(f"group {group_id!r} is rebalancing: join again")
            groups.update_member(conn, group_id, member_id, last_heartbeat_ms=now)
            if g.state is StoredGroupState.PREPARING_REBALANCE:
                return given_before
            if g.state is StoredGroupState.COMPLETING_REBALANCE and member_id == g.leader_id:
                given = assignments or {}
                for mid in current:
                    data, parts = given.get(mid, (b"", []))
                    groups.update_member(conn, group_id, mid, member_assignment=data, assignment=parts)
                groups.update_group(conn, group_id, state=StoredGroupState.STABLE, updated_ms=now)
                return given.get(member_id, (b"", []))[0]
            if g.state is StoredGroupState.STABLE:
                return current[member_id].member_assignment or b""
            return None

    def heartbeat(self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None = None) -> None:
        now = self.clock()
        with self.db.write() as conn:
            g, _ = _current_member(conn, group_id, member_id, generation_id, lock=RowLock.SHARE, protocol_type=None,
                                   group_instance_id=group_instance_id)
            groups.update_member(conn, group_id, member_id, last_heartbeat_ms=now)
        # Raised once the heartbeat is committed: as in Kafka, a member that heartbeats during a
        # rebalance keeps its session while it finishes its work before joining again (its
        # rebalance timeout, not its session, bounds that); raised inside the transaction, the
        # heartbeat would be rolled back and group expiry would remove a live member.
        if g.state is StoredGroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(f"group {group_id!r} is rebalancing: join again")

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]
              ) -> list[UnknownMemberId | FencedInstanceId | None]:
        """Each of the members `leaving` ((member id, group instance id), as LeaveGroup names
        them) leaves, in order, as Kafka's coordinator takes them: named by its instance id
        alone (no member id), the member that holds it; else the member id, checked against
        the instance id if one is named (check_current_member). Each one's outcome: None (it
        left), UnknownMemberId or FencedInstanceId. The members left start a rebalance of those
        that stay."""
        now = self.clock()
        with self.db.write() as conn:
            # The row locked if there is one, never created (groups.lock_group would): as in
            # Kafka, leaving a group that does not exist is UNKNOWN_MEMBER_ID for each member,
            # and leaves no empty group behind to be listed.
            g = groups.group(conn, group_id, lock=RowLock.UPDATE)
            if g is None:
                return [UnknownMemberId(f"group {group_id!r} does not exist: it has no members") for _ in leaving]
            current = {m.member_id: m for m in groups.members(conn, group_id)}
            if current:
                check_door(conn, group_id, current, protocol_type=g.protocol_type or "")
            outcome: list[UnknownMemberId | FencedInstanceId | None] = []
            left: list[str] = []
            for member_id, group_instance_id in leaving:
                instances = groups.instances(list(current.values()))
                try:
                    if not member_id:
                        member_id = (instance_holder(group_instance_id, instances) if group_instance_id is not None
                                     else None) or ""
                        if not member_id:
                            raise UnknownMemberId(f"no member of group {group_id!r} has group instance id "
                                                  f"{group_instance_id!r}")
                    check_current_member(group_id, member_id, group_instance_id, instances)
                except (UnknownMemberId, FencedInstanceId) as e:
                    outcome.append(e)
                    continue
                del current[member_id]
                left.append(member_id)
                outcome.append(None)
            if left:
                groups.remove_members(conn, group_id, left)
                members_left(conn, group_id, now)
            return outcome


# --- The protocol's own ---------------------------------------------------------------------

def _current_member(conn: Connection, group_id: str, member_id: str, generation_id: int, *, lock: RowLock,
                    protocol_type: str | None, group_instance_id: str | None
                    ) -> tuple[groups.Group, dict[str, groups.Member]]:
    """What SyncGroup and Heartbeat check first: the group (its row read with `lock`) and its
    members, if `member_id` is one of them (and holds `group_instance_id`, if the request
    names one: check_current_member), its group managed by the Kafka door and `generation_id`
    the group's current generation. `protocol_type`: what the request names (SyncGroup from
    version 5), else None; a request that names none is the Kafka door's all the same, so a
    group of the HTTP door's is refused either way."""
    g = groups.group(conn, group_id, lock=lock)
    current = {m.member_id: m for m in groups.members(conn, group_id)} if g is not None else {}
    if g is None:
        raise UnknownMemberId(f"{member_id!r} is not a member of group {group_id!r}; join again")
    check_current_member(group_id, member_id, group_instance_id, groups.instances(list(current.values())))
    check_door(conn, group_id, current, protocol_type=protocol_type or g.protocol_type or "")
    if generation_id != g.generation_id:
        raise IllegalGeneration.of(group_id, generation_id, g.generation_id)
    return g, current


def _rebalance_joining(conn: Connection, g: groups.Group, member_id: str, now: int, initial_delay_ms: int, *,
                       initial: bool = False) -> Joined | Joining:
    """How a join that changes the group ends, whether the member is new, changed or took a
    static member's place: the group rebalances (unless a rebalance is already under way,
    which the member joins), the member is in the generation being formed, and the join phase
    completes if that was the last member it waited for. `initial`: the group was empty, and
    its rebalance is delayed by `initial_delay_ms` (group_membership.prepare_rebalance)."""
    if g.state is not StoredGroupState.PREPARING_REBALANCE:
        prepare_rebalance(conn, g.group_id, now, initial_delay_ms=initial_delay_ms if initial else 0)
    target = g.generation_id + 1
    groups.update_member(conn, g.group_id, member_id, join_generation=target)
    complete_join(conn, g.group_id, now, initial_delay_ms=initial_delay_ms)
    return _joined_or_joining(conn, g.group_id, member_id, target, formed_from=g.generation_id)


def _joined_or_joining(conn: Connection, group_id: str, member_id: str, generation_id: int, *,
                       formed_from: int | None = None) -> Joined | Joining:
    """The member's JoinGroup answer now: Joined once it is in the group's generation, Joining
    while it waits for `generation_id`. `formed_from`: the generation the group was at when this
    transaction locked its row; if the transaction formed a new one, the answer carries the
    other members' (Joined.others)."""
    g = groups.group(conn, group_id)
    members = groups.members(conn, group_id)
    me = next((m for m in members if m.member_id == member_id), None)
    if g is None or me is None:
        raise UnknownMemberId(f"{member_id!r} is no longer a member of group {group_id!r}: join again")
    if me.join_generation == g.generation_id:
        joined = _answer(g, members, member_id)
        if formed_from is None or g.generation_id == formed_from:
            return joined
        return dataclasses.replace(joined, others=tuple(
            _answer(g, members, m.member_id) for m in members
            if m.join_generation == g.generation_id and m.member_id != member_id))
    if me.join_generation != generation_id:
        raise RebalanceInProgress(f"group {group_id!r} is rebalancing again: join again")
    return Joining(member_id, generation_id)


def _joined(conn: Connection, group_id: str, member_id: str) -> Joined:
    g = groups.group(conn, group_id)
    assert g is not None
    return _answer(g, groups.members(conn, group_id), member_id)


def _answer(g: groups.Group, members: list[groups.Member], member_id: str) -> Joined:
    """The JoinGroup answer of a member of the group's current generation: the leader's with
    every member's metadata for the chosen protocol, the others' with none."""
    assert g.protocol_type is not None and g.protocol_name is not None and g.leader_id is not None
    every = ([(m.member_id, m.group_instance_id, m.metadata_for(g.protocol_name))
              for m in members if m.join_generation == g.generation_id] if member_id == g.leader_id else [])
    return Joined(member_id, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id, every)
