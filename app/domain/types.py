"""Identifiers and enumerations named as Kafka names them."""

from __future__ import annotations

import enum
from typing import NewType

ProducerId = NewType("ProducerId", int)
ProducerEpoch = NewType("ProducerEpoch", int)
TxnId = NewType("TxnId", int)  # "TxId" of the original design: names one transaction of a transactional_id
TopicId = NewType("TopicId", int)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka's producer epoch is a 16-bit signed number. The coordinator hands a producer epochs
# up to one below this, then a fresh producer id (app.domain.transit.is_epoch_exhausted).
MAX_PRODUCER_EPOCH = 32767
MAX_INT64 = 2**63 - 1
MAX_INT32 = 2**31 - 1
# How many transactions one list answers: at most, and when not asked (GET /v1/transactions,
# `outbox transactions list --limit`).
TRANSACTION_LIST_MAX = 10_000
TRANSACTION_LIST_DEFAULT = 1000
# How many transactional ids one page of a list reads at most, passing over those the caller may
# not describe: the work one request may cost. A page cut by it says where to continue
# (`next_after`), as one cut by its limit does.
TRANSACTION_LIST_EXAMINED_MAX = 100_000


class TransactionState(str, enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    # KIP-939: the producer has prepared the transaction (its Sends are in, its outcome is
    # durable but undecided) and decides it later, after the application's own database has
    # recorded the decision. Never timed out; ended only by Commit or Abort.
    PREPARED = "Prepared"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    DEAD = "Dead"


class TransactionVersion(enum.IntEnum):
    """Kafka's transaction protocol version, chosen per producer at InitProducerId over HTTP;
    over Kafka's wire the versions of a client's requests tell it, as they tell Kafka's
    coordinator (app.domain.transit.SpeakVersion).

    V1: each transaction begins with BeginTransaction, and the producer keeps its epoch from
    one transaction to the next. V2 (Kafka's KIP-890): a transactional Send or AddOffsets to an
    idle transactional id begins its next transaction (BeginTransaction is still accepted), and
    every Commit and Abort bumps the producer's epoch, so that a Send delayed from a finished
    transaction (it carries the old epoch) is refused instead of joining the next one."""

    V1 = 1
    V2 = 2


class Durability(str, enum.Enum):
    """When a transactional producer's Sends are made durable, chosen at InitProducerId over
    HTTP (the Kafka door's producers are SEND: Kafka's EndTxn carries no count to check).

    SEND: each Send's database transaction waits for the disk before it is acknowledged, as
    a plain Send's does. COMMIT: a Send commits without waiting for the disk (PostgreSQL's
    synchronous_commit off for that transaction), and its Commit's durable write makes it
    durable: the database's log is one sequence, flushed in order, so that flush covers every
    earlier Send. Safe because nothing a transaction wrote is visible to read_committed before
    its Commit; a database crash can lose a suffix of the acknowledged Sends, so the Commit
    carries how many records the producer was acknowledged in the transaction and is refused
    (TRANSACTION_INCOMPLETE, the transaction aborted) when the transaction holds another
    number."""

    SEND = "send"
    COMMIT = "commit"


class ControlType(str, enum.Enum):
    """Kafka's ControlRecordType: the control markers the coordinator appends to data partitions."""

    COMMIT = "COMMIT"
    ABORT = "ABORT"


class RecordState(str, enum.Enum):
    """Where a data record stands, as a read_uncommitted fetch reports it: its transaction
    committed (or it is not transactional), aborted, or not ended yet."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    OPEN = "open"


class IsolationLevel(str, enum.Enum):
    READ_COMMITTED = "read_committed"
    READ_UNCOMMITTED = "read_uncommitted"


class CleanupPolicy(str, enum.Enum):
    """Kafka's cleanup.policy: what the log cleaner does to a topic's old records."""

    DELETE = "delete"  # retention: the oldest records go, by age (retention_ms) and size (retention_bytes)
    COMPACT = "compact"  # compaction: each key's latest committed record stays
    COMPACT_DELETE = "compact,delete"  # both

    @property
    def deletes(self) -> bool:
        return self is not CleanupPolicy.COMPACT

    @property
    def compacts(self) -> bool:
        return self is not CleanupPolicy.DELETE


class ValueFormat(str, enum.Enum):
    """A topic's record format (docs/ARCHITECTURE.md#record-formats), set when it is created
    and never changed: what its keys, values and headers are, at every door and in storage."""

    # Keys are text, values JSON text (checked, kept as given), headers an object of strings:
    # what the HTTP API has always taken. Every topic created before formats existed.
    JSON = "json"
    # Keys and values are any bytes, headers an ordered list of (name, bytes) with repeats:
    # Kafka's record. Over HTTP a key or value is {"type": "BINARY", "data": base64}.
    BYTES = "bytes"
