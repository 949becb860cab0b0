"""Kafka's classic consumer group protocol over the Kafka door: JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, DescribeGroups, ListGroups and DeleteGroups, on the engine's groups
(membership: app.services.classic_group_protocol; listing and deletion:
app.services.group_service): one generation, one set of members and one set of committed
offsets per group, whichever door it is used through. The offsets' APIs (OffsetCommit,
OffsetFetch, OffsetDelete) are app.kafka.group_offsets'.

The rebalance is in the database; only the waiting is here: a JoinGroup waits for the other
members to join (the barrier), a follower's SyncGroup for the leader's assignment. A waiting
request asks the service again when a request of this process has changed a group, else after
WAIT_POLL_S, then twice as long each time nothing here changed, up to WAIT_POLL_MAX_S: a
rebalance completed by another `serve` process, or by its deadline, is seen within
WAIT_POLL_MAX_S. What waits is bounded: each connection has one request in flight
(OUTBOX_KAFKA_MAX_CONNECTIONS of them), a JoinGroup at most until its rebalance deadline (the
members' rebalance timeouts, or a new group's initial rebalance delay, each at most
OUTBOX_GROUP_MAX_SESSION_TIMEOUT_MS), a SyncGroup at most OUTBOX_GROUP_MAX_SESSION_TIMEOUT_MS;
a JoinGroup whose client has gone stops waiting (`_joined`)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from app.domain import acl
from app.domain.acl import Operation
from app.domain.errors import (GroupMetadataTooLarge, InvalidRequest, MemberIdRequired, OutboxError,
                               RebalanceInProgress)
from app.domain.group import CONSUMER_PROTOCOL, GroupState, check_assignments_bytes, check_protocols_bytes
from app.kafka.api_keys import ApiKey
from app.kafka.auth import NOT_REQUESTED, access, authorized_operations, refusal_code
from app.kafka.errors import coordinator_error_code
from app.kafka.protocol import NO_WAIT, ClientGone, build, client_gone, client_host, client_id, response_module
from app.logs import RateLimitedLog


logger = logging.getLogger("app.kafka")

# What each of them requires of the principal is app.kafka.auth.RULES'.

WAIT_POLL_S = 0.1
# Each ask of a waiting request reads its group and every member with its protocol metadata:
# at WAIT_POLL_S throughout, 100 JoinGroups waiting out a quiet member's session took 93 % of a
# core and 290 database transactions a second, for up to OUTBOX_GROUP_MAX_SESSION_TIMEOUT_MS.
WAIT_POLL_MAX_S = 1.0
_MS = datetime.timedelta(milliseconds=1)
# The most groups one ListGroups answers, which has no paging: ten times an HTTP page's
# largest, as ListTransactions' cap. More matching is logged.
LIST_GROUPS_MAX = 100_000


class _Waiting:
    """A JoinGroup of this process waiting at the barrier for `generation_id` (GroupApis._joined),
    one object a request, told apart from another request of the same member by identity."""

    __slots__ = ("generation_id",)

    def __init__(self, generation_id: int) -> None:
        self.generation_id = generation_id


class GroupApis:
    def __init__(self, services: Any) -> None:
        self.groups = services.groups
        self.protocol = services.classic_group_protocol
        self.settings = services.settings
        # A client may repeat a refused JoinGroup as fast as it likes: one line a while, the
        # others counted (`_too_large`).
        self._warn_of_too_large = RateLimitedLog(logger)
        # How many times a request of this process changed a group (`_notify`), and the event
        # the next change sets. A waiting request notes the count before it asks the service and
        # waits only if it is unchanged when the answer comes: a change made while it asked
        # (another member's JoinGroup completing the rebalance) would otherwise set an event it
        # no longer waits on, and it would sleep out WAIT_POLL_S, where Kafka's coordinator
        # answers every waiting request at once.
        self._changes = 0
        self._changed = asyncio.Event()
        # The JoinGroups of this process waiting at the barrier, by (group id, member id), each
        # with the generation it waits for, and the answers handed to them by the request that
        # formed that generation (Joined.others): such a request is answered from here the
        # moment it is woken, as Kafka's coordinator answers every member when the join phase
        # ends, not after asking the service once more. The follower would otherwise learn the
        # generation a database read later than the leader, which syncs, gives a partition up
        # and joins again at once (a cooperative consumer): where that JoinGroup came first,
        # the follower's SyncGroup was refused and it never saw its assignment of the generation.
        # Only answers for requests waiting here are kept, each until its request ends. A
        # request ends only its own registration: a member whose connection dropped joins again
        # on a new one while its first request may still be waiting (until it sees its client
        # gone), and that one's end must not take the new request's place or handed answer.
        self._joining: dict[tuple[str, str], _Waiting] = {}
        self._formed: dict[tuple[str, str], Any] = {}
        # Each group's turn (`_in_turn`) and how many requests hold or wait for it.
        self._turns: dict[str, tuple[asyncio.Lock, int]] = {}
        # (group id, member id) -> when it expires (ms, the services' clock): the member ids
        # handed out with MEMBER_ID_REQUIRED (KIP-394) and not yet joined with. Only here: a
        # client joins again at once on the same connection, so on this process; one that does
        # not holds nothing in the database, and its id expires after its session timeout.
        # At most OUTBOX_KAFKA_MAX_CONNECTIONS of them (the oldest goes first): a connection has
        # one request in flight, so a client that rejoins at once never finds its id gone.
        self._handed_out: OrderedDict[tuple[str, str], int] = OrderedDict()

    async def _in_turn(self, group_id: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`call` in a worker thread, in the group's turn: the JoinGroups, SyncGroups, Heartbeats
        and LeaveGroups of one group reach the service one at a time, in the order they came
        (an asyncio.Lock is handed to its waiters in order). In worker threads of their own they
        could reach the group's row lock in another order: seen with the access log, a
        follower's SyncGroup that came 2.4 ms before the leader's next JoinGroup was refused
        REBALANCE_IN_PROGRESS after it, its assignment of the generation never seen (0113
        b_subscribe_with_cb_test). Asks of a waiting JoinGroup (`_joined`) take no turn: they
        only read, unless the deadline has passed, and a large group's waiting members would
        otherwise queue behind each other every WAIT_POLL_S."""
        turn, users = self._turns[group_id] if group_id in self._turns else (asyncio.Lock(), 0)
        self._turns[group_id] = (turn, users + 1)
        try:
            async with turn:
                return await asyncio.to_thread(call, *args, **kwargs)
        finally:
            turn, users = self._turns[group_id]
            if users == 1:
                del self._turns[group_id]  # no request of the group waits: nothing kept
            else:
                self._turns[group_id] = (turn, users - 1)

    def _notify(self) -> None:
        """Wakes the requests of this process waiting on a group: one may now be answered."""
        self._changes += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self, seen: int, poll_s: float, *, unless_gone: bool = False) -> float:
        """Until a request of this process changes a group, at most `poll_s`; at once if one
        has since the waiting request noted `seen` (`_changes` before it last asked). The wait
        after this one: WAIT_POLL_S if a change ended it, else twice `poll_s`, at most
        WAIT_POLL_MAX_S. `unless_gone`: ClientGone instead if the request's client has gone by
        then."""
        if self._changes == seen:
            try:
                await asyncio.wait_for(self._changed.wait(), poll_s)
            except TimeoutError:
                pass
        if unless_gone and client_gone():
            raise ClientGone("the client of a waiting request has gone")
        return WAIT_POLL_S if self._changes != seen else min(2 * poll_s, WAIT_POLL_MAX_S)

    # --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ---------------------------------------

    async def join_group(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.JOIN_GROUP, version)
        assert m is not None

        def answer(code: ErrorCode, joined: Any = None, member_id: str | None = None) -> Any:
            members = () if joined is None else tuple(
                build(m.JoinGroupResponseMember, member_id=mid, group_instance_id=iid, metadata=data)
                for mid, iid, data in joined.members)
            return build(m.JoinGroupResponse, throttle_time=NO_WAIT, error_code=code,
                         generation_id=-1 if joined is None else joined.generation_id,
                         protocol_type=None if joined is None else joined.protocol_type,
                         # Nullable from version 7 on; an empty name before it, as Kafka answers.
                         protocol_name=(None if version >= 7 else "") if joined is None else joined.protocol_name,
                         leader="" if joined is None else joined.leader_id,
                         member_id=(member_id or body.member_id) if joined is None else joined.member_id,
                         members=members)

        if (refused := refusal_code(Operation.READ, acl.group(body.group_id))) is not None:
            return answer(refused)
        protocols = [(p.name, bytes(p.metadata)) for p in body.protocols]
        try:
            # Before the subscription is read from the metadata; the service checks it again.
            check_protocols_bytes(protocols, self.settings.kafka_group_max_metadata_bytes)
        except GroupMetadataTooLarge as e:
            _too_large(self._warn_of_too_large, "JoinGroup", body.group_id, e)
            return answer(coordinator_error_code(e))
        rebalance = getattr(body, "rebalance_timeout", None)
        session_timeout_ms = body.session_timeout // _MS
        # From version 5 (KIP-345); an older request has no field for it.
        instance_id = getattr(body, "group_instance_id", None)
        try:
            try:
                seen = self._changes
                got = await self._in_turn(
                    body.group_id, self.protocol.join, body.group_id, member_id=body.member_id, client_id=client_id(),
                    protocol_type=body.protocol_type,
                    protocols=protocols, topic_names=_subscribed(body.protocol_type, protocols),
                    session_timeout_ms=session_timeout_ms,
                    rebalance_timeout_ms=-1 if rebalance is None else rebalance // _MS,
                    # KIP-394: from version 4 a new member first asks for its id.
                    require_member_id=version >= 4 and not body.member_id,
                    handed_out=self._take_handed_out(body.group_id, body.member_id), group_instance_id=instance_id,
                    client_host=client_host())
            except MemberIdRequired as e:
                self._hand_out(body.group_id, e.details["member_id"], session_timeout_ms)
                return answer(coordinator_error_code(e), member_id=e.details["member_id"])
            except GroupMetadataTooLarge as e:
                # The group's total only the service can check, under the group's lock.
                _too_large(self._warn_of_too_large, "JoinGroup", body.group_id, e)
                return answer(coordinator_error_code(e))
            self._hand_over(body.group_id, got)
            self._notify()
            seen += 1  # its own change: nothing this request has not seen
            if not hasattr(got, "leader_id"):
                got = await self._joined(body.group_id, got, instance_id, seen)
            self._notify()
        except OutboxError as e:
            return answer(coordinator_error_code(e))
        return answer(ErrorCode.none, got)

    async def _joined(self, group_id: str, joining: Any, instance_id: str | None, seen: int) -> Any:
        """The answer of a JoinGroup waiting at the barrier (`joining`, ClassicGroupProtocol.Joining):
        handed over by the request that formed its generation, else asked of the service each
        time this process changes a group, or its wait has passed (`_wait`)."""
        key = (group_id, joining.member_id)
        mine = self._joining[key] = _Waiting(joining.generation_id)
        try:
            got = joining
            poll_s = WAIT_POLL_S
            while not hasattr(got, "leader_id"):
                # A client that has gone stops the wait: its asks only read what others do
                # until the deadline, and the join phase ends without them all the same, by
                # another waiter's ask, the group's next JoinGroup or the expiry pass
                # (GroupExpiry.expire_members). Its member stays, as Kafka keeps a vanished
                # client's join: the phase ends with it as if it had waited on.
                poll_s = await self._wait(seen, poll_s, unless_gone=True)
                if self._joining.get(key) is mine and (handed := self._formed.pop(key, None)) is not None:
                    return handed
                seen = self._changes
                got = await asyncio.to_thread(self.protocol.joined, group_id, joining.member_id,
                                              joining.generation_id, instance_id)
                self._hand_over(group_id, got)
            return got
        finally:
            if self._joining.get(key) is mine:
                del self._joining[key]
                self._formed.pop(key, None)

    def _hand_over(self, group_id: str, got: Any) -> None:
        """The answers a request that formed a generation carries (Joined.others) to the
        requests of this process waiting for that generation (`_joined`); the caller then wakes
        them (`_notify`)."""
        for other in getattr(got, "others", ()):
            key = (group_id, other.member_id)
            waiting = self._joining.get(key)
            if waiting is not None and waiting.generation_id == other.generation_id:
                self._formed[key] = other

    def _hand_out(self, group_id: str, member_id: str, session_timeout_ms: int) -> None:
        now = self.protocol.clock()
        for key, expires in list(self._handed_out.items()):
            if expires <= now:
                del self._handed_out[key]
        while len(self._handed_out) >= self.settings.kafka_max_connections:
            self._handed_out.popitem(last=False)
        self._handed_out[(group_id, member_id)] = now + session_timeout_ms

    def _take_handed_out(self, group_id: str, member_id: str) -> bool:
        """Whether `member_id` was handed out for `group_id` and has not expired; it is used up
        either way (a member that joins with it is one from then on)."""
        expires = self._handed_out.pop((group_id, member_id), None) if member_id else None
        return expires is not None and self.protocol.clock() < expires

    async def sync_group(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.SYNC_GROUP, version)
        assert m is not None
        protocol_type = getattr(body, "protocol_type", None)
        protocol_name = getattr(body, "protocol_name", None)

        def answer(code: ErrorCode, assignment: bytes = b"") -> Any:
            return build(m.SyncGroupResponse, throttle_time=NO_WAIT, error_code=code, protocol_type=protocol_type,
                         protocol_name=protocol_name, assignment=assignment)

        if (refused := refusal_code(Operation.READ, acl.group(body.group_id))) is not None:
            return answer(refused)
        try:
            # Before the assignments are read into partitions (four bytes each, a tuple each in
            # memory); the service checks them again.
            check_assignments_bytes([(a.member_id, a.assignment) for a in body.assignments],
                                    self.settings.kafka_group_max_metadata_bytes,
                                    self.settings.kafka_group_max_total_metadata_bytes)
        except GroupMetadataTooLarge as e:
            _too_large(self._warn_of_too_large, "SyncGroup", body.group_id, e)
            return answer(coordinator_error_code(e))
        assignments = {a.member_id: (bytes(a.assignment), _assigned(protocol_type, bytes(a.assignment)))
                       for a in body.assignments}
        deadline = time.monotonic() + self.settings.group_max_session_timeout_ms / 1000
        try:
            if len(assignments) != len(body.assignments):
                raise InvalidRequest("an assignment names each member once")
            given: dict[str, tuple[bytes, list[tuple[str, int]]]] | None = assignments or None
            waited = False
            poll_s = WAIT_POLL_S
            while True:
                seen = self._changes
                got = await self._in_turn(body.group_id, self.protocol.sync, body.group_id, body.member_id,
                                          body.generation_id, protocol_type=protocol_type,
                                          protocol_name=protocol_name, assignments=given,
                                          group_instance_id=getattr(body, "group_instance_id", None),
                                          waited=waited)
                if got is not None:
                    break
                waited = True
                if time.monotonic() >= deadline:
                    raise RebalanceInProgress(f"the leader of group {body.group_id!r} gave no assignment in time")
                poll_s = await self._wait(seen, poll_s)
            self._notify()
        except GroupMetadataTooLarge as e:  # the service's own check (the same bounds: tests give it lower ones)
            _too_large(self._warn_of_too_large, "SyncGroup", body.group_id, e)
            return answer(coordinator_error_code(e))
        except OutboxError as e:
            return answer(coordinator_error_code(e))
        return answer(ErrorCode.none, got)

    async def heartbeat(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.HEARTBEAT, version)
        assert m is not None
        if (refused := refusal_code(Operation.READ, acl.group(body.group_id))) is not None:
            return build(m.HeartbeatResponse, throttle_time=NO_WAIT, error_code=refused)
        code = ErrorCode.none
        try:
            await self._in_turn(body.group_id, self.protocol.heartbeat, body.group_id, body.member_id,
                                body.generation_id, getattr(body, "group_instance_id", None))
        except OutboxError as e:
            code = coordinator_error_code(e)
        return build(m.HeartbeatResponse, throttle_time=NO_WAIT, error_code=code)

    async def leave_group(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.LEAVE_GROUP, version)
        assert m is not None
        # Versions 0 to 2 name one member; 3 and later a batch of them, each by its member id, its
        # group instance id or both (KIP-345).
        leaving = ([(body.member_id, None)] if version < 3
                   else [(i.member_id, i.group_instance_id) for i in body.members])
        if (refused := refusal_code(Operation.READ, acl.group(body.group_id))) is not None:
            return build(m.LeaveGroupResponse, throttle_time=NO_WAIT, error_code=refused, members=())
        try:
            outcome = await self._in_turn(body.group_id, self.protocol.leave, body.group_id, leaving)
            self._notify()
        except OutboxError as e:
            return build(m.LeaveGroupResponse, throttle_time=NO_WAIT, error_code=coordinator_error_code(e), members=())
        codes = [ErrorCode.none if e is None else coordinator_error_code(e) for e in outcome]
        if version < 3:
            return build(m.LeaveGroupResponse, throttle_time=NO_WAIT, error_code=codes[0])
        return build(m.LeaveGroupResponse, throttle_time=NO_WAIT, error_code=ErrorCode.none, members=tuple(
            build(m.MemberResponse, member_id=mid, group_instance_id=iid, error_code=code)
            for (mid, iid), code in zip(leaving, codes)))

    # --- DeleteGroups (the administration of groups; OffsetDelete: app.kafka.group_offsets) -

    def delete_groups(self, body: Any, version: int) -> Any:
        """Each group on its own, through GroupService.delete: an empty group is deleted with
        its offsets; NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND for none."""
        m = response_module(ApiKey.DELETE_GROUPS, version)
        assert m is not None
        results = []
        for g in body.groups_names:
            code = refusal_code(Operation.DELETE, acl.group(g))
            if code is None:
                try:
                    self.groups.delete(g)
                    code = ErrorCode.none
                except OutboxError as e:
                    code = coordinator_error_code(e)
            results.append(build(m.DeletableGroupResult, group_id=g, error_code=code))
        return build(m.DeleteGroupsResponse, throttle_time=NO_WAIT, results=tuple(results))

    # --- DescribeGroups, ListGroups --------------------------------------------------------

    def describe_groups(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.DESCRIBE_GROUPS, version)
        assert m is not None
        # KIP-430 (version 3 on): each group described carries the operations the principal may
        # do on it when asked; a refused group never does, as in Kafka.
        requested = getattr(body, "include_authorized_operations", False)
        codes = [(g, refusal_code(Operation.DESCRIBE, acl.group(g))) for g in body.groups]
        described = [build(m.DescribedGroup, error_code=code, group_id=g, group_state="", protocol_type="",
                           protocol_data="", members=(), authorized_operations=NOT_REQUESTED)
                     for g, code in codes if code is not None]
        allowed = [g for g, code in codes if code is None]
        for d in self.groups.describe_groups(allowed):
            members = tuple(
                # Kafka's client host is the address as Java prints it, "/127.0.0.1".
                build(m.DescribedGroupMember, member_id=mm.member_id, group_instance_id=mm.group_instance_id,
                      client_id=mm.client_id or "", client_host=f"/{mm.client_host}" if mm.client_host else "",
                      member_metadata=mm.metadata, member_assignment=mm.member_assignment)
                for mm in d.members)
            described.append(build(m.DescribedGroup, error_code=ErrorCode.none, group_id=d.group_id,
                                   group_state=d.state.value, protocol_type=d.protocol_type or "",
                                   protocol_data=d.protocol_name or "", members=members,
                                   authorized_operations=authorized_operations(acl.group(d.group_id), requested)))
        return build(m.DescribeGroupsResponse, throttle_time=NO_WAIT, groups=tuple(described))

    def list_groups(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.LIST_GROUPS, version)
        assert m is not None
        # KIP-518 (version 4 on): Kafka matches the states filter case-insensitively; a name
        # that is no state matches no group.
        asked = {s.lower() for s in getattr(body, "states_filter", ())}
        states = {s for s in GroupState if s.value.lower() in asked} if asked else None
        listed: list[Any] = []
        if states is None or states:
            door = access()
            security, principal = door.state, door.principal
            # DESCRIBE on the cluster lists every group; otherwise those the principal may
            # describe. The ACL decision itself, not door.allows: that records each check for
            # the rules (ListGroups needs none), a set as large as the table once every id is
            # walked.
            every = door.allows(Operation.DESCRIBE, acl.CLUSTER)
            describable = None if every or security is None else (
                lambda g: security.is_allowed(principal, Operation.DESCRIBE, acl.group(g)))
            # Every id is walked (ListGroups has no paging to continue with): the states filter
            # and the ACLs per chunk, so that neither groups in other states nor another
            # principal's can push a match out. Only the matches are capped, for the answer's
            # memory; one more is asked for to tell whether any were left out.
            listed = self.groups.list_page(LIST_GROUPS_MAX + 1, None, describable, states=states,
                                           bounded=False).groups
            if len(listed) > LIST_GROUPS_MAX:
                listed = listed[:LIST_GROUPS_MAX]
                logger.warning("ListGroups answered the first %d matching group ids, up to %r; more match: "
                               "narrow it with a states filter, or list them with GET /v1/groups (which pages)",
                               LIST_GROUPS_MAX, listed[-1].group_id)
        return build(m.ListGroupsResponse, throttle_time=NO_WAIT, error_code=ErrorCode.none, groups=tuple(
            build(m.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state.value)
            for g in listed))


def _too_large(warn: RateLimitedLog, api: str, group_id: str, e: GroupMetadataTooLarge) -> None:
    """A WARNING for a group request refused for its bytes, naming who sent it: a client that
    sends such metadata is misconfigured or hostile, and its answer alone (INVALID_REQUEST, which
    its client may report as a fatal error far from the cause) tells the operator nothing. The
    message gives sizes, never the bytes."""
    # The group id cut as the id rule would (255 characters): it has not been checked yet.
    warn("Kafka listener: %s of group %.257r from %s refused: %s", api, group_id, access().principal, e.message)


def _subscribed(protocol_type: str, protocols: list[tuple[str, bytes]]) -> list[str]:
    """The topics a consumer subscribes to, from its first protocol's metadata (every protocol
    of a consumer carries the same subscription); none for another protocol type, or metadata
    that is not a ConsumerProtocolSubscription (Kafka takes the bytes as they are)."""
    if protocol_type != CONSUMER_PROTOCOL or not protocols:
        return []
    try:
        reader = _Reader(protocols[0][1])
        reader.int16()  # version
        return [reader.string() for _ in range(reader.int32())]
    except (struct.error, UnicodeDecodeError, ValueError):
        return []


def _assigned(protocol_type: str | None, assignment: bytes) -> list[tuple[str, int]]:
    """The partitions a ConsumerProtocolAssignment names (none where it is not one)."""
    if protocol_type not in (CONSUMER_PROTOCOL, None) or not assignment:
        return []
    try:
        reader = _Reader(assignment)
        reader.int16()  # version
        out = []
        for _ in range(reader.int32()):
            topic = reader.string()
            out.extend((topic, reader.partition()) for _ in range(reader.int32()))
        return sorted(out)
    except (struct.error, UnicodeDecodeError, ValueError):
        return []


class _Reader:
    """Kafka's non-flexible encoding, the one the consumer protocol's structures use."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def _take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        n = self._take(">i")
        if n < -1 or n > len(self.data):
            raise ValueError(f"a count of {n} in {len(self.data)} bytes")
        return n

    def partition(self) -> int:
        return self._take(">i")

    def string(self) -> str:
        n = self.int16()
        if n < 0 or self.at + n > len(self.data):
            raise ValueError("a string beyond the bytes")
        text = self.data[self.at:self.at + n].decode()
        self.at += n
        return text
