"""Control markers: the coordinator's COMMIT or ABORT written into each partition of a
transaction, which is what moves the transaction's records into (or out of) read_committed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import (BigInteger, ColumnElement, Connection, Integer, String, and_, bindparam, exists,
                        insert, literal, select, tuple_, update)

from app.domain.transit import TxnTransit, marker_producer
from app.domain.types import ControlType, RecordState
from app.storage import dialect
from app.storage.batch_rows import INSERT_BATCH, marker_batch_row
from app.storage.log_end import TAKEN, take_offsets, take_offsets_with
from app.storage.tables import record_batches, records


_INSERT_RECORD = insert(records)


def _stamp(control_type: ControlType, batches: Any, marker_offset: Any) -> Any:
    """A completion's stamp of its transactions' open `batches` (a condition on record_batches)
    in the partitions it wrote markers into: committed at the COMMIT marker's offset
    (`marker_offset`, an SQL expression), or aborted. Only ever from open, and only by the
    completion that took the marker's offset under the partition's lock, in its database
    transaction: a position written later, or twice, could land below a high watermark a reader
    already holds (docs/DESIGN-batches.md, "Atomic visibility")."""
    stmt = update(record_batches).where(batches, record_batches.c.state == RecordState.OPEN.value)
    if control_type is ControlType.COMMIT:
        return stmt.values(state=RecordState.COMMITTED.value, commit_position=marker_offset)
    return stmt.values(state=RecordState.ABORTED.value)


# The stamp of every partition the markers went into, in one statement: the COMMIT marker's
# offset read from its batch row, written just before in the same database transaction.
_marker = record_batches.alias("marker")
_STAMP_KEYS = (tuple_(record_batches.c.topic_id, record_batches.c.partition, record_batches.c.txn_id)
               .in_(bindparam("s_keys", expanding=True)))
_STAMP = {
    control_type: _stamp(
        control_type, _STAMP_KEYS,
        select(_marker.c.base_offset)
        .where(_marker.c.topic_id == record_batches.c.topic_id, _marker.c.partition == record_batches.c.partition,
               _marker.c.txn_id == record_batches.c.txn_id, _marker.c.control_type == ControlType.COMMIT.value)
        .scalar_subquery())
    for control_type in ControlType
}


# On PostgreSQL a marker is written by the statement that takes its offset (a data-modifying
# WITH over TAKEN, as a Send's batch row is: batch_rows.batch_row_part), with its batch row and
# the stamp of its transaction's batches in the partition: one round trip a partition, where
# take_offsets and then the records, the batch rows and the stamp were four for one partition.
# The rows are marker_row's and marker_batch_row's, their values bind parameters and the offset
# the new log end less one. Each part reads `taken` (the stamp through a one-time filter, EXISTS
# over it), so the partition's lock is held before anything else of the statement runs, as in
# separate statements. The parts cannot see each other's rows: the stamp takes the marker's
# offset from `taken`, not from the marker's batch row.
@cache
def _take_offset_writing_marker_stmt(control_type: ControlType) -> Any:
    offset = TAKEN.c.next_offset - 1
    topic_id, partition = bindparam("p_topic_id", type_=Integer), bindparam("p_partition", type_=Integer)
    owner = MarkerOwner(bindparam("m_transactional_id", type_=String), bindparam("m_txn_id", type_=BigInteger),  # type: ignore[arg-type]
                        bindparam("m_producer_id", type_=BigInteger), bindparam("m_producer_epoch", type_=Integer))
    stmt = select(TAKEN.c.next_offset)
    for name, table, row in (
        ("marker", records, marker_row(topic_id, partition, offset, owner, control_type,  # type: ignore[arg-type]
                                       bindparam("m_now_ms", type_=BigInteger))),  # type: ignore[arg-type]
        ("marker_batch", record_batches, marker_batch_row(topic_id, partition, offset, owner, control_type)),  # type: ignore[arg-type]
    ):
        values = select(*(v if isinstance(v, ColumnElement) else literal(v, table.c[c].type)
                          for c, v in row.items())).select_from(TAKEN)
        stmt = stmt.add_cte(insert(table).from_select(list(row), values).cte(name))
    stamp = _stamp(control_type, and_(record_batches.c.topic_id == topic_id, record_batches.c.partition == partition,
                                      record_batches.c.txn_id == owner.txn_id),
                   select(offset).scalar_subquery()).where(exists(select(TAKEN.c.next_offset)))
    return stmt.add_cte(stamp.cte("stamp"))


@dataclass(frozen=True, slots=True)
class MarkerOwner:
    """The transaction a control marker ends: whose partitions it claims, and the producer
    identity the marker carries."""

    transactional_id: str
    txn_id: int
    producer_id: int
    producer_epoch: int

    @classmethod
    def of(cls, decision: TxnTransit) -> MarkerOwner:
        """The owner of a decided transaction's markers (`decision`: the transit that decides
        it, or TxnTransit of a decision stored), with the producer id and epoch
        app.domain.transit.marker_producer gives them."""
        decided = decision.after
        assert decided.txn_id is not None
        return cls(decided.transactional_id, decided.txn_id, *marker_producer(decision))


def write_control_markers(
    conn: Connection,
    owners: Sequence[MarkerOwner],
    *,
    control_type: ControlType,
    now_ms: int,
    claimed_by_owner: Sequence[Sequence[tuple[int, int]]],
) -> list[tuple[int, int, int]]:
    """Write each owner transaction's marker in every partition that still lacks one, in the
    caller's database transaction. Returns
    (topic_id, partition, offset) of each marker written now, in partition order.

    `claimed_by_owner`: each owner's partitions (topic_id, partition), as the caller claimed
    them in this database transaction (transactions.claim_completion). The
    transaction_partitions rows are the claims: deleting them and appending the markers
    commit together, so a partition has its marker exactly when its row is gone, and a second
    worker (or a retry) finds nothing left to claim. Callers hold the transactions' row locks
    (FOR UPDATE), so two completions of one transaction never run side by side.

    The markers take their partitions' locks in (topic_id, partition) order, as every appender
    does, across all the owners together: a joint commit that completed its transactions one
    after another would lock partition 3 for the first and then partition 1 for the second,
    and deadlock with an appender holding 1 and waiting for 3.

    """
    claimed: list[tuple[int, int, int]] = []  # (topic_id, partition, index of the owner)
    for i, keys in enumerate(claimed_by_owner):
        claimed.extend((topic_id, partition, i) for topic_id, partition in keys)
    claimed.sort()
    if conn.dialect.name == "postgresql":
        stmt = _take_offset_writing_marker_stmt(control_type)
        written = []
        for topic_id, partition, i in claimed:
            owner = owners[i]
            params = {"m_transactional_id": owner.transactional_id, "m_txn_id": owner.txn_id,
                      "m_producer_id": owner.producer_id, "m_producer_epoch": owner.producer_epoch,
                      "m_now_ms": now_ms}
            end = take_offsets_with(conn, stmt, params, topic_id, partition, 1, 0, records=0).next_offset
            written.append((topic_id, partition, end - 1))
        return written
    written = [
        (topic_id, partition, take_offsets(conn, topic_id, partition, 1, records=0), owners[i])
        for topic_id, partition, i in claimed
    ]
    if written:
        dialect.execute_rows(
            conn,
            _INSERT_RECORD,
            [marker_row(topic_id, partition, offset, owner, control_type, now_ms)
             for topic_id, partition, offset, owner in written],
        )
        dialect.execute_rows(
            conn,
            INSERT_BATCH,
            [marker_batch_row(topic_id, partition, offset, owner, control_type)
             for topic_id, partition, offset, owner in written],
        )
        conn.execute(
            _STAMP[control_type],
            {"s_keys": [(topic_id, partition, owner.txn_id) for topic_id, partition, _, owner in written]},
        )
    return [(topic_id, partition, offset) for topic_id, partition, offset, _ in written]


def marker_row(topic_id: int, partition: int, offset: int, owner: MarkerOwner, control_type: ControlType,
               now_ms: int) -> dict[str, object]:
    """The `records` row of a control marker (every column it sets; the others stay NULL):
    written here, and by an append that carries a whole transaction's markers
    (append.append_batches' `commit_marker`). Its transaction and producer are on its batch
    row (batch_rows.marker_batch_row), as a data record's are on its batch's."""
    return {
        "topic_id": topic_id,
        "partition": partition,
        "offset": offset,
        "timestamp_ms": now_ms,
        "key": None,
        "value": None,
        "headers": None,
        "control_type": control_type.value,
    }
