"""The rows of record_batches an append and a completion write (docs/DESIGN-batches.md, step 1):
a data batch's row (the records one append put into one partition), with where the batch
stands once appended (batch_state, commit_position), and a control marker's row. Each row is
built here in one of two forms: a dict for an INSERT of its own (INSERT_BATCH), or, on
PostgreSQL, a part of the statement that takes the batch's offsets (batch_row_part), which
knows the batch's offsets only as the new log end; commit_position gives both forms the same
rule. What moves an open batch on (the completion's stamp) is app.storage.markers'."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import BigInteger, Integer, String, bindparam, exists, literal, select

from app.domain.types import ControlType, RecordState
from app.storage.log_end import TAKEN, TAKEN_JOINING, Joining
from app.storage.tables import Flag, record_batches

if TYPE_CHECKING:
    from app.storage.markers import MarkerOwner

INSERT_BATCH = record_batches.insert()

Position = TypeVar("Position")


def batch_state(txn_id: int | None, with_marker: bool) -> RecordState:
    """Where a batch stands once appended: a plain (or idempotent) batch is committed; a
    transactional one is open until its completion stamps it (markers.write_control_markers),
    unless the append commits it itself (`with_marker`: its COMMIT marker follows it, written
    with it)."""
    return RecordState.OPEN if txn_id is not None and not with_marker else RecordState.COMMITTED


def commit_position(state: RecordState, run_end: Position) -> Position | None:
    """The commit position of a batch just appended in `state` (batch_state), whose run ends
    just before `run_end`: its records, and its COMMIT marker when the append writes one.
    Committed, it is the run's last offset: a plain batch's last record's, or the marker's (a
    transactional batch is exposed at its COMMIT marker); open, there is none yet.

    `run_end` is an offset (batch_row) or the SQL expression of the new log end (batch_row_part):
    the one rule for both, so that a batch row reads the same whichever statement wrote it."""
    return run_end - 1 if state is RecordState.COMMITTED else None  # type: ignore[operator]


def self_committed(txn_id: int | None) -> bool:
    """Whether a data batch appended in this transaction is self-committed (its row's and its
    records' self_committed, docs/DESIGN-batches.md): one in no transaction, with no producer
    or an idempotent producer's, whose records are committed exactly when they exist, each at
    its own offset, as every writer writes them with its row (and an idempotent batch's
    sequence state) in one database transaction. A transactional batch's records exist before
    their commit; a marker is never data. An idempotent batch's records carry its producer id
    (records.producer_id, migration 0044), which the view reads without the batch row."""
    return txn_id is None


def batch_row(topic_id: int, partition: int, base_offset: int, record_count: int, *, base_sequence: int | None,
              producer_id: int | None, producer_epoch: int | None, txn_id: int | None,
              with_marker: bool) -> dict[str, object]:
    """The record_batches row of a batch of `record_count` records appended at `base_offset`
    (`with_marker`: its COMMIT marker follows it at the next offset, written with it)."""
    state = batch_state(txn_id, with_marker)
    return {
        "topic_id": topic_id,
        "partition": partition,
        "base_offset": base_offset,
        "record_count": record_count,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "base_sequence": base_sequence,
        "txn_id": txn_id,
        "control_type": None,
        "state": state.value,
        "commit_position": commit_position(state, base_offset + record_count + (1 if with_marker else 0)),
        "self_committed": self_committed(txn_id),
    }


def marker_batch_row(topic_id: int, partition: int, offset: int, owner: MarkerOwner,
                     control_type: ControlType) -> dict[str, object]:
    """The record_batches row of a control marker (a batch of one offset, with no state and no
    position: a marker is never data): written by a completion (markers.write_control_markers),
    and by an append that carries a whole transaction's markers."""
    return {
        "topic_id": topic_id,
        "partition": partition,
        "base_offset": offset,
        "record_count": 1,
        "producer_id": owner.producer_id,
        "producer_epoch": owner.producer_epoch,
        "base_sequence": None,
        "txn_id": owner.txn_id,
        "control_type": control_type.value,
        "state": None,
        "commit_position": None,
        "self_committed": False,
    }


# A batch's row as part of the statement that takes its offsets (PostgreSQL: a data-modifying
# WITH over TAKEN), so that it costs a Send no round trip: the batch starts at the new log end
# less the offsets taken (p_count: its records', and its marker's if it has one), and its run
# ends there. The r_ bind parameters are batch_row_params'; the p_ ones take_offsets_with's.
_COLUMNS = ("topic_id", "partition", "base_offset", "record_count", "producer_id", "producer_epoch",
            "base_sequence", "txn_id", "state", "commit_position", "self_committed")


def batch_row_part(state: RecordState, written: Any = None, joining: Joining | None = None, *,
                   flagged: bool = False) -> Any:
    """The CTE that writes the row of a batch appended in `state` (batch_state). `written`: the
    statement's part whose rows say the batch is appended (none, and the batch row is not
    written either). `joining`: over TAKEN_JOINING[joining], whose txn_id the row takes.
    `flagged`: a batch in no transaction (self_committed)."""
    taken = TAKEN if joining is None else TAKEN_JOINING[joining]
    position = commit_position(state, taken.c.next_offset)
    row = select(
        bindparam("p_topic_id", type_=Integer), bindparam("p_partition", type_=Integer),
        taken.c.next_offset - bindparam("p_count", type_=BigInteger), bindparam("p_records", type_=Integer),
        bindparam("r_producer_id", type_=BigInteger), bindparam("r_producer_epoch", type_=Integer),
        bindparam("r_base_sequence", type_=Integer),
        bindparam("r_txn_id", type_=BigInteger) if joining is None else taken.c.txn_id,
        literal(state.value, String),
        literal(None, BigInteger) if position is None else position,
        literal(flagged, Flag),
    ).select_from(taken)
    if written is not None:
        row = row.where(exists(select(written)))
    return record_batches.insert().from_select(list(_COLUMNS), row).cte("batch")


def batch_row_params(*, base_sequence: int | None, producer_id: int | None, producer_epoch: int | None,
                     txn_id: int | None) -> dict[str, Any]:
    """The bind parameters of batch_row_part's row (the p_ ones take_offsets_with fills)."""
    return {"r_producer_id": producer_id, "r_producer_epoch": producer_epoch, "r_base_sequence": base_sequence,
            "r_txn_id": txn_id}


# A plain batch on PostgreSQL (committed by its append, self-committed): its offsets and its
# batch row in one statement.
TAKE_OFFSETS_WRITING_BATCH = select(TAKEN.c.next_offset).add_cte(
    batch_row_part(RecordState.COMMITTED, flagged=self_committed(None)))
