"""Consumer-group offsets as the protocol passes them around."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from app.domain.errors import (
    InconsistentGroupProtocol,
    InvalidRequest,
    OffsetMetadataTooLarge,
    OutboxError,
    UnstableOffsetCommit,
)
from app.domain import request_shape

# Most partitions one AddOffsets (TxnOffsetCommit) or AddPartitionsToTxn names, from every door:
# each is a row looked up and written in one database transaction that holds the transaction's
# row lock, so a request is bounded by more than its frame size.
MAX_PARTITIONS_PER_REQUEST = 10_000
# The most characters a committed offset's metadata holds, from every door: Kafka's default
# offset.metadata.max.bytes (which Kafka compares with the string's length). Past it Kafka
# answers the partition OFFSET_METADATA_TOO_LARGE; unbounded, one commit could store
# OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES of it, read again by every offset fetch of the group.
OFFSET_METADATA_MAX_CHARS = 4096
# Kafka's committed_leader_epoch when a commit carries none (RecordBatch.NO_PARTITION_LEADER_EPOCH):
# the HTTP API's commits, a reset, OffsetCommit before version 6, TxnOffsetCommit before 2.
# Stored as itself (group_offsets.leader_epoch, NOT NULL) and answered as stored, so that the
# value has one meaning through the database, every door and the in-database SQL.
NO_LEADER_EPOCH = -1


@enum.unique
class ReadOrder(str, enum.Enum):
    """The order a reader reads a partition in, and so what a committed offset it stores says
    it has read (group_offsets.read_order, transaction_offsets.read_order).

    COMMIT: commit order, read_committed as the HTTP door and Spark read it; the committed
    offset is a commit position, and everything exposed below it (plain records, and whole
    transactions whose COMMIT marker lies below it) has been read.
    OFFSET: offset order, as a Kafka consumer reads; the committed offset is Kafka's, and every
    record below it has been read (a read_committed consumer stops at the last stable offset,
    so every transaction with records below it had ended when they were read).

    The two say the same where no transaction that has not aborted has records on both sides
    of the offset (see offset_in_order): then the number is the same in either order."""

    COMMIT = "commit"
    OFFSET = "offset"


@enum.unique
class Straddle(enum.Enum):
    """What lies across an offset of a partition: whether a transaction that has not aborted
    has records below it and its COMMIT marker at or past it (or no marker yet)."""

    NONE = "none"  # no such transaction: the offset means the same in either read order
    UNDECIDED = "undecided"  # an open or prepared one: its outcome decides
    COMMITTED = "committed"  # a committed one: a reader of one order has read it, one of the other has not


def offset_in_order(stored: ReadOrder, wanted: ReadOrder, straddle: Straddle, *, group_id: str, topic: str,
                    partition: int, offset: int) -> OutboxError | None:
    """Why a committed offset stored in `stored` order cannot be handed to a reader in `wanted`
    order, or None where it can, as the same number: the one rule by which a group's offsets
    move between the HTTP door (commit order) and the Kafka door (offset order), so that
    neither makes its reader skip or repeat a record silently.

    Where a transaction T has records below the offset and its marker at or past it, a reader
    in commit order at that offset has not read T (it is exposed at its marker) and one in
    offset order has; no number of the other order says "T read" or "T unread" together with
    everything else the group has read, so the offset is refused with INCONSISTENT_GROUP_PROTOCOL
    (the group is moved between doors by a reset of its offsets). Where T is still open or
    prepared, its outcome decides (an abort leaves nothing to read on either side): refused as
    retriable, UNSTABLE_OFFSET_COMMIT, as a pending transactional offset is."""
    if stored is wanted or straddle is Straddle.NONE:
        return None
    committed_in = ("offset order (a Kafka consumer's or a read_uncommitted reader's offset)"
                    if stored is ReadOrder.OFFSET else "commit order (a read_committed HTTP reader's position)")
    where = f"group {group_id!r}'s offset {offset} in {topic}/{partition}"
    partitions = [{"topic": topic, "partition": partition}]
    if straddle is Straddle.UNDECIDED:
        return UnstableOffsetCommit(
            f"{where} is in {committed_in}, and a transaction still open has records below it: "
            "what it means in the other order depends on that transaction's outcome; retry once it ends",
            partitions=partitions)
    return InconsistentGroupProtocol(
        f"{where} is in {committed_in}, and a transaction committed at or past it has records below it: read "
        "in the other order it would skip or repeat that transaction. To move the group between the HTTP and "
        "Kafka doors (or between isolation levels), stop its readers and reset its offsets for the new readers, "
        "with an offset in their order (outbox groups reset-offsets --read-order commit|offset --to-offset N ...)",
        partitions=partitions)


def metadata_fits(metadata: str | None) -> bool:
    """Whether a committed offset's metadata is within OFFSET_METADATA_MAX_CHARS."""
    return metadata is None or len(metadata) <= OFFSET_METADATA_MAX_CHARS


@dataclass(frozen=True, slots=True)
class OffsetToStage:
    topic: str
    partition: int
    committed_offset: int
    metadata: str | None
    leader_epoch: int  # the Kafka door's committed_leader_epoch; NO_LEADER_EPOCH: none (every HTTP commit)
    read_order: ReadOrder  # the committing door's: COMMIT over HTTP, OFFSET over Kafka


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    """One row of a group's committed offsets, as every path that commits one writes it (a
    commit over either door, a reset, a transaction's completion: storage's offsets.commit)."""

    group_id: str
    topic_id: int
    partition: int
    committed_offset: int
    metadata: str | None
    leader_epoch: int  # NO_LEADER_EPOCH: none
    read_order: ReadOrder
    # None: a write made now (a commit, a reset), over whatever is committed. A transaction's
    # staged offset carries the number of its staging, and is written only over an offset
    # written before it: of a group's offsets for a partition the one written last stays, as
    # in Kafka, where a transaction's commit does not move a consumer back.
    write_seq: int | None


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """What a consumer passes along with offsets (Kafka's ConsumerGroupMetadata, KIP-447)."""

    generation_id: int
    member_id: str
    group_instance_id: str | None = None  # a static member's (KIP-345): fenced once replaced

    @staticmethod
    def given(generation_id: int, member_id: str, group_instance_id: str | None) -> GroupMetadata | None:
        """The metadata a Kafka request's fields give, or None for Kafka's "no group metadata"
        (generation -1, no member id, no instance id: a TxnOffsetCommit of versions 0 to 2 or
        of a producer that passed none, an OffsetCommit of a simple consumer), whose offsets
        the group's generation does not fence."""
        if generation_id < 0 and not member_id and group_instance_id is None:
            return None
        return GroupMetadata(generation_id, member_id, group_instance_id)


def check_distinct_partitions(offsets: list[OffsetToStage]) -> None:
    """One offset per partition per request: two would leave the winner to chance; and at most
    MAX_PARTITIONS_PER_REQUEST of them."""
    check_partition_count(len(offsets))
    twice = request_shape.duplicated((o.topic, o.partition) for o in offsets)
    if twice:
        topic, partition = twice[0]
        raise InvalidRequest(f"two offsets for {topic}/{partition} in one request")


def check_partition_count(count: int) -> None:
    if count > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest(f"a request names at most {MAX_PARTITIONS_PER_REQUEST} partitions; got {count}")


def offsets_to_write(offsets: list[OffsetToStage], *, each_partition: bool) -> list[OffsetToStage]:
    """Kafka's order for a commit of offsets, in or out of a transaction: the group's checks
    (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS ...), and
    the producer's in a transaction, refuse the whole commit first; only then is an offset whose
    metadata is past OFFSET_METADATA_MAX_CHARS refused, so a stale member learns that it must
    join again, not that its metadata is long. Called once those checks have passed: the
    offsets to write. `each_partition` (Kafka's OffsetCommit and TxnOffsetCommit, answered per
    partition): those that fit, the others answered OFFSET_METADATA_TOO_LARGE by the door; else
    (HTTP, all or nothing) all of them, or OffsetMetadataTooLarge and none."""
    fitting = [o for o in offsets if metadata_fits(o.metadata)]
    if not each_partition and len(fitting) < len(offsets):
        first = next(o for o in offsets if not metadata_fits(o.metadata))
        raise OffsetMetadataTooLarge(f"the metadata of {first.topic}/{first.partition}'s offset holds "
                                     f"{len(first.metadata or '')} characters; at most {OFFSET_METADATA_MAX_CHARS}")
    return fitting


class ResetTo(str, enum.Enum):
    """Where a reset moves a group's committed offsets (kafka-consumer-groups --reset-offsets'
    --to-earliest, --to-latest, --to-offset, --to-datetime, --to-current, --shift-by)."""

    EARLIEST = "earliest"  # the partition's log start
    LATEST = "latest"  # its log end (high watermark): nothing already written is read again
    OFFSET = "offset"  # a given offset, moved into [log start, log end] as Kafka's tool does
    TIMESTAMP = "timestamp"  # the first data record at or after a time; the log end if none
    # The committed offset, unmoved; the log end where there is none (as Kafka's tool plans it).
    CURRENT = "current"
    # The committed offset plus a number (negative: back), moved into [log start, log end];
    # refused where the group has committed no offset (there is nothing to shift).
    SHIFT = "shift"


@dataclass(frozen=True, slots=True)
class OffsetResetSpec:
    to: ResetTo
    offset: int | None = None  # with ResetTo.OFFSET only
    timestamp_ms: int | None = None  # with ResetTo.TIMESTAMP only
    shift_by: int | None = None  # with ResetTo.SHIFT only
    # Whose readers the offsets are for: the order they are committed in. None: each keeps the
    # order of the offset it moves, and one without takes that of the door managing the group.
    # Named, it moves a group between doors: a Kafka consumer starts at an offset reset for
    # ReadOrder.OFFSET as at its own, without the look across it (offset_in_order).
    read_order: ReadOrder | None = None

    def __post_init__(self) -> None:
        if (self.offset is not None) != (self.to is ResetTo.OFFSET):
            raise InvalidRequest("offset goes with to=offset, and only with it")
        if (self.timestamp_ms is not None) != (self.to is ResetTo.TIMESTAMP):
            raise InvalidRequest("timestamp_ms goes with to=timestamp, and only with it")
        if (self.shift_by is not None) != (self.to is ResetTo.SHIFT):
            raise InvalidRequest("shift_by goes with to=shift, and only with it")


@dataclass(frozen=True, slots=True)
class ResetScope:
    """The partitions a reset moves: those of one topic (`partitions` of it, or all of them
    when None), or every partition of every topic the group consumes (kafka-consumer-groups'
    --topic and --all-topics)."""

    topic: str | None = None
    partitions: tuple[int, ...] | None = None  # with a topic only
    all_topics: bool = False

    def __post_init__(self) -> None:
        if (self.topic is None) != self.all_topics:
            raise InvalidRequest("name one topic, or all_topics: one of the two")
        if self.all_topics and self.partitions is not None:
            raise InvalidRequest("partitions go with a topic, not with all_topics")
        if self.partitions is not None:
            check_partition_count(len(self.partitions))
            if len(set(self.partitions)) != len(self.partitions):
                raise InvalidRequest("a partition is named twice")


@dataclass(frozen=True, slots=True)
class PlannedReset:
    """One partition of a reset: the group's committed offset before (None: it has none) and
    the offset the reset commits, each with its read order."""

    topic: str
    partition: int
    committed_offset: int | None
    new_offset: int
    committed_read_order: ReadOrder | None  # None: no committed offset
    read_order: ReadOrder  # the new offset's


def plan_reset(spec: OffsetResetSpec, topic: str, partition: int, *, committed_offset: int | None,
               committed_read_order: ReadOrder | None, door_order: ReadOrder, log_start_offset: int,
               log_end_offset: int, offset_for_timestamp: int | None) -> PlannedReset:
    """The one rule of a reset, for every door: where `spec` puts the group in this partition.
    An offset outside the log is moved to its nearer end (a position below the log start would
    answer OFFSET_OUT_OF_RANGE to the next read; one past the end does not exist yet).
    `offset_for_timestamp`: the partition's first data record at or after spec.timestamp_ms.
    The new offset's read order: the one the spec names; else that of the offset it replaces
    (shifting a Kafka consumer's offset shifts it in offset order); else `door_order`, that of
    the door managing the group, whose readers read it next."""

    def into_log(offset: int) -> int:
        return min(max(offset, log_start_offset), log_end_offset)

    if spec.to is ResetTo.EARLIEST:
        new = log_start_offset
    elif spec.to is ResetTo.LATEST:
        new = log_end_offset
    elif spec.to is ResetTo.OFFSET:
        assert spec.offset is not None
        new = into_log(spec.offset)
    elif spec.to is ResetTo.CURRENT:
        new = log_end_offset if committed_offset is None else committed_offset
    elif spec.to is ResetTo.SHIFT:
        assert spec.shift_by is not None
        if committed_offset is None:
            raise InvalidRequest(f"cannot shift {topic}/{partition}: the group has committed no offset there "
                                 "(name the partitions that have one, or reset this one another way)",
                                 partitions=[{"topic": topic, "partition": partition}])
        new = into_log(committed_offset + spec.shift_by)
    else:
        new = log_end_offset if offset_for_timestamp is None else offset_for_timestamp
    return PlannedReset(topic, partition, committed_offset, new, committed_read_order,
                        spec.read_order or committed_read_order or door_order)
