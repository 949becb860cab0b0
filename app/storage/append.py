"""Appending data records to partitions (append_batches): offsets (log_end), the producer's
sequence verdict (sequence_state, app.domain.producer), the records (record_rows), their batch
rows (batch_rows) and the transaction's partitions, all in the caller's database transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from sqlalchemy import Connection

from app.domain.errors import OffsetMismatch
from app.domain.producer import BatchVerdict, check_sequence, next_batch_condition, starts_epoch
from app.domain.transaction import JoinCondition
from app.domain.transit import BeginCondition
from app.domain.types import ControlType, RecordState, ValueFormat
from app.storage import dialect
from app.storage.dialect import RowLock
from app.storage.batch_rows import (
    INSERT_BATCH,
    TAKE_OFFSETS_WRITING_BATCH,
    batch_row,
    batch_row_params,
    batch_state,
    marker_batch_row,
    self_committed,
)
from app.storage.log_end import Joining, NotJoined, take_offsets, take_offsets_with
from app.storage.markers import MarkerOwner, marker_row
from app.storage.producers import current_state
from app.storage.record_rows import BatchToAppend, write_records
from app.storage.seen_topics import TopicChanged
from app.storage.sequence_state import (
    batch_state_params,
    earlier_batches,
    read_producer_state,
    take_offsets_writing_state_stmt,
    write_batch_state,
    write_states,
)
from app.storage.tables import transaction_partitions
from app.storage.transactions import joined_params


@dataclass(frozen=True, slots=True)
class AppendResult:
    topic_id: int
    partition: int
    base_offset: int
    record_count: int
    duplicate: bool
    txn_id: int | None = None  # the transaction the batch joined (a transactional one's)


def _partition_key(b: BatchToAppend) -> tuple[int, int]:
    return (b.topic_id, b.partition)


def _return_offsets(conn: Connection, batch: BatchToAppend, taken: int) -> None:
    """Undo the batch's take_offsets of `taken` offsets in this database transaction (its row
    lock is still held, so nobody took offsets after it)."""
    take_offsets(conn, batch.topic_id, batch.partition, -taken, -batch.size_bytes, records=-len(batch.records))


def append_batches(
    conn: Connection,
    batches: Sequence[BatchToAppend],
    *,
    producer_id: int | None,
    producer_epoch: int | None,
    transactional_id: str | None,
    txn_id: int | None,
    now_ms: int,
    commit_marker: MarkerOwner | None = None,
    holder: str | None = None,
    join: JoinCondition | BeginCondition | None = None,
) -> list[AppendResult]:
    """Append every batch, all or nothing, in the caller's database transaction.

    Batches must name distinct partitions. Results come back in the order of `batches`.

    Each batch appended gets its row in record_batches (app.storage.batch_rows), in this
    database transaction; a duplicate, which appends nothing, gets none.

    A transactional batch adds its partition to its transaction (transaction_partitions: what
    the last stable offset reads, and the claims its markers take back). `commit_marker`: the
    batches are a whole transaction, begun in this database transaction and committed by it
    (a version 2 Commit that carries them), so nobody can see it open: each batch is followed
    by the COMMIT marker of `commit_marker` at the next offset, taken and written with it,
    and no partition is added.

    `holder`: the batches are an idempotent producer's Send, by this principal: its producer id
    must be held by it, without a transactional id, at producer_epoch. That is tested in the
    statement that writes each batch's sequence state (sequence_state._PRODUCER_HOLDS), and asked of the
    stored producer (check_idempotent_use, for the refusal to give) only where that statement
    writes nothing. A transactional Send's caller has checked its transaction instead, or
    gives `join` (PostgreSQL, `txn_id` None): the transaction's row is read by the statement that
    takes the first batch's offsets, which takes them only where the row holds that condition
    (log_end.TAKEN_JOINING), and which answers the txn_id the batches join; the row stays locked
    from then on (FOR SHARE; FOR NO KEY UPDATE where a BeginCondition began it). NotJoined
    where it does not hold, before any batch is written.
    """
    results: dict[tuple[int, int], AppendResult] = {}
    # Each batch to write, with its base offset: a JSON topic's, and a bytes topic's
    # (record_rows.BYTES_RECORD_COLUMNS), whose rows go in a COPY of their own.
    appended: list[tuple[BatchToAppend, int]] = []
    bytes_appended: list[tuple[BatchToAppend, int]] = []
    marker_rows: list[dict] = []
    batch_rows: list[dict] = []  # record_batches: each batch appended, and each marker written with one
    state_rows: list[dict] = []
    txn_partition_rows: list[dict] = []
    extra = 0 if commit_marker is None else 1  # the marker's offset after each batch
    producer_checked = holder is None
    # The producer's id was taken back after expiry (StoredProducer.taken_back): read with the
    # producer's row, where a batch's statement wrote nothing.
    taken_back = False

    for batch in sorted(batches, key=_partition_key):
        count = len(batch.records)
        # The first batch of a Send that joins by `join`: its statement reads the transaction's
        # row; the later ones run under the lock it took, with the txn_id it answered.
        joins = join is not None and txn_id is None
        already_in_transaction = state_written = False
        expected = None
        if producer_id is not None:
            assert producer_epoch is not None and batch.base_sequence is not None
            expected = next_batch_condition(producer_epoch, batch.base_sequence, count)
        batch_row_written = claimed = False
        postgresql = conn.dialect.name == "postgresql"
        one_statement = producer_id is not None and (
            expected is not None or starts_epoch(batch.base_sequence, count))  # type: ignore[arg-type]
        if postgresql and (one_statement or producer_id is None):
            row_params = batch_row_params(base_sequence=batch.base_sequence, producer_id=producer_id,
                                          producer_epoch=producer_epoch, txn_id=txn_id)
        # A topic from a process's copy (seen_topics: a plain or idempotent Send's, a Commit's
        # carried batches') is confirmed by the statements over log_end.TAKEN below, which take
        # no offsets from a row that has changed; any other way of taking them would not confirm it.
        assert batch.topic_row is None or postgresql
        if joins and not (one_statement and postgresql and commit_marker is None):
            # Any other batch needs its txn_id before its offsets are taken: the row read first.
            raise NotJoined("a batch that no one statement judges joins after reading its transaction's row")
        if one_statement and postgresql:
            # A running producer's next batch, or the first of its epoch: offsets, state, batch
            # row and the transaction's claim of the partition in one statement.
            claims = (txn_id is not None or joins) and commit_marker is None
            # A batch that joins is a transactional one of an open transaction (batch_state's OPEN).
            record_state = RecordState.OPEN if joins else batch_state(txn_id, commit_marker is not None)
            row = take_offsets_with(
                conn, take_offsets_writing_state_stmt(expected is None, holder is not None, record_state, claims,
                                                      Joining.of(join) if joins else None,  # type: ignore[arg-type]
                                                      flagged=not joins and self_committed(txn_id)),
                {**batch_state_params(expected, producer_id=producer_id, producer_epoch=producer_epoch,  # type: ignore[arg-type]
                                      transactional_id=transactional_id, txn_id=txn_id, batch=batch,
                                      base_offset=None, now_ms=now_ms, holder=holder), **row_params,
                 **(joined_params(join) if joins else {})},  # type: ignore[arg-type]
                batch.topic_id, batch.partition, count + extra, batch.size_bytes, records=count,
                topic_row=batch.topic_row, joining=joins,
            )
            if joins:
                txn_id = row.txn_id
            base_offset = row.next_offset - (count + extra)
            state_written, already_in_transaction = row.written, row.first_offset is not None
            batch_row_written = state_written
            claimed = claims and state_written
            tried = True
        elif producer_id is None and postgresql:
            # A plain batch: offsets and batch row in one statement.
            row = take_offsets_with(conn, TAKE_OFFSETS_WRITING_BATCH, row_params, batch.topic_id, batch.partition,
                                    count + extra, batch.size_bytes, records=count, topic_row=batch.topic_row)
            base_offset = row.next_offset - (count + extra)
            batch_row_written = True
            tried = False
        else:
            if batch.topic_row is not None:
                # PostgreSQL's only batch taken this way: a sequence past 2^31-1, which
                # check_sequence refuses. Judged again on the topic's row as it is now.
                raise TopicChanged(f"topic id {batch.topic_id}: a sequence past 2^31-1 is judged on the row read afresh")
            base_offset = take_offsets(conn, batch.topic_id, batch.partition, count + extra, batch.size_bytes,
                                       records=count)
            tried = False
        if producer_id is not None:
            assert producer_epoch is not None and batch.base_sequence is not None
            # Offsets first, then the verdict: a refusal rolls the whole database transaction
            # back, and a duplicate (rare: a retry) gives its offsets back. The next batch of
            # a running producer, or the first of a new epoch, is judged and its state written
            # by one statement (on PostgreSQL the one that took its offsets); any other batch
            # is judged by check_sequence on the state read back.
            if not tried and one_statement:
                in_transaction = write_batch_state(
                    conn, expected, producer_id=producer_id, producer_epoch=producer_epoch,
                    transactional_id=transactional_id, txn_id=txn_id, batch=batch, base_offset=base_offset,
                    now_ms=now_ms, holder=holder,
                )
                state_written = in_transaction is not None
                already_in_transaction = bool(in_transaction)
            if not state_written:
                if not producer_checked:
                    # Held as the statements above hold it (sequence_state._PRODUCER_HOLDS):
                    # the state read and written below is then never one expiry is deleting.
                    stored = current_state(conn, producer_id, lock=RowLock.KEY_SHARE)
                    stored.check_idempotent_use(holder, producer_epoch)  # type: ignore[arg-type]
                    producer_checked, taken_back = True, stored.taken_back
                already_in_transaction, state = read_producer_state(
                    conn, producer_id, transactional_id, txn_id, batch.topic_id, batch.partition
                )
                verdict = check_sequence(
                    state, producer_epoch, batch.base_sequence, count, taken_back=taken_back,
                    earlier_batches=partial(earlier_batches, conn, producer_id, batch.topic_id, batch.partition))
                if verdict is not BatchVerdict.APPEND:
                    # A retry of a batch written before (the last one, or one of the few before
                    # it): nothing written, the offsets its first write took answered again.
                    _return_offsets(conn, batch, count + extra)
                    results[_partition_key(batch)] = AppendResult(
                        batch.topic_id, batch.partition, verdict.base_offset, count, True, txn_id
                    )
                    continue
        _check_expected(batch, base_offset)

        results[_partition_key(batch)] = AppendResult(
            batch.topic_id, batch.partition, base_offset, count, False, txn_id
        )
        base_sequence = batch.base_sequence
        topic_id, partition = batch.topic_id, batch.partition
        (appended if batch.value_format is ValueFormat.JSON else bytes_appended).append((batch, base_offset))
        if producer_id is not None and not state_written:
            assert base_sequence is not None
            state_rows.append(
                {
                    "producer_id": producer_id,
                    "topic_id": batch.topic_id,
                    "partition": batch.partition,
                    "producer_epoch": producer_epoch,
                    "last_sequence": base_sequence + count - 1,
                    "last_batch_base_sequence": base_sequence,
                    "last_batch_record_count": count,
                    "last_batch_base_offset": base_offset,
                    "updated_ms": now_ms,
                }
            )
        if not batch_row_written:
            batch_rows.append(batch_row(topic_id, partition, base_offset, count, base_sequence=base_sequence,
                                        producer_id=producer_id, producer_epoch=producer_epoch, txn_id=txn_id,
                                        with_marker=commit_marker is not None))
        if commit_marker is not None:
            marker_rows.append(marker_row(topic_id, partition, base_offset + count, commit_marker,
                                          ControlType.COMMIT, now_ms))
            batch_rows.append(marker_batch_row(topic_id, partition, base_offset + count, commit_marker,
                                               ControlType.COMMIT))
        elif txn_id is not None and not already_in_transaction and not claimed:
            txn_partition_rows.append(
                {
                    "transactional_id": transactional_id,
                    "topic_id": batch.topic_id,
                    "partition": batch.partition,
                    "txn_id": txn_id,
                    "first_offset": base_offset,
                }
            )

    # The batches are flagged alike: they share their transaction (a joining Send's txn_id is
    # known by now), and an idempotent producer's records carry its id (records.producer_id).
    write_records(conn, appended, bytes_appended, marker_rows, self_committed=self_committed(txn_id),
                  producer_id=producer_id)
    if batch_rows:
        # The batch rows that no statement taking offsets wrote (SQLite's; on PostgreSQL a
        # batch judged by check_sequence, and the COMMIT markers of a Commit's carried batches),
        # in one statement after the records. A duplicate, which gave its offsets back above, has none.
        dialect.execute_rows(conn, INSERT_BATCH, batch_rows, on_driver=True)
    write_states(conn, state_rows)
    if txn_partition_rows:
        # The first Send to a partition adds it to the transaction (Kafka's AddPartitionsToTxn),
        # here where no statement taking offsets claimed it (SQLite's, and on PostgreSQL a batch
        # judged by check_sequence); later Sends find it there (sequence_state._IN_TRANSACTION reads it) and
        # keep the first offset, which is what the last stable offset needs. Kept an
        # insert-or-ignore all the same.
        dialect.execute_rows(conn, dialect.insert_ignore(conn, transaction_partitions), txn_partition_rows)
    return [results[_partition_key(b)] for b in batches]


def _check_expected(batch: BatchToAppend, next_offset: int) -> None:
    if batch.expected_offset is not None and batch.expected_offset != next_offset:
        raise OffsetMismatch(
            f"expected_offset {batch.expected_offset} but the next offset of partition "
            f"{batch.partition} is {next_offset}",
            partition=batch.partition,
            next_offset=next_offset,
        )

