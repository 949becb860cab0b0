"""A consumer group's rebalance as Kafka's classic protocol runs it (the Kafka door's groups),
beside the HTTP door's, whose members get their assignment at once (app.services.group_service).

One group has one generation, one set of members and one set of committed offsets, whichever
door manages it; a group is managed by the door of its members (`protocol_type`: None for the
HTTP door's, Kafka's protocol type, "consumer" for consumers, for the Kafka door's). A group
with no members belongs to neither, so either door may take it; an emptied Kafka door's group
keeps its protocol type until a door takes it, as Kafka keeps it until the group is deleted
(ListGroups and DescribeGroups show it).
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Mapping, Sequence

from app.domain.errors import FencedInstanceId, GroupMetadataTooLarge, InvalidRequest, UnknownMemberId


# Kafka's protocol type of consumers: their protocol metadata is a ConsumerProtocolSubscription
# and their assignments ConsumerProtocolAssignments, which the Kafka door reads for the engine's
# view of the group (the topics it consumes, for its lag and OffsetDelete; the partitions each
# member holds).
CONSUMER_PROTOCOL = "consumer"

# GET /v1/groups, a page at a time (`limit`, default and most), as the transaction lists: the
# ids are read GROUP_LIST_CHUNK at a time past the caller's ACLs, and at most
# GROUP_LIST_EXAMINED_MAX a page, the work one request may cost however few the caller sees.
GROUP_LIST_DEFAULT = 1000
GROUP_LIST_MAX = 10_000
GROUP_LIST_CHUNK = 1000
GROUP_LIST_EXAMINED_MAX = 100_000


class GroupState(str, enum.Enum):
    """Kafka's classic group states, as DescribeGroups and ListGroups name them. `Empty` is not
    stored: it is a group without members. The HTTP door's groups are always `Stable` (their
    rebalance is done within the join that starts it)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"  # waiting for every member to join again
    COMPLETING_REBALANCE = "CompletingRebalance"  # waiting for the leader's assignment (SyncGroup)
    STABLE = "Stable"
    DEAD = "Dead"  # a group the service does not know: DescribeGroups answers it so, as Kafka does


class StoredGroupState(str, enum.Enum):
    """GroupState without Empty: what `consumer_groups.state` holds (a CHECK from this enum)."""

    PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE.value
    COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE.value
    STABLE = GroupState.STABLE.value


def select_protocol(member_protocols: Sequence[Sequence[str]]) -> str | None:
    """The protocol (assignor) every member supports, chosen as Kafka's coordinator does: each
    member votes for the first one in its own order of preference that all support, and the most
    voted wins (ties to the first member's preference). None: the members share none."""
    if not member_protocols:
        return None
    common = set(member_protocols[0]).intersection(*map(set, member_protocols[1:]))
    if not common:
        return None
    votes: dict[str, int] = {}
    for protocols in member_protocols:
        choice = next(p for p in protocols if p in common)
        votes[choice] = votes.get(choice, 0) + 1
    first = [p for p in member_protocols[0] if p in common]
    return max(first, key=lambda p: (votes.get(p, 0), -first.index(p)))


# A member id is at most 255 characters (the stored column, and the HTTP door's ids): the
# client id's part leaves room for the UUID (36) and the dash.
MEMBER_ID_CLIENT_PART_MAX_LENGTH = 255 - 37
# Characters no id may hold (the HTTP door's id pattern): control characters and the slash,
# which would make the member id unusable in the HTTP door's paths and bodies.
_NOT_IN_IDS = re.compile(r"[/\x00-\x1f\x7f]")


def new_member_id(client_id: str | None) -> str:
    """A new Kafka door member's id as Kafka makes it, `client.id-UUID`: the range and
    roundrobin assignors order members by id, so clients expect the order of their client ids.
    A client id that is empty (or holds nothing an id may) gives `member-UUID`."""
    prefix = _NOT_IN_IDS.sub("", client_id or "")[:MEMBER_ID_CLIENT_PART_MAX_LENGTH] or "member"
    return f"{prefix}-{uuid.uuid4()}"


# What DescribeGroups shows of a member besides its ids: the client id of the request that
# added it and the address it joined from (group_members.client_id, client_host; migration
# 0021). Kafka's client id is a string of up to 32767 bytes; the stored columns hold 255
# characters, and a longer one is kept cut to its first 255 rather than refused: it is only
# shown, Kafka takes any client id, and a consumer must not fail to join for it.
MEMBER_CLIENT_MAX_LENGTH = 255


def member_client(value: str | None) -> str | None:
    """A client id or host as stored: at most MEMBER_CLIENT_MAX_LENGTH characters, None for
    none (or an empty one)."""
    return value[:MEMBER_CLIENT_MAX_LENGTH] if value else None


# --- Static membership (KIP-345) ------------------------------------------------------------
# A member that joins with a group instance id is static: the instance id, not the member id,
# names it across restarts. One member id holds an instance id at a time; a JoinGroup with the
# instance id and no member id gives a new member id that takes the holder's place (its
# generation and assignment), and the replaced member id is fenced (FENCED_INSTANCE_ID) in
# every request that names the instance id with it.

# The longest instance id Kafka's clients accept (JoinGroupRequest.validateGroupInstanceId).
GROUP_INSTANCE_ID_MAX_LENGTH = 249


def check_group_instance_id(group_instance_id: str | None) -> None:
    """None (a dynamic member) or a name of 1 to GROUP_INSTANCE_ID_MAX_LENGTH characters."""
    if group_instance_id is not None and not 0 < len(group_instance_id) <= GROUP_INSTANCE_ID_MAX_LENGTH:
        raise InvalidRequest(f"group_instance_id must be 1 to {GROUP_INSTANCE_ID_MAX_LENGTH} characters, "
                             "or null for a dynamic member")


def instance_holder(group_instance_id: str, instances: Mapping[str, str | None]) -> str | None:
    """The member id that holds `group_instance_id`, of the group's members (`instances`: each
    member's instance id by member id); None: no member holds it."""
    return next((mid for mid, iid in instances.items() if iid == group_instance_id), None)


def check_current_member(group_id: str, member_id: str, group_instance_id: str | None,
                         instances: Mapping[str, str | None]) -> None:
    """Whether a request of a current member may go on, as Kafka's coordinator decides it
    (validateCurrentMember) for SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit
    and a JoinGroup with a member id: with an instance id, the member id must be the one that
    holds it (FENCED_INSTANCE_ID when another does, UNKNOWN_MEMBER_ID when none does); without,
    the member id must be a member's. `instances`: each member's instance id by member id."""
    if group_instance_id is not None:
        holder = instance_holder(group_instance_id, instances)
        if holder is None:
            raise UnknownMemberId(f"no member of group {group_id!r} has group instance id {group_instance_id!r}; "
                                  "join without member_id")
        if holder != member_id:
            raise FencedInstanceId(f"{member_id!r} was replaced in group {group_id!r} by a newer member with "
                                   f"group instance id {group_instance_id!r}")
    elif member_id not in instances:
        raise UnknownMemberId(f"{member_id!r} is not a member of group {group_id!r}; join again")


def protocols_bytes(protocols: Sequence[tuple[str, bytes]] | None) -> int:
    """The bytes a member's protocols hold, their names and metadata together: what both
    bounds of a group's protocols count (none for the HTTP door's members, which have none)."""
    return sum(len(name.encode()) + len(metadata) for name, metadata in protocols or ())


def check_protocols_bytes(protocols: Sequence[tuple[str, bytes]], bound: int) -> None:
    """GroupMetadataTooLarge if a member's protocols, their names and metadata together, hold
    more than `bound` bytes (OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES): the member is stored with
    them, and every DescribeGroups and every leader is sent them. The message gives sizes,
    never the bytes."""
    size = protocols_bytes(protocols)
    if size > bound:
        raise GroupMetadataTooLarge(f"the member's protocols hold {size} bytes, more than the {bound} "
                                    "OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES allows")


def check_group_protocols_bytes(protocols: Sequence[tuple[str, bytes]], member_id: str,
                                stored: Mapping[str, Sequence[tuple[str, bytes]] | None], bound: int) -> None:
    """GroupMetadataTooLarge if the group's members' protocols would hold more than `bound`
    bytes together (OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES) once `member_id` holds
    `protocols`: `stored`, each member's protocols by member id, as the group's row lock held
    by the caller keeps them; `member_id` one of them (a rejoin, or the member a static
    member's replacement takes the place of: its own are replaced, not added to) or not (a new
    member, or ""). A join that adds no bytes is taken: a group over a bound lowered since it
    grew (a restart) keeps its members joining again, and only a join that grows it is
    refused. The message gives sizes, never the bytes."""
    own = protocols_bytes(stored.get(member_id))
    size = protocols_bytes(protocols)
    total = sum(protocols_bytes(p) for p in stored.values()) - own + size
    if total > bound and size > own:
        raise GroupMetadataTooLarge(f"the group's members' protocols would hold {total} bytes, more than the "
                                    f"{bound} OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES allows")


def check_assignments_bytes(assignments: Sequence[tuple[str, bytes]], bound: int, total_bound: int) -> None:
    """GroupMetadataTooLarge if an assignment a leader gives, (member id, its bytes), holds more
    than `bound` bytes (OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES), or all of them together more
    than `total_bound` (OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES): each is stored with its
    member and sent back in every DescribeGroups, and a leader's SyncGroup replaces every
    member's, so its own are the group's total. The message names the member and the sizes,
    never the bytes."""
    for member_id, data in assignments:
        if len(data) > bound:
            raise GroupMetadataTooLarge(f"the assignment for member {member_id!r:.257} holds {len(data)} bytes, more "
                                        f"than the {bound} OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES allows")
    total = sum(len(data) for _, data in assignments)
    if total > total_bound:
        raise GroupMetadataTooLarge(f"the assignments hold {total} bytes together, more than the {total_bound} "
                                    "OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES allows")
