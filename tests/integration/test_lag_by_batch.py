"""The lag counted a batch at a time (read_committed.committed_between_for_groups): a partition
without holes (partitions.has_holes unset) has each committed batch's run counted from its
offsets, bounded by the log start and the committed offset; one with holes record by record.
Each case holds the count by batch to the count by record (the same partition with has_holes
set) from every committed offset, in both read orders, and to the number expected."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, insert, select, update

from app.domain.offsets import ReadOrder
from app.domain.records import RecordToAppend, SendBatch
from app.domain.topic_config import CleanupPolicy, TopicConfig
from app.services.log_cleaner import LogCleaner
from app.storage import read_committed
from app.storage.tables import group_offsets, partitions, topics

ORDERS = (ReadOrder.COMMIT, ReadOrder.OFFSET)


def _plain(services: Any, topic: str, n: int, *, keys: list[str] | None = None) -> None:
    recs = [RecordToAppend(None if keys is None else keys[i], str(i), None, 1) for i in range(n)]
    services.log.send([SendBatch(topic, 0, recs)], producer_id=None, producer_epoch=None, transactional_id=None)


def _txn_send(services: Any, tid: str, p: Any, topic: str, n: int, sequence: int) -> None:
    recs = [RecordToAppend(None, str(i), None, 1) for i in range(n)]
    services.log.send([SendBatch(topic, 0, recs, sequence)], producer_id=p.producer_id,
                      producer_epoch=p.producer_epoch, transactional_id=tid)


def _topic_id(conn: Any, topic: str) -> int:
    return conn.execute(select(topics.c.topic_id).where(topics.c.name == topic)).scalar_one()


def _counts(database: Any, topic: str, offsets: Sequence[int], cap: int = 1_000_000) -> dict[tuple[str, int], tuple[int, bool]]:
    """(read order, committed offset) → (count, exact), every one counted in one statement."""
    with database.engine.begin() as conn:
        topic_id = _topic_id(conn, topic)
        conn.execute(delete(group_offsets))
        conn.execute(insert(group_offsets), [
            {"group_id": f"{order.value}-{at:06d}", "topic_id": topic_id, "partition": 0, "committed_offset": at,
             "metadata": None, "committed_ms": 0, "read_order": order.value}
            for order in ORDERS for at in offsets])
    with database.engine.connect() as conn:
        counted = read_committed.committed_between_for_groups(conn, cap, None)
    return {(c.read_order.value, c.committed_offset): (c.count, c.exact) for c in counted}


def _has_holes(database: Any, topic: str, value: bool | None = None) -> bool:
    with database.engine.begin() as conn:
        where = (partitions.c.topic_id == _topic_id(conn, topic), partitions.c.partition == 0)
        if value is not None:
            conn.execute(update(partitions).where(*where).values(has_holes=value))
        return conn.execute(select(partitions.c.has_holes).where(*where)).scalar_one()


def _by_batch_and_by_record(database: Any, topic: str, offsets: Sequence[int],
                            cap: int = 1_000_000) -> dict[tuple[str, int], tuple[int, bool]]:
    """The counts of a partition without holes, asserted equal to its counts record by record."""
    assert not _has_holes(database, topic)
    by_batch = _counts(database, topic, offsets, cap)
    _has_holes(database, topic, True)
    by_record = _counts(database, topic, offsets, cap)
    _has_holes(database, topic, False)
    assert by_batch == by_record
    return by_batch


def _move_log_start(database: Any, topic: str, offset: int) -> None:
    """What DeleteRecords does: moves the log start; the rows below stay until the cleaner runs."""
    with database.engine.begin() as conn:
        conn.execute(update(partitions).where(partitions.c.topic_id == _topic_id(conn, topic))
                     .values(log_start_offset=offset))


def test_a_compacted_partition_is_marked_and_counted_record_by_record(services, database, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("compacted", 1, TopicConfig(cleanup_policy=CleanupPolicy.COMPACT))
    _plain(services, "compacted", 4, keys=["a", "b", "a", "c"])  # one batch 0..3: a@0 superseded by a@2
    _plain(services, "compacted", 2, keys=["d", "e"])  # 4..5
    assert not _has_holes(database, "compacted")

    assert LogCleaner(services.db, services.settings, clock, chunk_rows=3).run_once().compaction == 1

    # The run 0..3 holds 1, 2, 3: a count of its offsets would give 6 from 0, not 5.
    assert _has_holes(database, "compacted")
    counts = _counts(database, "compacted", range(0, 7))
    assert [counts[("commit", at)][0] for at in range(0, 7)] == [5, 5, 4, 3, 2, 1, 0]
    assert [counts[("offset", at)][0] for at in range(0, 7)] == [5, 5, 4, 3, 2, 1, 0]


def test_retention_below_the_log_start_leaves_the_partition_counted_by_batch(services, database, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("kept", 1, TopicConfig(retention_ms=-1))
    _plain(services, "kept", 5)  # 0..4
    _plain(services, "kept", 3)  # 5..7
    _move_log_start(database, "kept", 2)
    LogCleaner(services.db, services.settings, clock, chunk_rows=3).run_once()

    assert not _has_holes(database, "kept")
    counts = _by_batch_and_by_record(database, "kept", range(0, 9))
    assert [counts[("commit", at)][0] for at in range(0, 9)] == [6, 6, 6, 5, 4, 3, 2, 1, 0]


def test_a_log_start_inside_batches_bounds_their_runs_in_both_orders(services, database) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("cut", 1)
    p = services.coordinator.init_producer_id(transactional_id="cutter", transaction_timeout_ms=None)
    services.coordinator.begin("cutter", p.producer_id, p.producer_epoch)
    _txn_send(services, "cutter", p, "cut", 4, 0)  # 0..3
    _plain(services, "cut", 4)  # 4..7
    services.coordinator.end_transaction("cutter", p.producer_id, p.producer_epoch, commit=True)  # marker 8
    _plain(services, "cut", 3)  # 9..11
    # Inside the transaction's batch and, below, inside the plain one: their rows stay, garbage.
    for log_start in (2, 6):
        _move_log_start(database, "cut", log_start)
        counts = _by_batch_and_by_record(database, "cut", range(0, 13))
        transaction = max(0, 4 - log_start)
        # In commit order from the log start: the plain batch from there, the transaction at 8
        # from the log start, the last batch.
        assert counts[("commit", 0)][0] == (8 - max(4, log_start)) + transaction + 3
        assert counts[("commit", 9)][0] == 3
        # In offset order from 5: the plain batch from 5 (or the log start), not the transaction.
        assert counts[("offset", 5)][0] == 8 - max(5, log_start) + 3


def test_a_transaction_across_the_committed_offset_counts_as_each_order_reads(services, database) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("across", 1)
    p = services.coordinator.init_producer_id(transactional_id="acrosser", transaction_timeout_ms=None)
    services.coordinator.begin("acrosser", p.producer_id, p.producer_epoch)
    _txn_send(services, "acrosser", p, "across", 3, 0)  # 0..2
    _plain(services, "across", 3)  # 3..5
    _txn_send(services, "acrosser", p, "across", 3, 3)  # 6..8
    services.coordinator.end_transaction("acrosser", p.producer_id, p.producer_epoch, commit=True)  # marker 9
    _plain(services, "across", 2)  # 10..11

    counts = _by_batch_and_by_record(database, "across", range(0, 13))
    # Commit order from 4: 4, 5, the whole transaction (positioned at 9), 10, 11.
    assert counts[("commit", 4)] == (10, True)
    # Offset order from 4: 4, 5, the transaction's records from 4 on (6..8), 10, 11.
    assert counts[("offset", 4)] == (7, True)
    assert counts[("offset", 7)] == (4, True)
    assert counts[("commit", 7)] == (8, True)  # 0..2 and 6..8 unread: positioned at 9
    assert counts[("commit", 10)] == counts[("offset", 10)] == (2, True)


def test_large_batches_and_the_cap(services, database) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("large", 1)
    for _ in range(3):
        _plain(services, "large", 5_000)  # 0..14,999
    at = [0, 1, 4_999, 5_000, 7_777, 14_999, 15_000]
    counts = _by_batch_and_by_record(database, "large", at)
    assert [counts[("commit", a)] for a in at] == [(15_000 - a, True) for a in at]
    # Capped at 10,000: reached from 5,000 down, exact only past it.
    capped = _by_batch_and_by_record(database, "large", at, cap=10_000)
    assert [capped[("offset", a)] for a in at] == [
        (10_000, False), (10_000, False), (10_000, False), (10_000, False), (7_223, True), (1, True), (0, True)]
