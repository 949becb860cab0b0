"""Consumer groups: the HTTP door's membership with generations, describing, listing and
deleting groups, and the expiry of one group's members (expire_group) that requests and group
maintenance both run. Kafka's classic group protocol, the Kafka door's membership, is
app.services.classic_group_protocol; the rules both share are app.services.group_membership;
what the group-expiry worker runs is app.services.group_expiry; a group's offsets outside
transactions, and its lag, are app.services.group_offsets.

The HTTP door's rebalance protocol is Kafka's eager one reduced to what HTTP clients need: Join returns
the member's assignment at once (the service runs the range assignor itself, no group
leader), every membership change bumps the generation, and a member learns of a rebalance
from its next heartbeat. Offset commits that carry group metadata (KIP-447) are refused when
their generation is not the current one, which fences a consumer that lost its partitions.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import Connection

from app import metrics
from app.domain.assignor import range_assign
from app.domain.clock import Clock
from app.domain.errors import (
    GroupIdNotFound,
    InvalidRequest,
    InvalidSessionTimeout,
    NonEmptyGroup,
    UnknownMemberId,
)
from app.domain.group import GROUP_LIST_CHUNK, GROUP_LIST_EXAMINED_MAX, GroupState
from app.domain.ids import check_group_id
from app.services.group_membership import (
    check_door,
    check_size,
    complete_join,
    members_left,
    session_ended,
)
from app.settings import Settings
from app.storage import groups, offsets, topics
from app.storage.engine import Database, after_commit


@dataclass(frozen=True, slots=True)
class GroupPage:
    """One page of GET /v1/groups: the groups, and the id to continue after when the page was
    cut (by its limit, or by the ids one page reads); None when nothing is left."""
    groups: list[groups.GroupListing]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class Membership:
    group_id: str
    member_id: str
    generation_id: int
    assignment: list[tuple[str, int]]
    member_count: int


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A member as every door describes it: the HTTP API and `outbox groups describe` (as_dict),
    and the Kafka door's DescribeGroups."""

    member_id: str
    group_instance_id: str | None  # a static member's (KIP-345); None: a dynamic member
    client_id: str | None  # the client id it joined with over the Kafka door; None over HTTP
    client_host: str | None  # the address it joined from, as the service saw it
    topics: list[str]
    assignment: list[tuple[str, int]]
    session_timeout_ms: int
    last_heartbeat_ms: int
    metadata: bytes  # a Kafka member's metadata for the group's protocol; empty for an HTTP member
    member_assignment: bytes  # a Kafka member's assignment as its leader sent it; empty until then

    def as_dict(self, visible: Callable[[str], bool] = lambda _topic: True) -> dict[str, Any]:
        """Under the HTTP API's names, with the topics the caller may not describe left out."""
        return {"member_id": self.member_id, "topics": [t for t in self.topics if visible(t)],
                "assignment": [{"topic": t, "partition": p} for t, p in self.assignment if visible(t)],
                "session_timeout_ms": self.session_timeout_ms, "last_heartbeat_ms": self.last_heartbeat_ms,
                "client_id": self.client_id, "client_host": self.client_host}


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as every door describes it (GroupService.describe_groups)."""

    group_id: str
    state: GroupState  # DEAD: a group the service does not know; EMPTY: one without members
    generation_id: int | None  # None: the group never had members (offsets only)
    protocol_type: str | None  # None: the HTTP door's group, or one the Kafka door never had
    protocol_name: str | None
    members: list[MemberDescription]

    def as_dict(self, visible: Callable[[str], bool] = lambda _topic: True) -> dict[str, Any]:
        """As GET /v1/groups/{group_id} and `outbox groups describe` show it."""
        return {"group_id": self.group_id, "generation_id": self.generation_id,
                "members": [m.as_dict(visible) for m in self.members]}


def _describe(conn: Connection, group_id: str) -> GroupDescription:
    g = groups.group(conn, group_id)
    if g is None:
        # No group row: a group known only by its offsets (committed, or staged in a transaction)
        # is EMPTY, else DEAD.
        state = GroupState.EMPTY if groups.known(conn, group_id) else GroupState.DEAD
        return GroupDescription(group_id, state, None, None, None, [])
    members = groups.members(conn, group_id)
    state = GroupState(g.state.value) if members else GroupState.EMPTY
    return GroupDescription(
        group_id, state, g.generation_id, g.protocol_type, g.protocol_name,
        [MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.topics, m.assignment,
                           m.session_timeout_ms, m.last_heartbeat_ms, m.metadata_for(g.protocol_name),
                           m.member_assignment or b"")
         for m in members])


def expire_group(conn: Connection, group_id: str, now_ms: int, settings: Settings) -> int:
    """The expiry pass for one group, whose row the caller has locked: removes the members
    whose session has ended (group_membership.session_ended) and rebalances the group, or
    ends a Kafka door's join phase whose deadline has passed. Returns how many members it
    removed. Also run by the requests that answer from whether the group has members
    (DeleteGroups, OffsetDelete, a reset, a commit without a member): Kafka removes a
    member the moment its session ends, and the pass may not have reached the group yet."""
    g = groups.group(conn, group_id)
    assert g is not None
    expired = [m.member_id for m in groups.members(conn, group_id) if session_ended(g, m, now_ms)]
    if expired:
        groups.remove_members(conn, group_id, expired)
        after_commit(conn, partial(metrics.GROUP_MEMBERS_EXPIRED.inc, len(expired)))
    if g.protocol_type is None:
        if expired:
            rebalance(conn, group_id, now_ms)
        return len(expired)
    if expired:
        members_left(conn, group_id, now_ms)
        return len(expired)
    return complete_join(conn, group_id, now_ms, initial_delay_ms=settings.group_initial_rebalance_delay_ms)


def rebalance(conn: Connection, group_id: str, now: int) -> None:
    """The HTTP door's rebalance: the range assignor over the members' topics, a new generation."""
    members = groups.members(conn, group_id)
    names = {t for m in members for t in m.topics}
    counts = {t.name: t.partition_count for t in topics.list_topics(conn) if t.name in names}
    assignment = range_assign({m.member_id: m.topics for m in members}, counts)
    for m in members:
        groups.update_member(conn, group_id, m.member_id, assignment=assignment[m.member_id])
    generation = groups.generation(conn, group_id) or 0
    groups.set_generation(conn, group_id, generation + 1, now)


class GroupService:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock

    # --- membership -------------------------------------------------------------------------

    def join(
        self, group_id: str, *, member_id: str | None, topic_names: list[str], session_timeout_ms: int,
        client_host: str | None = None,
    ) -> Membership:
        """`client_host`: the address of the HTTP client adding a member, which the group's
        describe shows (the HTTP API has no client id: none is stored)."""
        check_group_id(group_id)
        if session_timeout_ms not in self.settings.session_timeout_limit:
            raise InvalidSessionTimeout(f"session_timeout_ms must be in {self.settings.session_timeout_limit}")
        if not topic_names:
            raise InvalidRequest("subscribe to at least one topic")
        subscription = sorted(set(topic_names))
        now = self.clock()
        with self.db.write() as conn:
            topics.get_topics(conn, set(subscription))  # unknown topics are refused
            groups.lock_group(conn, group_id, now)
            current = {m.member_id: m for m in groups.members(conn, group_id)}
            check_door(conn, group_id, current, protocol_type=None)
            if not current:
                # This door takes the group: a Kafka door's emptied group keeps its protocol
                # type until a door takes it (group_membership.complete_join).
                groups.update_group(conn, group_id, protocol_type=None, protocol_name=None, leader_id=None)
            if member_id is not None and member_id not in current:
                raise UnknownMemberId(f"{member_id!r} is not a member of group {group_id!r}; join without member_id")
            if member_id is None:
                check_size(group_id, len(current), self.settings.group_max_size)
            if member_id is not None and current[member_id].topics == subscription:
                groups.update_member(conn, group_id, member_id, last_heartbeat_ms=now)
                return self._membership(conn, group_id, member_id)
            if member_id is None:
                member_id = f"member-{uuid.uuid4().hex}"
                groups.add_member(
                    conn,
                    group_id,
                    groups.Member(member_id, subscription, [], session_timeout_ms, now, now,
                                  client_host=client_host),
                )
            else:
                groups.update_member(
                    conn, group_id, member_id, topics=subscription,
                    session_timeout_ms=session_timeout_ms, last_heartbeat_ms=now,
                )
            rebalance(conn, group_id, now)
            return self._membership(conn, group_id, member_id)

    def heartbeat(self, group_id: str, member_id: str) -> Membership:
        now = self.clock()
        with self.db.write() as conn:
            current = {m.member_id: m for m in groups.members(conn, group_id)}
            if member_id not in current:
                raise UnknownMemberId(f"{member_id!r} is not a member of group {group_id!r}; rejoin")
            check_door(conn, group_id, current, protocol_type=None)
            groups.update_member(conn, group_id, member_id, last_heartbeat_ms=now)
            return self._membership(conn, group_id, member_id)

    def leave(self, group_id: str, member_id: str) -> None:
        now = self.clock()
        with self.db.write() as conn:
            # Leaving a group that does not exist creates nothing.
            exists = groups.lock_existing_group(conn, group_id)
            current = {m.member_id: m for m in groups.members(conn, group_id)} if exists else {}
            if member_id not in current:
                raise UnknownMemberId(f"{member_id!r} is not a member of group {group_id!r}")
            check_door(conn, group_id, current, protocol_type=None)
            groups.remove_members(conn, group_id, [member_id])
            rebalance(conn, group_id, now)

    def describe_groups(self, group_ids: list[str]) -> list[GroupDescription]:
        """Each group as DescribeGroups shows it, in one snapshot: DEAD for one the service
        does not know (groups.known: no row, no offsets committed or pending), EMPTY for one
        without members. A group that only has offsets (committed, or staged by a transactional
        producer, which need not join) is known, so it is described too: no generation and no
        members, as Kafka describes such a group as Empty."""
        with self.db.read() as conn:
            return [_describe(conn, group_id) for group_id in group_ids]

    def describe_group(self, group_id: str) -> GroupDescription:
        """The group as the HTTP API and the CLI describe it: GROUP_ID_NOT_FOUND for one the
        service does not know."""
        (described,) = self.describe_groups([group_id])
        if described.state is GroupState.DEAD:
            raise GroupIdNotFound(f"no consumer group {group_id!r}")
        return described

    def list_page(self, limit: int, after: str | None = None,
                  describable: Callable[[str], bool] | None = None, *,
                  states: Collection[GroupState] | None = None, bounded: bool = True) -> GroupPage:
        """Up to `limit` groups in one of `states` (any when None) that the caller may describe
        (`describable`; every one when None), in id order after `after`. The ids are read a chunk
        at a time and filtered per chunk: a filter applied to one capped read let groups the
        caller may not see take every place. `bounded`: at most GROUP_LIST_EXAMINED_MAX ids
        are read a page, so that a caller who may describe few groups among many costs a
        bounded read, not the whole table; not bounded: the Kafka door's ListGroups, which
        cannot page and walks every id. A page cut by either bound says where to continue
        (next_after)."""
        found: list[groups.GroupListing] = []
        examined, last = 0, after
        examined_max = GROUP_LIST_EXAMINED_MAX if bounded else None
        with self.db.read() as conn:
            while examined_max is None or examined < examined_max:
                asked = GROUP_LIST_CHUNK if examined_max is None else min(GROUP_LIST_CHUNK, examined_max - examined)
                chunk = groups.list_groups(conn, after=last, limit=asked)
                for g in chunk:
                    examined, last = examined + 1, g.group_id
                    # The state first: a group filtered out by it takes no place under `limit`.
                    if states is not None and g.state not in states:
                        continue
                    if describable is None or describable(g.group_id):
                        found.append(g)
                        if len(found) == limit:
                            return GroupPage(found, g.group_id)
                if len(chunk) < asked:
                    return GroupPage(found, None)
        return GroupPage(found, last)

    def delete(self, group_id: str) -> None:
        """Kafka's DeleteGroups: an empty group's row and committed offsets (its lag goes
        with them). GROUP_ID_NOT_FOUND for a group the service does not know (groups.known),
        NON_EMPTY_GROUP while it has members, or while an unfinished transaction has staged
        offsets for it: that transaction's commit would bring the group back."""
        with self.db.write() as conn:
            if not groups.known(conn, group_id):
                raise GroupIdNotFound(f"no consumer group {group_id!r}")
            # Its row locked, as a join locks it (created for a group that only has offsets,
            # and deleted below): no member joins between the check and the delete. One try
            # only: no row after it means a concurrent DeleteGroups deleted the group while
            # this waited, and this one, the loser, finds no group.
            now = self.clock()
            if groups.lock_group_row(conn, group_id, now) is None:
                raise GroupIdNotFound(f"no consumer group {group_id!r}")
            # Members whose session has ended are gone, as in Kafka, though group expiry has
            # not removed them yet: without this, a group whose consumers stopped without
            # leaving is NON_EMPTY_GROUP until the pass reaches it.
            expire_group(conn, group_id, now, self.settings)
            members = groups.members(conn, group_id)
            if members:
                raise NonEmptyGroup(f"group {group_id!r} has {len(members)} member(s): a group is deleted "
                                    "once it has none")
            if offsets.pending_partitions(conn, group_id, None):
                raise NonEmptyGroup(f"an unfinished transaction has staged offsets for group {group_id!r}")
            groups.delete_group(conn, group_id)

    @staticmethod
    def _membership(conn: Connection, group_id: str, member_id: str) -> Membership:
        members = groups.members(conn, group_id)
        me = next(m for m in members if m.member_id == member_id)
        return Membership(
            group_id, member_id, groups.generation(conn, group_id) or 0, me.assignment, len(members)
        )
