"""The lag of groups committed in both read orders in the same partitions, counted at once
(what a /metrics scrape reads, with its cap on rows cutting between them) and one group at a
time: each offset in offset order counts the committed records lying at or past it, each in
commit order those positioned there, a committed offset past the log end none."""

from __future__ import annotations

from sqlalchemy import insert, select

from app.domain.offsets import ReadOrder
from app.domain.records import RecordToAppend, SendBatch
from app.storage import read_committed
from app.storage.tables import group_offsets, topics


def test_groups_in_both_orders_in_one_partition_each_count_in_their_own(services, database) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("lagged", 2)
    plain = [RecordToAppend(None, "1", None, 1)]
    p = services.coordinator.init_producer_id(transactional_id="lagger", transaction_timeout_ms=None)
    # Partition 0: P0, T(1, 3) around P2, its COMMIT marker at 4, P5: offsets 0..5.
    services.log.send([SendBatch("lagged", 0, plain)], producer_id=None, producer_epoch=None, transactional_id=None)
    services.coordinator.begin("lagger", p.producer_id, p.producer_epoch)
    services.log.send([SendBatch("lagged", 0, plain, 0)], producer_id=p.producer_id,
                      producer_epoch=p.producer_epoch, transactional_id="lagger")
    services.log.send([SendBatch("lagged", 0, plain)], producer_id=None, producer_epoch=None, transactional_id=None)
    services.log.send([SendBatch("lagged", 0, plain, 1)], producer_id=p.producer_id,
                      producer_epoch=p.producer_epoch, transactional_id="lagger")
    services.coordinator.end_transaction("lagger", p.producer_id, p.producer_epoch, commit=True)
    services.log.send([SendBatch("lagged", 0, plain)], producer_id=None, producer_epoch=None, transactional_id=None)
    # Partition 1: one plain record.
    services.log.send([SendBatch("lagged", 1, plain)], producer_id=None, producer_epoch=None, transactional_id=None)
    with database.engine.begin() as conn:
        topic_id = conn.execute(select(topics.c.topic_id).where(topics.c.name == "lagged")).scalar_one()
        rows = []
        # Records: P0 (offset 0, position 0), T1 (1, 4), P2 (2, 2), T3 (3, 4), P5 (5, 5).
        for i, (order, partition, at) in enumerate([
                (ReadOrder.OFFSET, 0, 2), (ReadOrder.COMMIT, 0, 2), (ReadOrder.OFFSET, 1, 0), (ReadOrder.OFFSET, 0, 4),
                (ReadOrder.COMMIT, 0, 4), (ReadOrder.OFFSET, 0, 9), (ReadOrder.COMMIT, 0, 9), (ReadOrder.COMMIT, 1, 1)]):
            rows.append({"group_id": f"g{i}", "topic_id": topic_id, "partition": partition, "committed_offset": at,
                         "metadata": None, "committed_ms": 0, "read_order": order.value})
        conn.execute(insert(group_offsets), rows)
    # In offset order from 2: P2, T3, P5 (T1 lies below); in commit order from 2: P2, T1, T3, P5.
    expected = [("g0", 3), ("g1", 4), ("g2", 1), ("g3", 1), ("g4", 3), ("g5", 0), ("g6", 0), ("g7", 0)]
    with database.engine.connect() as conn:
        every = [(c.group_id, c.count) for c in read_committed.committed_between_for_groups(conn, 1000, None)]
        for limit in range(1, 9):
            assert [(c.group_id, c.count) for c in read_committed.committed_between_for_groups(
                conn, 1000, limit)] == expected[:limit]
        one = [(g, c.count) for g, _ in expected
               for c in read_committed.committed_between_for_groups(conn, 1000, None, g)]
    assert every == expected
    assert one == expected
