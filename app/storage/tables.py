"""The schema, in SQLAlchemy Core. The single source for alembic and for every query: its tables
here, with the producer tables of app.storage.producer_tables, all on the one MetaData of
app.storage.table_metadata.

Types are chosen to be identical on SQLite and PostgreSQL: BigInteger offsets and ids,
Text for JSON payloads (stored as JSON text; the service never queries inside a value, and
text avoids a parse on the hot insert path).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    Sequence,
    SmallInteger,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)

from app.domain.acl import Operation, PatternType, Permission, ResourceType
from app.domain.group import StoredGroupState
from app.domain.offsets import ReadOrder
from app.domain.topic_names import TOPIC_NAME_MAX_LENGTH
from app.domain.transaction import STORED_STATES
from app.domain.types import CleanupPolicy, ControlType, Durability, RecordState, TransactionVersion, ValueFormat
from app.storage.producer_tables import forgotten_producers, producer_partitions, producers
from app.storage.table_metadata import metadata

# The whole schema, this module's tables with the producer tables (app.storage.producer_tables)
# and the MetaData they are all defined on (app.storage.table_metadata).
__all__ = [
    "acls", "api_keys", "cleaner_leases", "consumer_groups", "counters", "deleted_topics", "Flag",
    "forgotten_producers", "group_members", "group_offsets", "metadata", "offset_writes", "OffsetMetadataText",
    "one_of", "partitions", "producer_partitions", "producers", "record_batches",
    "RECORD_LEAF", "record_leaf", "record_leaf_pattern", "record_message_ids", "records", "topics",
    "transaction_offsets", "transaction_partitions", "transactions", "txn_ids",
]


def one_of(column: str, values: Iterable[enum.Enum], *, nullable: bool = False) -> CheckConstraint:
    """A CHECK that `column` holds one of the enum's values (`values`: the enum, or those of its
    members a row may hold), named after the column: the enum is the one list of them. A value
    added to the enum needs a migration that replaces the stored CHECK (alembic's comparison
    does not see CHECK constraints; tests/integration/test_migrations.py holds this module's
    text to the enums)."""
    listed = ", ".join(str(member.value) if isinstance(member.value, int) else f"'{member.value}'"
                       for member in values)
    condition = f"{column} IN ({listed})"
    if nullable:
        condition = f"{column} IS NULL OR {condition}"
    return CheckConstraint(condition, name=column)


# Named counters handed out with UPDATE … RETURNING: producer ids and txn ids. A counter row
# works the same on both databases (SQLite has no sequences).
counters = Table(
    "counters",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("value", BigInteger, nullable=False),
)

topics = Table(
    "topics",
    metadata,
    Column("topic_id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(TOPIC_NAME_MAX_LENGTH), nullable=False, unique=True),
    Column("partition_count", Integer, nullable=False),
    # Kafka's cleanup.policy (app.domain.types.CleanupPolicy; CHECKed since migration 0040)
    Column("cleanup_policy", String(16), nullable=False),
    Column("retention_ms", BigInteger, nullable=False),  # -1: no time limit
    Column("check_expected_offsets", Boolean, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    # Kafka's retention.bytes (-1: no size limit) and delete.retention.ms (how long compaction
    # keeps a tombstone, the latest record of a key whose value is null).
    Column("retention_bytes", BigInteger, nullable=False, server_default=text("-1")),
    Column("delete_retention_ms", BigInteger, nullable=False, server_default=text("86400000")),
    # Kafka's max.message.bytes: the largest record a Send may append (migration 0011 gave the
    # topics before it Kafka's default).
    Column("max_message_bytes", Integer, nullable=False, server_default=text("1048588")),
    # What its records are (app.domain.types.ValueFormat; migration 0015): every topic created
    # before formats existed is json.
    Column("value_format", String(8), nullable=False, server_default=text("'json'")),
    one_of("value_format", ValueFormat),
    one_of("cleanup_policy", CleanupPolicy),
)

# One row per partition. `next_offset` is the log end offset and doubles as the partition's
# append lock: appenders take offsets with UPDATE … RETURNING and hold the row lock until their
# database transaction commits, so offsets become visible in order (docs/GUARANTEES.md#in-order-visibility).
# `log_start_offset` is the first offset readers may ask for; the log cleaner deletes every row
# below it (app.services.log_cleaner). `record_count` and `size_bytes` are the data records
# stored (control markers not counted) and the UTF-8 bytes of their keys, values and headers,
# kept by every append and every deletion in the same database transaction.
# `cleaned_offset` is compaction's checkpoint: below it, the log holds each key's latest record
# in commit order and in offset order only (app.domain.log_cleaning).
partitions = Table(
    "partitions",
    metadata,
    Column("topic_id", Integer, ForeignKey("topics.topic_id", ondelete="CASCADE"), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_offset", BigInteger, nullable=False),
    Column("log_start_offset", BigInteger, nullable=False),
    Column("record_count", BigInteger, nullable=False, server_default=text("0")),
    Column("size_bytes", BigInteger, nullable=False, server_default=text("0")),
    Column("cleaned_offset", BigInteger, nullable=False, server_default=text("0")),
    # Whether a record row may be missing from inside a batch's run at or past the log start:
    # set by the cleaner's deletions that leave holes (compaction's, a deleted topic's purge,
    # app.storage.cleaning), in their transaction, and never cleared. Without it every
    # committed batch's run is stored whole from the log start on, and the lag is counted a
    # batch at a time (app.storage.read_committed.committed_between_for_groups). Migration
    # 0051 set it where a run had a hole then.
    Column("has_holes", Boolean, nullable=False, server_default=false()),
    PrimaryKeyConstraint("topic_id", "partition"),
)

# A log cleaner's claim on a partition while it compacts it: a compaction pass spans many
# database transactions, so two cleaners must not compact one partition at once. A claim
# whose holder died expires at until_ms.
cleaner_leases = Table(
    "cleaner_leases",
    metadata,
    Column("topic_id", Integer, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("holder", String(64), nullable=False),
    Column("until_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("topic_id", "partition"),
)

# Topics deleted whose records are still stored: the log cleaner deletes them a chunk at a
# time, then the row. A deleted topic's name is free at once (its records carry the old id).
deleted_topics = Table(
    "deleted_topics",
    metadata,
    Column("topic_id", Integer, primary_key=True, autoincrement=False),
    Column("name", String(TOPIC_NAME_MAX_LENGTH), nullable=False),
    Column("deleted_ms", BigInteger, nullable=False),
)

class Flag(TypeDecorator[bool]):
    """A boolean that both drivers take as given (psycopg as a boolean, sqlite3's bool as the
    integer it is), so SQLAlchemy converts nothing on the way in: a statement that writes one
    may run on the driver's cursor (dialect.rows_on_driver refuses any bind value SQLAlchemy
    would convert, and Boolean's is on SQLite). Read back as a bool, as Boolean is."""

    impl = Boolean
    cache_ok = True

    def bind_processor(self, dialect: Any) -> None:  # type: ignore[override]
        return None


# The partition logs: data records and control markers. Who wrote a record (producer id,
# epoch, sequence, transaction) and what became of it are its batch's row in record_batches
# below, written once a batch: since migration 0023 no record carries them. A control marker
# is still a row here, with control_type set ('COMMIT' or 'ABORT'), and a batch row of its own
# that names its transaction.
records = Table(
    "records",
    metadata,
    Column("topic_id", Integer, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("timestamp_ms", BigInteger, nullable=False),
    Column("key", Text, nullable=True),
    Column("value", Text, nullable=True),
    Column("headers", Text, nullable=True),
    Column("control_type", String(8), nullable=True),
    # A bytes topic's key and value (docs/ARCHITECTURE.md#record-formats), beside the text
    # columns a JSON topic's stay in, queryable as JSON; a record sets at most one of each pair.
    Column("key_bytes", LargeBinary, nullable=True),
    Column("value_bytes", LargeBinary, nullable=True),
    # A record of a self-committed batch (record_batches.self_committed, migration 0041): one
    # committed exactly when it exists, at its own offset, which the view committed_records
    # reads as a range of this table, without its batch row. False for everything else,
    # and for every record written before 0041.
    Column("self_committed", Flag, nullable=False, server_default=false()),
    # The producer id of a self-committed idempotent batch (migration 0044), its row's, which
    # the view's range of self-committed records reads without that row. NULL for every other
    # record: a batch's producer is its row's alone, read through it.
    Column("producer_id", BigInteger, nullable=True),
    PrimaryKeyConstraint("topic_id", "partition", "offset"),
    one_of("control_type", ControlType, nullable=True),
    CheckConstraint("key IS NULL OR key_bytes IS NULL", name="one_key"),
    CheckConstraint("value IS NULL OR value_bytes IS NULL", name="one_value"),
    # PostgreSQL: a leaf table per log partition (migration 0035; its leaves come and go with
    # the log partitions, app/storage/sql/record_leaves.postgresql.sql), so that a partition's
    # rows lie on pages of their own. SQLite keeps one table.
    postgresql_partition_by='RANGE (topic_id, "partition")',
)

# The name of a leaf of `records` on PostgreSQL: records_<topic_id>_<partition>, as
# app/storage/sql/record_leaves.postgresql.sql names it. Leaves are tables the schema does not
# list: they come and go with the log partitions.
RECORD_LEAF = re.compile(r"records_([0-9]+)_([0-9]+)")


def record_leaf(topic_id: int, partition: int) -> str:
    """The name of the leaf of `records` that holds one log partition's rows (RECORD_LEAF)."""
    return f"records_{int(topic_id)}_{int(partition)}"


def record_leaf_pattern(topic_id: int | None = None) -> str:
    """RECORD_LEAF as a whole-name regular expression for the database's `~`: every leaf's
    name, or one topic's leaves'."""
    pattern = RECORD_LEAF.pattern
    if topic_id is not None:
        pattern = pattern.replace("([0-9]+)", str(int(topic_id)), 1)
    return f"^{pattern}$"

# An application's key for a record appended inside its own database transaction
# (app.in_database, outbox.append), one row per record given one: unique per topic among the
# records stored (the primary key), so that a retry of an application transaction that
# committed publishes nothing again. A table of its own rather than a column of `records`
# (migration 0034): a unique index across a topic's partitions is one that a `records`
# partitioned by log partition could not declare. A record's row is written in the database
# transaction that writes the record and deleted with it (app.storage.cleaning.
# forget_deleted_records), so an id is free again once its record is.
record_message_ids = Table(
    "record_message_ids",
    metadata,
    Column("topic_id", Integer, nullable=False),
    Column("message_id", Text, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    PrimaryKeyConstraint("topic_id", "message_id"),
    # The cleaner's: the ids of a range of a partition's offsets.
    UniqueConstraint("topic_id", "partition", "offset", name="uq_record_message_ids_record"),
)

# One row per batch: the records one append put into one partition, at the consecutive offsets
# [base_offset, base_offset + record_count), and one row per control marker (record_count 1).
# It is where a record's producer lives (producer id, epoch, the batch's first sequence, txn
# id): records carry none of these since migration 0023. And where the batch stands: `state`
# (RecordState; NULL for a marker) and `commit_position`, the position at which read_committed
# exposes it, set exactly when the state is committed: a plain batch's last offset, written by
# its append; a transactional batch's COMMIT marker offset, written by the completion that
# writes the marker (migration 0019; docs/DESIGN-batches.md). Written by every writer in the
# database transaction that writes its records, deleted with a run's last record
# (app.storage.cleaning.forget_deleted_records); every reader takes a record's producer,
# transaction and outcome from it.
record_batches = Table(
    "record_batches",
    metadata,
    Column("topic_id", Integer, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("base_offset", BigInteger, nullable=False),
    Column("record_count", Integer, nullable=False),
    Column("producer_id", BigInteger, nullable=True),
    Column("producer_epoch", Integer, nullable=True),
    Column("base_sequence", Integer, nullable=True),  # record i's sequence is base_sequence + i
    Column("txn_id", BigInteger, nullable=True),
    Column("control_type", String(8), nullable=True),
    Column("state", String(10), nullable=True),
    Column("commit_position", BigInteger, nullable=True),
    # A data batch not in a transaction (with no producer since migration 0041, an idempotent
    # producer's since 0044; such batches written before keep false), written with its
    # records in one database transaction:
    # its records are committed exactly when they exist, each at its own offset, and are
    # flagged too (records.self_committed). The view committed_records reads them without this
    # row, and reads through this row only the batches not flagged (docs/DESIGN-batches.md,
    # "Self-committed records").
    Column("self_committed", Flag, nullable=False, server_default=false()),
    PrimaryKeyConstraint("topic_id", "partition", "base_offset"),
    one_of("control_type", ControlType, nullable=True),
    one_of("state", RecordState, nullable=True),
)
# read_committed: the committed batches of a partition in commit order.
Index(
    "ix_record_batches_committed",
    record_batches.c.topic_id,
    record_batches.c.partition,
    record_batches.c.commit_position,
    record_batches.c.base_offset,
    sqlite_where=text("commit_position IS NOT NULL"),
    postgresql_where=text("commit_position IS NOT NULL"),
)
# read_committed: the committed transactional batches of a partition in commit order, the only
# ones that can lie below their position (read_committed.first_record_committed_from; migration
# 0022). Without it that walk reads every plain batch from the slowest group's position on.
Index(
    "ix_record_batches_committed_txn",
    record_batches.c.topic_id,
    record_batches.c.partition,
    record_batches.c.commit_position,
    sqlite_where=text("txn_id IS NOT NULL AND commit_position IS NOT NULL"),
    postgresql_where=text("txn_id IS NOT NULL AND commit_position IS NOT NULL"),
)
# read_committed: the committed transactional batches of a partition by their span, how far
# each lies below its COMMIT marker (migration 0050): the largest, one probe, bounds the walk of
# what lies across an offset (read_committed.committed_across), as no batch across it has its
# commit position further past it than that. `control_type IS NULL` (true of every row the
# other two conditions hold: a marker's row has no commit_position) is what that walk's WHERE
# does not say, so that neither database can take this index for the walk, read whole.
# A committed transactional batch's span, how far its first offset lies below its COMMIT
# marker: the expression this index holds, and the one read_committed.widest_txn_span_stmt
# reads off it (written alike, or the index would not serve).
TXN_SPAN = record_batches.c.commit_position - record_batches.c.base_offset
Index(
    "ix_record_batches_txn_span",
    record_batches.c.topic_id,
    record_batches.c.partition,
    TXN_SPAN,
    sqlite_where=text("txn_id IS NOT NULL AND commit_position IS NOT NULL AND control_type IS NULL"),
    postgresql_where=text("txn_id IS NOT NULL AND commit_position IS NOT NULL AND control_type IS NULL"),
)
# The view committed_records: the committed batches it reads through their rows (those not
# self-committed) in commit order, so that a window of positions over a partition of
# self-committed batches reads none of theirs. Built CONCURRENTLY by migration 0041.
Index(
    "ix_record_batches_committed_joined",
    record_batches.c.topic_id,
    record_batches.c.partition,
    record_batches.c.commit_position,
    sqlite_where=text("commit_position IS NOT NULL AND NOT self_committed"),
    postgresql_where=text("commit_position IS NOT NULL AND NOT self_committed"),
)
# A transaction's batches and marker in a partition: what a completion stamps.
Index(
    "ix_record_batches_txn",
    record_batches.c.topic_id,
    record_batches.c.partition,
    record_batches.c.txn_id,
    sqlite_where=text("txn_id IS NOT NULL"),
    postgresql_where=text("txn_id IS NOT NULL"),
)

# Kafka's TransactionMetadata: one row per transactional_id.
# PostgreSQL: where txn ids come from (app.storage.producers.next_txn_id); SQLite uses the
# counters row `txn_id`, which PostgreSQL no longer does.
txn_ids = Sequence("txn_ids", metadata=metadata)
# PostgreSQL: where offset writes take their numbers (app.storage.offsets.next_writes); SQLite
# uses the counters row `offset_write`.
offset_writes = Sequence("offset_writes", metadata=metadata)

transactions = Table(
    "transactions",
    metadata,
    Column("transactional_id", String(255), primary_key=True),
    Column("producer_id", BigInteger, nullable=False),
    Column("producer_epoch", Integer, nullable=False),
    Column("state", String(24), nullable=False),
    Column("txn_id", BigInteger, nullable=True),
    Column("transaction_timeout_ms", BigInteger, nullable=False),
    Column("txn_started_ms", BigInteger, nullable=True),
    Column("updated_ms", BigInteger, nullable=False),
    # KIP-360: the epoch a live producer asked to bump from, so that a retry of that request
    # is answered again instead of being fenced. Cleared by any other bump, and by the Prepare
    # of a transaction begun since (while Prepared it is only a KeepPrepared bump's).
    Column("last_producer_epoch", Integer, nullable=True),
    # The transaction protocol version the producer chose at InitProducerId.
    Column("transaction_version", SmallInteger, nullable=False, server_default="1"),
    # The producer id an epoch bump replaced when the epoch was exhausted, so that a retry of
    # the version 2 Commit or Abort, or of the KIP-360 recovery, that bumped it (old producer
    # id, last_producer_epoch) is answered again. Cleared by any other bump.
    Column("previous_producer_id", BigInteger, nullable=True),
    # When the producer's Sends are made durable (app.domain.types.Durability), chosen at
    # InitProducerId; every row stored before migration 0025 is "send".
    Column("durability", String(8), nullable=False, server_default="send"),
    # Never PrepareEpochFence, which is computed and never stored (app.domain.transaction).
    one_of("state", STORED_STATES),
    one_of("transaction_version", TransactionVersion),
    one_of("durability", Durability),
)
# The coordinator's scans by state, and the high watermark's (storage.topics.high_watermark):
# the Ongoing transactions of producers of durability "commit", one index range (migration 0026).
Index("ix_transactions_state_durability", transactions.c.state, transactions.c.durability)

# The partitions of each open (or completing) transaction; a row is removed when that
# partition's control marker is written. first_offset gives the last stable offset.
transaction_partitions = Table(
    "transaction_partitions",
    metadata,
    Column("transactional_id", String(255), nullable=False),
    Column("topic_id", Integer, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("txn_id", BigInteger, nullable=False),
    Column("first_offset", BigInteger, nullable=False),
    PrimaryKeyConstraint("transactional_id", "topic_id", "partition"),
)
Index(
    "ix_transaction_partitions_partition",
    transaction_partitions.c.topic_id,
    transaction_partitions.c.partition,
)


class OffsetMetadataText(TypeDecorator[str]):
    """A committed offset's metadata: any string, NUL included, given back as it was committed.

    Kafka stores whatever string a client commits, and librdkafka sends its metadata with a
    trailing NUL; PostgreSQL's text cannot hold NUL. So the column holds it escaped, alike on
    both databases (a row means the same on both): a backslash is stored as two, a NUL as a
    backslash and '0'. The escaping is injective, so reading undoes it exactly; a backslash
    followed by anything else, which the escaping never writes, is read as itself. Whoever reads
    the table with SQL sees the escaped form (docs/ARCHITECTURE.md, below the table of tables);
    migration 0030 brought the rows stored before to it."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        if value is None or ("\\" not in value and "\x00" not in value):
            return value
        return value.replace("\\", "\\\\").replace("\x00", "\\0")

    def process_result_value(self, value: str | None, dialect: Any) -> str | None:
        if value is None or "\\" not in value:
            return value
        return _ESCAPED.sub(_unescaped, value)


_ESCAPED = re.compile(r"\\([\\0])")


def _unescaped(match: re.Match[str]) -> str:
    return "\x00" if match[1] == "0" else "\\"


# Group offsets staged inside an open transaction (AddOffsets); they become committed offsets
# when the transaction commits and are dropped when it aborts.
transaction_offsets = Table(
    "transaction_offsets",
    metadata,
    Column("transactional_id", String(255), nullable=False),
    Column("group_id", String(255), nullable=False),
    Column("topic_id", Integer, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("txn_id", BigInteger, nullable=False),
    Column("committed_offset", BigInteger, nullable=False),
    Column("metadata", OffsetMetadataText, nullable=True),
    Column("leader_epoch", Integer, nullable=False, server_default=text("-1")),  # NO_LEADER_EPOCH: none
    # The staging door's read order (app.domain.offsets.ReadOrder), carried to group_offsets.
    Column("read_order", String(6), nullable=False, server_default=ReadOrder.COMMIT.value),
    # When it was staged, in the order of every offset write (offsets.next_writes, migration
    # 0037): the transaction's commit writes it only over an offset written before it.
    Column("write_seq", BigInteger, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("transactional_id", "group_id", "topic_id", "partition"),
    one_of("read_order", ReadOrder),
)
Index(
    "ix_transaction_offsets_group",
    transaction_offsets.c.group_id,
    transaction_offsets.c.topic_id,
    transaction_offsets.c.partition,
)

group_offsets = Table(
    "group_offsets",
    metadata,
    Column("group_id", String(255), nullable=False),
    Column("topic_id", Integer, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("committed_offset", BigInteger, nullable=False),
    Column("metadata", OffsetMetadataText, nullable=True),
    Column("committed_ms", BigInteger, nullable=False),
    # Kafka's committed_leader_epoch of the offset (OffsetCommit v6+, TxnOffsetCommit v2+);
    # app.domain.offsets.NO_LEADER_EPOCH where the commit carried none.
    Column("leader_epoch", Integer, nullable=False, server_default=text("-1")),
    # What the offset means (app.domain.offsets.ReadOrder, migration 0036): a commit position
    # (the HTTP door's commits) or Kafka's offset (the Kafka door's). Every writer names it;
    # the default serves only processes of an older revision still running during an upgrade.
    Column("read_order", String(6), nullable=False, server_default=ReadOrder.COMMIT.value),
    # When it was written, in the order of every offset write, staged ones too
    # (offsets.next_writes, migration 0037; 0: before that migration).
    Column("write_seq", BigInteger, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("group_id", "topic_id", "partition"),
    one_of("read_order", ReadOrder),
)

# Consumer groups (KIP-447 needs their generations). One row per group; a membership change
# bumps generation_id, and offset commits that name an older generation are refused.
#
# The Kafka door's groups (Kafka's classic protocol, app.domain.group) keep their rebalance here
# too, so that several `serve` processes are one coordinator: protocol_type (None: the HTTP
# door's group; kept when the last member leaves, until a door takes the group) and the assignor chosen (protocol_name), the state, the leader, and until when
# the members have to join again (rebalance_deadline_ms); only the waiting requests are in memory.
consumer_groups = Table(
    "consumer_groups",
    metadata,
    Column("group_id", String(255), primary_key=True),
    Column("generation_id", Integer, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("protocol_type", String(255), nullable=True),
    Column("protocol_name", String(255), nullable=True),
    Column("state", String(24), nullable=False, server_default=StoredGroupState.STABLE.value),
    Column("leader_id", String(255), nullable=True),
    Column("rebalance_deadline_ms", BigInteger, nullable=True),
    # While a group that was empty delays its first rebalance (OUTBOX_GROUP_INITIAL_REBALANCE_DELAY_MS,
    # migration 0028; rebalance_deadline_ms then ends the current period of the delay): what is
    # left of the first member's rebalance timeout to extend it by (Kafka's remainingMs; NULL:
    # no initial delay under way), and whether a member was added during the current period
    # (Kafka's newMemberAdded), which extends it. initial_rebalance_generation (migration 0029):
    # the generation the group was at when the delay began (the delay forms the next one). The
    # delay is under way only while the group is still at it: a process from before 0028 ends a
    # join phase without knowing the delay's columns, and leaves them behind (groups.group).
    Column("initial_rebalance_remaining_ms", BigInteger, nullable=True),
    Column("new_member_added", Boolean, nullable=False, server_default=false()),
    Column("initial_rebalance_generation", Integer, nullable=True),
    one_of("state", StoredGroupState),
)

group_members = Table(
    "group_members",
    metadata,
    Column("group_id", String(255), nullable=False),
    Column("member_id", String(255), nullable=False),
    Column("topics", Text, nullable=False),  # JSON list of subscribed topic names
    Column("assignment", Text, nullable=False),  # JSON list of [topic, partition]
    Column("session_timeout_ms", Integer, nullable=False),
    Column("last_heartbeat_ms", BigInteger, nullable=False),
    Column("joined_ms", BigInteger, nullable=False),
    # A Kafka member's: the protocols it offered (JSON [[name, base64 metadata], ...]), its
    # rebalance timeout, the generation whose rebalance it has joined, and the assignment bytes
    # the leader gave it (SyncGroup). NULL for the HTTP door's members.
    Column("protocols", Text, nullable=True),
    Column("rebalance_timeout_ms", Integer, nullable=True),
    Column("join_generation", Integer, nullable=True),
    Column("member_assignment", LargeBinary, nullable=True),
    # A static member's group instance id (KIP-345; migration 0018): NULL for a dynamic member.
    Column("group_instance_id", String(255), nullable=True),
    # What DescribeGroups shows (migration 0021): the client id of the request that added the
    # member and the address it joined from, at most 255 characters each
    # (app.domain.group.member_client); NULL where not known (members from before 0021, and
    # the HTTP door's client id: its API has none).
    Column("client_id", String(255), nullable=True),
    Column("client_host", String(255), nullable=True),
    PrimaryKeyConstraint("group_id", "member_id"),
)
# One member holds an instance id of its group at a time (NULLs are distinct: dynamic members).
Index("ix_group_members_instance", group_members.c.group_id, group_members.c.group_instance_id, unique=True)

# Kafka's ACL bindings (app.domain.acl): who may do what to which resources. Read whole into
# every API process's cache (app.services.security), which reloads it when the counter
# `security_version` moves: every change to acls or api_keys moves it in the same transaction.
acls = Table(
    "acls",
    metadata,
    Column("acl_id", Integer, primary_key=True, autoincrement=True),
    Column("principal", String(255), nullable=False),  # User:<name>, or User:* for everyone
    Column("resource_type", String(24), nullable=False),
    Column("resource_name", String(255), nullable=False),
    Column("pattern_type", String(16), nullable=False),
    Column("operation", String(24), nullable=False),
    Column("permission", String(8), nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    UniqueConstraint("principal", "resource_type", "resource_name", "pattern_type", "operation", "permission",
                     name="uq_acls_binding"),
    one_of("resource_type", ResourceType),
    one_of("pattern_type", PatternType),
    one_of("operation", Operation),
    one_of("permission", Permission),
)

# API keys: `outbox_<key_id>_<secret>`. Only a slow hash of the secret is stored (scrypt, salted
# per key; app.services.security), so a copy of the database does not give the keys away.
api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", String(32), primary_key=True),
    Column("principal", String(255), nullable=False),
    Column("secret_hash", String(255), nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("revoked_ms", BigInteger, nullable=True),
    # SCRAM's credentials of the key (app.domain.scram): one salt and iteration count for both
    # mechanisms, shared by every key of the principal, since a SCRAM server states the salt
    # before it knows which key the client holds; StoredKey and ServerKey per mechanism. NULL
    # for keys created before migration 0024, which authenticate with SASL/PLAIN only.
    Column("scram_salt", LargeBinary, nullable=True),
    Column("scram_iterations", Integer, nullable=True),
    Column("scram_sha_256_stored_key", LargeBinary, nullable=True),
    Column("scram_sha_256_server_key", LargeBinary, nullable=True),
    Column("scram_sha_512_stored_key", LargeBinary, nullable=True),
    Column("scram_sha_512_server_key", LargeBinary, nullable=True),
)
Index("ix_api_keys_principal", api_keys.c.principal)
