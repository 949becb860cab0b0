"""A consumer group's offsets outside transactions, as both doors commit, fetch, delete and
reset them, and a group's lag. A transaction's offsets (KIP-447) are staged by
app.services.transaction_coordinator and written at its commit; how a reader of one read order reads the
committed offsets is app.services.offsets_in_order; the members and generations these
requests check are app.services.group_service's."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.domain.clock import Clock
from app.domain.errors import (
    GroupIdNotFound,
    GroupSubscribedToTopic,
    NonEmptyGroup,
    OutboxError,
    RebalanceInProgress,
    UnknownMemberId,
    UnknownTopicOrPartition,
    UnstableOffsetCommit,
)
from app.domain.group import CONSUMER_PROTOCOL, StoredGroupState
from app.domain.ids import check_group_id
from app.domain.offsets import (
    NO_LEADER_EPOCH,
    GroupMetadata,
    OffsetResetSpec,
    OffsetToCommit,
    OffsetToStage,
    PlannedReset,
    ReadOrder,
    ResetScope,
    ResetTo,
    check_distinct_partitions,
    check_partition_count,
    offsets_to_write,
    plan_reset,
)
from app.services.group_membership import session_ended
from app.services.group_service import expire_group
from app.services.offsets_in_order import FetchedOffsets, in_read_order, raise_refused
from app.settings import Settings
from app.storage import groups, offset_order, offsets, read_committed, topics
from app.storage.dialect import RowLock
from app.storage.engine import Database

# Plain records counted per partition for a lag, at most: beyond it the lag is reported as at
# least this (a count is a range scan of the primary key).
LAG_COUNT_CAP = 1_000_000


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed_offset: int | None  # None: the group has committed no offset for this partition
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    lag: int | None  # committed records after the committed offset; None: unknown, nothing committed
    exact: bool  # False: at least `lag` (LAG_COUNT_CAP reached)
    pending: bool  # an unfinished transaction has staged a new offset for it
    read_order: ReadOrder | None  # committed_offset's; None with it


class LagUnknown(str, enum.Enum):
    """Why a group's total lag is unknown. The service does not know where a consumer without a
    committed offset will start (its auto_offset_reset is the client's), so, as Kafka's
    kafka-consumer-groups prints `-`, it does not guess: a stuck new group is not a caught-up one."""

    NO_COMMITTED_OFFSET = "no_committed_offset"  # none of the partitions has one (or there is none)
    PARTITIONS_WITHOUT_COMMITTED_OFFSET = "partitions_without_committed_offset"  # some have none


@dataclass(frozen=True, slots=True)
class GroupLag:
    partitions: list[PartitionLag]

    @property
    def unknown(self) -> LagUnknown | None:
        without = sum(p.lag is None for p in self.partitions)
        if without == len(self.partitions):
            return LagUnknown.NO_COMMITTED_OFFSET
        return LagUnknown.PARTITIONS_WITHOUT_COMMITTED_OFFSET if without else None

    @property
    def total(self) -> int | None:
        return None if self.unknown else sum(p.lag for p in self.partitions if p.lag is not None)

    def as_dict(self, group_id: str) -> dict[str, Any]:
        """The lag as both doors show it, under the HTTP API's names (GET
        /v1/groups/{group_id}/lag, `outbox groups lag`)."""
        return {
            "group_id": group_id,
            "partitions": [
                {"topic": p.topic, "partition": p.partition, "committed_offset": p.committed_offset,
                 "log_start_offset": p.log_start_offset, "high_watermark": p.high_watermark,
                 "last_stable_offset": p.last_stable_offset, "lag": p.lag, "lag_exact": p.exact,
                 "pending": p.pending, "read_order": None if p.read_order is None else p.read_order.value}
                for p in self.partitions
            ],
            "total_lag": self.total,
            "total_lag_unknown_reason": self.unknown,
        }


def reset_as_dict(group_id: str, plan: list[PlannedReset], *, dry_run: bool) -> dict[str, Any]:
    """A reset's answer as both doors show it, under the HTTP API's names (POST
    /v1/groups/{group_id}/offsets/reset, `outbox groups reset-offsets`)."""
    return {"group_id": group_id, "dry_run": dry_run,
            "offsets": [{"topic": r.topic, "partition": r.partition, "committed_offset": r.committed_offset,
                         "committed_read_order": None if r.committed_read_order is None else r.committed_read_order.value,
                         "new_offset": r.new_offset, "read_order": r.read_order.value} for r in plan]}


class GroupOffsetService:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock

    def commit(
        self, group_id: str, to_commit: list[OffsetToStage], group_metadata: GroupMetadata | None = None, *,
        each_partition: bool = False,
    ) -> None:
        """In Kafka's order (offsets_to_write): the group's checks first, then each offset's
        metadata; with `each_partition`, an offset whose metadata is too long is left out (the
        others written), else it refuses the commit."""
        check_group_id(group_id)
        check_distinct_partitions(to_commit)
        now = self.clock()
        with self.db.write() as conn:
            groups.check_group_metadata(conn, group_id, group_metadata)
            g = groups.group(conn, group_id)
            if g is not None and g.protocol_type is not None:
                # Kafka's rules for a group its door manages: a commit without a member and
                # generation (a consumer that assigns itself partitions) only while it has no
                # members, and none while the members wait for their new assignment.
                if group_metadata is None and groups.members(conn, group_id):
                    # Unless their sessions have ended (as in DeleteGroups). Locked as a join
                    # locks it, and only here: a commit of a group without members takes no lock.
                    if groups.group(conn, group_id, lock=RowLock.UPDATE) is not None:
                        expire_group(conn, group_id, now, self.settings)
                if group_metadata is None and groups.members(conn, group_id):
                    raise UnknownMemberId(f"group {group_id!r} has members: a commit names a member and its "
                                          "generation")
                if group_metadata is not None and g.state is StoredGroupState.COMPLETING_REBALANCE:
                    raise RebalanceInProgress(f"group {group_id!r} is rebalancing: join again")
            to_commit = offsets_to_write(to_commit, each_partition=each_partition)
            if not to_commit:
                return
            topic_ids = topics.topic_ids_for_offsets(conn, to_commit)
            offsets.commit(conn, (OffsetToCommit(group_id, topic_id, o.partition, o.committed_offset, o.metadata,
                                                 o.leader_epoch, o.read_order, None)
                                  for o, topic_id in zip(to_commit, topic_ids, strict=True)), now)

    def fetch(self, group_id: str, *, topic_names: list[str] | None, require_stable: bool, order: ReadOrder | None,
              visible: Callable[[str], bool] = lambda _topic: True) -> list[offsets.CommittedOffset]:
        """The group's committed offsets. With require_stable (the default, as in KIP-447), a
        partition with offsets pending in an unfinished transaction is refused with
        UNSTABLE_OFFSET_COMMIT instead of answering the value that transaction is replacing.
        With `order`, each offset as a reader in that order reads it, an offset committed in
        the other order refused where it would make that reader skip or repeat a transaction
        (in_read_order); None: each as stored, with the order it was committed in.
        Only the offsets of `topic_names` where named (None: every topic's), and only they
        refuse; a named topic that does not exist has none.
        Topics for which `visible` is false (the caller may not describe them) are left out,
        of the answer and of the refusal alike."""
        check_group_id(group_id)  # no group can hold another id: refused as the commit would be
        with self.db.read() as conn:
            # A named topic that does not exist (deleted while a reader read it) has no
            # offsets, as one the group never committed in: the others are answered.
            named = None if topic_names is None else set(topic_names)
            if require_stable:
                pending = [p for p in offsets.pending_partitions(conn, group_id, None) if visible(p[0])]
                if named is not None:
                    pending = [p for p in pending if p[0] in named]
                if pending:
                    raise UnstableOffsetCommit(
                        "offsets pending in an unfinished transaction for "
                        + ", ".join(f"{t}/{p}" for t, p in sorted(pending)),
                        partitions=[{"topic": t, "partition": p} for t, p in sorted(pending)],
                    )
            rows = [o for o in offsets.fetch(conn, group_id) if visible(o.topic) and (named is None or o.topic in named)]
            if order is None:
                return rows
            rows, refused = in_read_order(conn, group_id, rows, order)
            raise_refused(refused)
            return rows

    def fetch_with_pending(self, group_id: str, order: ReadOrder) -> FetchedOffsets:
        """The group's committed offsets as a reader in `order` reads them (in_read_order), and
        the partitions whose offsets an unfinished transaction holds pending, in one snapshot:
        Kafka's OffsetFetch answers the second UNSTABLE_OFFSET_COMMIT partition by partition
        when it requires stable offsets, and each refused offset with its refusal's code."""
        check_group_id(group_id)  # no group can hold another id: refused as the commit would be
        with self.db.read() as conn:
            committed, refused = in_read_order(conn, group_id, offsets.fetch(conn, group_id), order)
            return FetchedOffsets(committed, set(offsets.pending_partitions(conn, group_id, None)), refused)

    def delete_offsets(self, group_id: str, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], OutboxError]:
        """Kafka's OffsetDelete: the group's committed offsets of the (topic, partition) pairs
        `wanted`, but for those refused, answered by pair: UNKNOWN_TOPIC_OR_PARTITION, or
        GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to the topic (its consumer would
        commit it again). The whole request is refused with GROUP_ID_NOT_FOUND for a group
        the service does not know, and NON_EMPTY_GROUP for a group of members that are not
        consumers (their protocol's topics are not known here)."""
        refused: dict[tuple[str, int], OutboxError] = {}
        with self.db.write() as conn:
            if not groups.known(conn, group_id):
                raise GroupIdNotFound(f"no consumer group {group_id!r}")
            # Held as a join holds it: no member subscribes between the check and the delete.
            g = groups.group(conn, group_id, lock=RowLock.UPDATE)
            if g is not None:
                # A member whose session has ended subscribes to nothing (as in DeleteGroups).
                expire_group(conn, group_id, self.clock(), self.settings)
            members = groups.members(conn, group_id)
            if members and g is not None and g.protocol_type not in (None, CONSUMER_PROTOCOL):
                raise NonEmptyGroup(f"group {group_id!r} has members of protocol {g.protocol_type!r}: its "
                                    "offsets are deleted once it has none")
            subscribed = {t for m in members for t in m.topics}
            by_name = topics.existing_topics(conn, {t for t, _ in wanted})
            keys = []
            for name, partition in wanted:
                topic = by_name.get(name)
                if topic is None or not 0 <= partition < topic.partition_count:
                    refused[(name, partition)] = UnknownTopicOrPartition(
                        f"unknown partition {partition} of topic {name!r}")
                elif name in subscribed:
                    refused[(name, partition)] = GroupSubscribedToTopic(
                        f"a member of group {group_id!r} subscribes to topic {name!r}")
                else:
                    keys.append((topic.topic_id, partition))
            offsets.delete_offsets(conn, group_id, keys)
        return refused

    def reset_offsets(self, group_id: str, scope: ResetScope, spec: OffsetResetSpec, *, dry_run: bool,
                      visible: Callable[[str], bool] = lambda _topic: True,
                      authorize: Callable[[str], None] = lambda _topic: None) -> list[PlannedReset]:
        """kafka-consumer-groups --reset-offsets: commit, for the partitions `scope` names (one
        topic's, or those of every topic the group consumes that is `visible` to the caller:
        groups.consumed_topics), the offsets `spec` names (app.domain.offsets.plan_reset), and
        answer the plan; with dry_run, answer it and commit nothing. `authorize` is called with
        each topic before anything is read of it, and raises to refuse. Refused while the group
        has members (NON_EMPTY_GROUP), and for a partition whose offsets an unfinished
        transaction holds (UNSTABLE_OFFSET_COMMIT): its commit would overwrite the reset."""
        check_group_id(group_id)
        now = self.clock()
        with (self.db.read() if dry_run else self.db.write()) as conn:
            if scope.topic is not None:
                names = [scope.topic]
            else:
                names = sorted(t for t in groups.consumed_topics(conn, group_id).get(group_id, set()) if visible(t))
            for name in names:
                authorize(name)
            # A join takes the group's row FOR UPDATE (groups.lock_group): held here too, no
            # member joins between the check below and the commit. A group without a row has
            # never had members; SQLite serializes every write transaction anyway.
            g = groups.group(conn, group_id, lock=None if dry_run else RowLock.UPDATE)
            # Members whose session has ended are gone (as in DeleteGroups): removed by the
            # reset, and not counted by its dry run, which writes nothing and answers the same.
            if g is not None and not dry_run:
                expire_group(conn, group_id, now, self.settings)
            members = [m for m in groups.members(conn, group_id) if g is None or not session_ended(g, m, now)]
            if members:
                raise NonEmptyGroup(f"group {group_id!r} has {len(members)} active member(s): its offsets are "
                                    "reset only while it has none (stop its consumers first)")
            if scope.all_topics:
                # A subscription may name a topic deleted since: there is nothing of it to reset.
                names = sorted(topics.existing_topics(conn, set(names)))
            by_name = ({} if not names else topics.get_topics(conn, set(names)) if dry_run
                       else topics.get_topics_for_offsets(conn, set(names)))
            chosen: list[tuple[str, int]] = []
            for name in names:
                topic = by_name[name]
                for p in scope.partitions or []:
                    topics.check_partition(topic, p)
                numbers = range(topic.partition_count) if scope.partitions is None else sorted(scope.partitions)
                chosen += [(name, p) for p in numbers]
            check_partition_count(len(chosen))
            pending = sorted(set(offsets.pending_partitions(conn, group_id, None)) & set(chosen))
            if pending:
                raise UnstableOffsetCommit(
                    "offsets pending in an unfinished transaction for " + ", ".join(f"{t}/{p}" for t, p in pending),
                    partitions=[{"topic": t, "partition": p} for t, p in pending])
            stored = {(o.topic, o.partition): o for o in offsets.fetch(conn, group_id)}
            # The order of a reset's offset where neither the spec nor the offset it replaces
            # gives one (plan_reset): that of the door managing the group.
            door_order = ReadOrder.COMMIT if g is None or g.protocol_type is None else ReadOrder.OFFSET
            wanted = set(chosen)
            plan = []
            for name in names:
                topic = by_name[name]
                for info in topics.describe_partitions(conn, topic):
                    if (name, info.partition) not in wanted:
                        continue
                    at = None
                    if spec.timestamp_ms is not None:
                        found = offset_order.offset_for_timestamp(conn, topic.topic_id, info.partition,
                                                                  spec.timestamp_ms, info.log_start_offset,
                                                                  info.high_watermark)
                        at = None if found is None else found[0]
                    was = stored.get((name, info.partition))
                    base = None if was is None else was.committed_offset
                    if (spec.to in (ResetTo.CURRENT, ResetTo.SHIFT) and was is not None
                            and spec.read_order not in (None, was.read_order)):
                        # The committed offset kept, or moved, into the other order: as a reader
                        # of that order is handed it (in_read_order), translated or refused;
                        # else the reset would relabel a skip or a repeat.
                        kept, refused = in_read_order(conn, group_id, [was], spec.read_order)
                        raise_refused(refused)
                        base = kept[0].committed_offset
                    planned = plan_reset(spec, name, info.partition, committed_offset=base,
                                         committed_read_order=None if was is None else was.read_order,
                                         door_order=door_order, log_start_offset=info.log_start_offset,
                                         # Never past the high watermark: a reader placed
                                         # there could skip offsets a crash hands out again.
                                         log_end_offset=info.high_watermark, offset_for_timestamp=at)
                    # The plan shows the offset replaced as it is stored.
                    plan.append(planned if was is None else dataclasses.replace(
                        planned, committed_offset=was.committed_offset))
            if plan and not dry_run:
                offsets.commit(conn, (OffsetToCommit(group_id, by_name[r.topic].topic_id, r.partition, r.new_offset,
                                                     None, NO_LEADER_EPOCH, r.read_order, None)
                                      for r in plan), now)
            return plan

    def lag(self, group_id: str, visible: Callable[[str], bool] = lambda _topic: True) -> GroupLag:
        """Every partition of the topics the group consumes (`visible` to the caller): its
        members' subscriptions and the topics it has committed offsets in, or staged them in an
        open transaction. For each, where the group is, the partition's bounds, and how many
        committed records it has left to read (app.storage.read_committed.committed_between_for_groups,
        for this group: the count the /metrics gauge shows); unknown where it has committed no
        offset. In one snapshot."""
        with self.db.read() as conn:
            names = groups.consumed_topics(conn, group_id).get(group_id, set())
            if not names and groups.generation(conn, group_id) is None:
                raise GroupIdNotFound(f"no consumer group {group_id!r}")
            pending = set(offsets.pending_partitions(conn, group_id, None))
            # A subscription may name a topic deleted since: it has no partitions to show.
            consumed = topics.existing_topics(conn, {t for t in names if visible(t)})
            counted = {(c.topic_id, c.partition): c for c in read_committed.committed_between_for_groups(
                conn, LAG_COUNT_CAP, limit=None, group_id=group_id)}
            out = []
            for name in sorted(consumed):
                topic = consumed[name]
                for info in topics.describe_partitions(conn, topic):
                    c = counted.get((topic.topic_id, info.partition))
                    at, lag, exact, order = ((None, None, True, None) if c is None
                                             else (c.committed_offset, c.count, c.exact, c.read_order))
                    out.append(PartitionLag(name, info.partition, at, info.log_start_offset, info.high_watermark,
                                            info.last_stable_offset, lag, exact, (name, info.partition) in pending,
                                            order))
            return GroupLag(out)
