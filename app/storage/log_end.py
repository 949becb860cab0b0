"""Who assigns offsets: the log end of a partition, taken under its row lock.

Offset assignment (docs/GUARANTEES.md#in-order-visibility). Each partition has one row in `partitions` whose
`next_offset` is the log end. An appender takes its offsets by updating that row and keeps
the row lock until its database transaction commits; the next appender of the partition
waits for the lock and then reads the committed value. So offsets are handed out in commit
order, and a reader that sees offset n+1 committed has already been able to see n. A
database sequence would not do: it hands out numbers before commit and never rolls them
back, so a reader could see 102 commit before 101 and skip 101 forever.

Deadlocks: a request that appends to several partitions locks them in (topic_id, partition)
order, and takes its transaction row lock (if any) before any partition lock.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Integer, Text, bindparam, column, select, tuple_, union, update, values

from app.domain.errors import UnknownTopicOrPartition
from app.domain.transaction import JoinCondition
from app.domain.transit import BeginCondition
from app.storage import changes, dialect
from app.storage.transactions import BEGUN, JOINED, relaxed_if_commit
from app.storage.seen_topics import TopicChanged, row_is
from app.storage.tables import partitions, transaction_partitions


def lock_partitions(conn: Connection, keys: Iterable[tuple[int, int]], *, of_transaction: str | None = None) -> None:
    """Take the row locks of these partitions ((topic_id, partition)), and of every partition
    transactional id `of_transaction`'s open transaction has added, in one statement, in
    (topic_id, partition) order, for a request that will append to some of them and write
    markers into the others: each step alone takes its locks in order, but one after the other
    they would not (a Commit carrying batches: its batches' partitions, then its markers' in
    every partition of the transaction). SQLite's write transaction holds the whole database."""
    if conn.dialect.name == "sqlite":
        return
    key = tuple_(partitions.c.topic_id, partitions.c.partition)
    ordered = sorted(set(keys))
    if of_transaction is None:
        if not ordered:
            return
        which = key.in_(ordered)
    else:
        # The transaction's partitions read in the same statement, a round trip fewer; the two
        # sets of keys in one UNION (an OR of the two would scan every partition).
        claimed = select(transaction_partitions.c.topic_id, transaction_partitions.c.partition).where(
            transaction_partitions.c.transactional_id == of_transaction)
        listed = [select(values(column("topic_id", Integer), column("partition", Integer), name="listed")
                         .data(ordered))] if ordered else []
        which = key.in_(union(claimed, *listed))
    conn.execute(
        select(partitions.c.topic_id)
        .where(which)
        .order_by(partitions.c.topic_id, partitions.c.partition)
        .with_for_update()
    ).all()


# Built once (see storage.dialect): the hot statement of every Send and marker. The partition's
# record count and size move in the same statement as its log end, so they are exact in every
# snapshot (what retention_bytes acts on, and what describe shows).
_TAKE_OFFSETS = (
    update(partitions)
    .where(partitions.c.topic_id == bindparam("p_topic_id"), partitions.c.partition == bindparam("p_partition"))
    .values(
        next_offset=partitions.c.next_offset + bindparam("p_count"),
        record_count=partitions.c.record_count + bindparam("p_records"),
        size_bytes=partitions.c.size_bytes + bindparam("p_size_bytes"),
    )
    .returning(partitions.c.next_offset)
)


# _TAKE_OFFSETS as the first part of a statement that writes what goes with the offsets in the
# same round trip (PostgreSQL only: SQLite has no data-modifying WITH). Such a statement reads
# the new log end as `TAKEN.c.next_offset`, and must run through take_offsets_with. It also
# sends the partition's NOTIFY (app.storage.changes): a data-modifying WITH runs to the end
# whether or not the statement reads its rows, and computes its RETURNING for each row it
# changed, so a partition that grows is notified at commit without a statement of its own.
# `p_topic_row`: the version of the topic's row the caller's copy of it was read from
# (app.storage.seen_topics), or NULL if it read the row in this transaction; where the row is
# no longer that version the statement takes nothing, and take_offsets_with says so.
TAKEN = (
    _TAKE_OFFSETS
    .where(row_is(bindparam("p_topic_row", None, type_=Text)))
    .returning(changes.notify_in_statement(partitions.c.topic_id, partitions.c.partition).label("notified"))
    .cte("taken")
)


class Joining(enum.Enum):
    """How a transactional Send's first statement joins the transaction without the row read
    first: the open one (a JoinCondition: transactions.JOINED), or the next one, which the
    statement begins (a BeginCondition, version 2: transactions.BEGUN)."""

    OPEN = "open"
    BEGUN = "begun"

    @staticmethod
    def of(condition: JoinCondition | BeginCondition) -> Joining:
        return Joining.OPEN if isinstance(condition, JoinCondition) else Joining.BEGUN


def _taken_joining(joined: Any) -> Any:
    """TAKEN for a transactional Send that joins its transaction by a condition on the row
    (`joined`, JOINED or BEGUN) instead of reading it first: offsets are taken only where the
    row holds the condition, and the row is locked (FOR SHARE by JOINED, FOR NO KEY UPDATE by
    BEGUN's UPDATE) before the partition's row is (the UPDATE locks a partition row once the join has
    produced it), the order every appender keeps. It answers the transaction's txn_id, for the
    statement's other parts, and relaxes the Send's database transaction when the producer chose
    durability "commit", as transactions.get_with_topics does for a Send that reads the row
    first. BEGUN, a data-modifying WITH, runs whether or not the partition's row is taken: a
    topic's copy out of date leaves the Begin written and NotJoined raised, and the Send, reading
    the row in the same database transaction, joins the transaction it began."""
    return (
        _TAKE_OFFSETS
        .where(row_is(bindparam("p_topic_row", None, type_=Text)), joined.c.txn_id.is_not(None))
        .returning(changes.notify_in_statement(partitions.c.topic_id, partitions.c.partition).label("notified"),
                   joined.c.txn_id, relaxed_if_commit(joined.c.durability))
        .cte("taken")
    )


TAKEN_JOINING = {Joining.OPEN: _taken_joining(JOINED), Joining.BEGUN: _taken_joining(BEGUN)}


class NotJoined(Exception):
    """A statement over TAKEN_JOINING took nothing: the transaction's row no longer holds the
    Send's condition, or the topic's row is no longer the version its copy was read from.
    Nothing of the statement was written, and no lock was taken by it, but for a Begin (BEGUN)
    that the row did hold, written with its lock when only the topic's copy was out of date."""


def take_offsets_with(conn: Connection, stmt: Any, params: dict[str, Any], topic_id: int, partition: int,
                      count: int, size_bytes: int, *, records: int, topic_row: str | None = None,
                      joining: bool = False) -> Any:
    """Run `stmt`, a statement over TAKEN that takes `count` offsets of the partition as
    take_offsets does (its bind parameters filled here, `params` the rest), and return its row:
    the partition row lock is held from then on, as take_offsets holds it. `topic_row`: the
    version of the topic's row the caller's copy was read from (seen_topics); TopicChanged if
    the row is no longer that one, or the partition is gone. `joining`: `stmt` is over
    TAKEN_JOINING (`params` has joined_params'); NotJoined where it took nothing."""
    # On the driver (dialect.sole_row_on_driver): every Send runs one such statement, and
    # SQLAlchemy's execution of it cost more of the service's CPU than the driver's.
    row = dialect.sole_row_on_driver(
        conn, stmt,
        {**params, "p_topic_id": topic_id, "p_partition": partition, "p_count": count,
         "p_records": records, "p_size_bytes": size_bytes, "p_topic_row": topic_row},
    )
    if row is None:
        if joining:
            raise NotJoined(f"transactional id {params['j_transactional_id']!r} or topic id {topic_id} changed")
        if topic_row is not None:
            raise TopicChanged(f"topic id {topic_id} changed since its row was read")
        raise UnknownTopicOrPartition(f"unknown partition {partition} of topic id {topic_id}")
    changes.mark_changed(conn, topic_id, partition, announced=True)
    return row


def take_offsets(
    conn: Connection, topic_id: int, partition: int, count: int, size_bytes: int = 0, *, records: int | None = None
) -> int:
    """Reserve `count` offsets for `records` data records (all of them, unless said) of
    `size_bytes`; returns the first. Holds the partition row lock until commit."""
    new_end = conn.execute(
        _TAKE_OFFSETS,
        {"p_topic_id": topic_id, "p_partition": partition, "p_count": count,
         "p_records": count if records is None else records, "p_size_bytes": size_bytes},
    ).scalar_one_or_none()
    if new_end is None:
        raise UnknownTopicOrPartition(f"unknown partition {partition} of topic id {topic_id}")
    changes.mark_changed(conn, topic_id, partition)
    return new_end - count
