"""What a reader is given: the records of a fetch and the bounds of the log it read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from app.domain.types import ControlType, IsolationLevel, RecordState



class StoredRecord(NamedTuple):
    """A record as a fetch returns it. A tuple, not a frozen dataclass: a fetch builds one per
    record, and a frozen dataclass's __init__ cost ten times as much (a setattr per field)."""

    offset: int
    commit_position: int | None
    timestamp_ms: int
    key: str | None
    value: str | None
    headers: str | None
    producer_id: int | None
    producer_epoch: int | None
    sequence: int | None
    transactional: bool
    state: RecordState | None = None  # read_uncommitted only (read_committed returns committed ones)


@dataclass(slots=True)
class FetchResult:
    records: list[StoredRecord] = field(default_factory=list)
    next_offset: int = 0
    high_watermark: int = 0
    last_stable_offset: int = 0
    log_start_offset: int = 0
    # The log end when read: a read whose next_offset is below it may find more at once (a
    # read_committed one past the high watermark too), one at or past it must wait for a write.
    log_end_offset: int = 0


class LogRecord(NamedTuple):
    """A stored record of a partition's log as Kafka's Fetch reads it. size_bytes: the
    record's bytes as app.domain.log_cleaning.record_size counts them (0 for a marker)."""

    offset: int
    timestamp_ms: int
    key: str | bytes | None  # bytes: a bytes topic's
    value: str | bytes | None
    headers: str | None
    size_bytes: int


class LogBatch(NamedTuple):
    """A stored batch of a partition's log as Kafka's Fetch reads it, in offset order: what one
    append put into the partition (its producer, epoch and base sequence, its transaction), or
    a control marker (control_type set: it ends transaction txn_id in the partition; its one
    record is the marker's). `records` are those of the batch's run the read returns: a run
    cut by compaction, by the read's start or by its limits keeps its base offset, and
    record i of the run is still at base_offset + i with sequence base_sequence + i.

    A batch of no record (`records` empty, no producer, no state) says that nothing is stored
    in [base_offset, next_offset): what a read answers that finds no record from its start up
    to its upper bound (compaction's holes, a run's records deleted), so that a Kafka client
    steps over them to next_offset, as over the empty batches Kafka's log cleaner leaves, and
    is not left below records it will never be given."""

    base_offset: int
    producer_id: int | None
    producer_epoch: int | None
    base_sequence: int | None
    txn_id: int | None
    control_type: ControlType | None
    state: RecordState | None  # None for a marker
    records: list[LogRecord]
    next_offset: int | None = None  # a batch of no record only: where it ends


class AbortedTransaction(NamedTuple):
    """Kafka's FetchResponse AbortedTransaction: a transaction that aborted in the partition,
    by its producer and the first offset it wrote there. A read_committed client drops that
    producer's records from first_offset up to the ABORT marker."""

    producer_id: int
    first_offset: int


@dataclass(slots=True)
class OffsetOrderRead:
    """A read of a partition in offset order (Kafka's Fetch): the stored batches from `offset`
    below `upper_bound`, control markers included, and what a Kafka reader is told with them."""

    topic_id: int
    batches: list[LogBatch]
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    upper_bound: int  # nothing at or past it is read: offset_order_upper_bound
    aborted_transactions: list[AbortedTransaction] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """What Kafka's ListOffsets answers from: the bounds of a partition's log, and, for a
    timestamp asked, the first record at or after it (None: none)."""

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    found: tuple[int, int] | None = None  # (offset, timestamp_ms)


def offset_order_upper_bound(isolation: IsolationLevel, high_watermark: int, last_stable_offset: int) -> int:
    """How far a reader in offset order may read, Kafka's semantics: read_uncommitted up to
    the high watermark (the end of what is durable: the log end, but for the first offset of a
    transaction whose Sends may not be durable yet: storage's high_watermark); read_committed
    up to the last stable offset (the first offset of the partition's earliest open
    transaction, else the log end: storage's LAST_STABLE_OFFSET; never past the high
    watermark, as a transaction whose Sends may not be durable is an open one), so that no
    record of a transaction still open is ever handed out, and the aborted ones below it are
    named (AbortedTransaction) for the reader to drop."""
    if isolation is IsolationLevel.READ_COMMITTED:
        return last_stable_offset
    return high_watermark
