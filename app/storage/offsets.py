"""Committed consumer-group offsets."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, delete, func, select, tuple_, update

from app.domain.offsets import OffsetToCommit, ReadOrder, Straddle
from app.storage import dialect
from app.storage.read_committed import first_record_committed_from
from app.storage.tables import (
    counters,
    group_offsets,
    offset_writes,
    partitions,
    record_batches,
    topics,
    transaction_offsets,
)
from app.storage.topics import LAST_STABLE_OFFSET


OffsetKey = tuple[str, int, int]  # a committed offset's (group_id, topic_id, partition)
# Its columns, group_offsets' primary key: what the offset expiry selects and deletes by
# (groups.expired_offsets, groups.delete_expired_offsets) and what a staging holds
# (hold_committed), named once so that both speak of the same rows in the same order.
OFFSET_KEY = (group_offsets.c.group_id, group_offsets.c.topic_id, group_offsets.c.partition)
OFFSET_WRITE_COUNTER = "offset_write"  # SQLite's source of write numbers (next_writes; migration 0037)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    committed_offset: int
    metadata: str | None
    committed_ms: int
    leader_epoch: int  # app.domain.offsets.NO_LEADER_EPOCH: committed without one
    topic_id: int
    read_order: ReadOrder  # what committed_offset means


def commit(conn: Connection, rows: Iterable[OffsetToCommit], now_ms: int) -> None:
    """Upsert the group offsets `rows`, committed at `now_ms`: the one writer of group_offsets,
    for every path that commits offsets (a commit over either door, a reset, a transaction's
    completion), so that every offset has the commit time its retention counts from
    (groups._offset_expired)."""
    # Key order (Python's, which is not the database's under a non-C collation): no deadlock
    # between concurrent commits. The expiry of offsets (groups.delete_expired_offsets) never
    # waits for a row a commit holds, so it needs no order from here.
    ordered = sorted(rows, key=lambda r: (r.group_id, r.topic_id, r.partition))
    # A write made now takes a new number and goes over whatever is committed; a staged one
    # keeps its staging's number and goes only over an offset written before it
    # (_upsert_if_newer). A caller writes one kind: a commit and a reset fresh rows, a
    # transaction's completion (transactions.complete_offsets) staged ones.
    fresh = [r for r in ordered if r.write_seq is None]
    if fresh:
        _write(conn, dialect.upsert(conn, group_offsets, _WRITTEN),
               zip(fresh, next_writes(conn, len(fresh)), strict=True), now_ms)
    staged = [(r, r.write_seq) for r in ordered if r.write_seq is not None]
    if staged:
        _write(conn, _upsert_if_newer(conn.dialect.name), staged, now_ms)


def _write(conn: Connection, stmt: Any, rows: Iterable[tuple[OffsetToCommit, int]], now_ms: int) -> None:
    """`stmt` (an upsert of group_offsets' _WRITTEN columns) for each row, with its write number."""
    dialect.execute_rows(conn, stmt, [
        {"group_id": r.group_id, "topic_id": r.topic_id, "partition": r.partition,
         "committed_offset": r.committed_offset, "metadata": r.metadata, "committed_ms": now_ms,
         "leader_epoch": r.leader_epoch, "read_order": r.read_order.value, "write_seq": write_seq}
        for r, write_seq in rows])


_WRITTEN = ("committed_offset", "metadata", "committed_ms", "leader_epoch", "read_order", "write_seq")


@cache
def _upsert_if_newer(dialect_name: str) -> Any:
    """The upsert of staged offsets: over a committed offset written before the staging only."""
    stmt = dialect.insert_on_conflict(dialect_name, group_offsets)
    return stmt.on_conflict_do_update(
        index_elements=[c.name for c in group_offsets.primary_key.columns],
        set_={name: stmt.excluded[name] for name in _WRITTEN},
        where=group_offsets.c.write_seq < stmt.excluded.write_seq)


def next_writes(conn: Connection, count: int) -> list[int]:
    """`count` new write numbers, rising: the order of every write of an offset, committed or
    staged (group_offsets.write_seq, transaction_offsets.write_seq), by which a transaction's
    commit keeps an offset written after its staging (commit). On PostgreSQL from the sequence
    offset_writes, which holds no lock (commits of different groups never wait for each other);
    on SQLite from the counter row, in the caller's database transaction (its writers take turns
    anyway). Two writes that run at once take numbers in either order, and either is an order
    they could have run in."""
    if count <= 0:
        return []
    if conn.dialect.name == "postgresql":
        return list(conn.execute(_NEXT_WRITES_PG, {"count": count}).scalars())
    last = conn.execute(_NEXT_WRITES_COUNTER, {"count": count}).scalar_one()
    return list(range(last - count + 1, last + 1))


_NEXT_WRITES_PG = select(offset_writes.next_value()).select_from(
    func.generate_series(1, bindparam("count", type_=Integer())))
_NEXT_WRITES_COUNTER = (update(counters).where(counters.c.name == OFFSET_WRITE_COUNTER)
                        .values(value=counters.c.value + bindparam("count", type_=Integer()))
                        .returning(counters.c.value))


def hold_committed(conn: Connection, keys: list[OffsetKey]) -> None:
    """The committed offsets of these (group_id, topic_id, partition) keys that exist, held
    against a DELETE until the caller's transaction ends (FOR KEY SHARE, on PostgreSQL): what a
    transaction staging new offsets for them takes (transactions.stage_offsets) while the
    offset expiry is on, so that the expiry (groups.delete_expired_offsets, which skips a held
    row) cannot delete an offset that the staging, once committed, keeps
    (groups._offset_expired). Without it the expiry's DELETE, not seeing the staging's rows
    before they commit, took the committed offset beside a staged one of an unfinished
    transaction; a staging that commits inside the expiry's statement, before its lock, has
    released the hold, and the expiry's second look finds it. An expiry that locked the row
    first makes this wait for its end and find the row gone: as if it had run before the
    staging. KEY SHARE, not SHARE: an offsets commit's upsert writes no key column (FOR NO KEY
    UPDATE) and does not wait for it, nor does another staging's KEY SHARE. Taken in key order
    (the database's), the order the expiry's SELECT ... FOR UPDATE SKIP LOCKED meets them in;
    the expiry waits for no held row either way. On SQLite the write lock lets no other
    transaction in between."""
    if keys:
        conn.execute(dialect.lock_for_key_share(conn.dialect.name, select(OFFSET_KEY[0]).where(
            tuple_(*OFFSET_KEY).in_(sorted(set(keys)))).order_by(*OFFSET_KEY)))


def delete_offsets(conn: Connection, group_id: str, keys: list[tuple[int, int]]) -> None:
    """The group's committed offsets of these (topic_id, partition) pairs, if it has any."""
    if keys:
        conn.execute(delete(group_offsets).where(
            group_offsets.c.group_id == group_id,
            tuple_(group_offsets.c.topic_id, group_offsets.c.partition).in_(keys)))


def fetch(conn: Connection, group_id: str) -> list[CommittedOffset]:
    stmt = (
        select(
            topics.c.name,
            group_offsets.c.partition,
            group_offsets.c.committed_offset,
            group_offsets.c.metadata,
            group_offsets.c.committed_ms,
            group_offsets.c.leader_epoch,
            group_offsets.c.topic_id,
            group_offsets.c.read_order,
        )
        .join(topics, topics.c.topic_id == group_offsets.c.topic_id)
        .where(group_offsets.c.group_id == group_id)
        .order_by(topics.c.name, group_offsets.c.partition)
    )
    return [CommittedOffset(topic=r.name, partition=r.partition, committed_offset=r.committed_offset,
                            metadata=r.metadata, committed_ms=r.committed_ms, leader_epoch=r.leader_epoch,
                            topic_id=r.topic_id, read_order=ReadOrder(r.read_order)) for r in conn.execute(stmt)]


def past_markers(conn: Connection, topic_id: int, partition: int, offset: int) -> int:
    """The first offset at or past `offset` that is not a control marker's: in offset order the
    same place as `offset`, a marker being no record a Kafka consumer reads. A consumer that
    committed after each record commits a transaction's marker offset after its last record;
    read in commit order that number would be refused (the marker lies at the offset), the one
    past the marker means what it meant. One probe of record_batches' primary key a marker."""
    while conn.execute(select(record_batches.c.base_offset).where(
            record_batches.c.topic_id == topic_id, record_batches.c.partition == partition,
            record_batches.c.base_offset == offset, record_batches.c.control_type.is_not(None))).first():
        offset += 1
    return offset


def straddle_at(conn: Connection, topic_id: int, partition: int, offset: int) -> Straddle:
    """Whether a transaction that has not aborted has records below `offset` in the partition
    and its marker at or past it (app.domain.offsets.Straddle): an open or prepared one below
    the last stable offset, or a committed one positioned at or past `offset` with a stored
    record below it (read_committed.first_record_committed_from). What decides whether a
    committed offset means the same in both read orders (app.domain.offsets.offset_in_order).
    Records below the log start count for nothing, whether or not the log cleaner has
    deleted their rows yet: a reader of neither order reads them again."""
    # The last stable offset is the first offset of the earliest open transaction, or the log
    # end when none is open: an offset past the log end (a commit may name one) straddles no
    # open transaction.
    last_stable, log_end, log_start = conn.execute(
        select(LAST_STABLE_OFFSET, partitions.c.next_offset, partitions.c.log_start_offset)
        .where(partitions.c.topic_id == topic_id, partitions.c.partition == partition)).one()
    if last_stable < min(offset, log_end):
        return Straddle.UNDECIDED
    if first_record_committed_from(conn, topic_id, partition, offset, log_start) is not None:
        return Straddle.COMMITTED
    return Straddle.NONE


def pending_partitions(
    conn: Connection, group_id: str, keys: list[tuple[int, int]] | None
) -> list[tuple[str, int]]:
    """(topic, partition) pairs of the group with offsets staged in an unfinished transaction."""
    stmt = (
        select(topics.c.name, transaction_offsets.c.partition)
        .join(topics, topics.c.topic_id == transaction_offsets.c.topic_id)
        .where(transaction_offsets.c.group_id == group_id)
        .distinct()
    )
    if keys is not None:
        stmt = stmt.where(tuple_(transaction_offsets.c.topic_id, transaction_offsets.c.partition).in_(keys))
    return [(r[0], r[1]) for r in conn.execute(stmt)]


def lowest_committed(conn: Connection, group_ids: list[str], topic_id: int, partition: int) -> int | None:
    """The lowest committed offset of these groups for the partition; None if one of them has
    none (it has read nothing of it, as far as the service knows)."""
    found = dict(conn.execute(
        select(group_offsets.c.group_id, group_offsets.c.committed_offset)
        .where(group_offsets.c.group_id.in_(group_ids), group_offsets.c.topic_id == topic_id,
               group_offsets.c.partition == partition)
    ).all())
    if set(found) != set(group_ids):
        return None
    return min(found.values())


def all_committed_partitions(conn: Connection) -> list[tuple[str, str, int]]:
    """(group_id, topic, partition) of every committed offset, of every group, in a partition
    that exists."""
    return [(r[0], r[1], r[2]) for r in conn.execute(
        select(group_offsets.c.group_id, topics.c.name, group_offsets.c.partition)
        .join(topics, topics.c.topic_id == group_offsets.c.topic_id)
        .join(partitions, (partitions.c.topic_id == group_offsets.c.topic_id)
              & (partitions.c.partition == group_offsets.c.partition))
    )]
