"""Many groups in one partition counted at once (read_committed.committed_between_for_groups):
the groups' starts cut the partition into intervals, each counted once up to the cap, and each
group is given the sum from its start on, so that the groups with at least the cap left are
given the cap (`exact` False) and the others their exact count. Each case holds every group's
figure, in both read orders, to the rows of the committed_records view (records positioned, or
lying, from the start on), with and without holes, and to the numbers expected.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import delete, insert, select, text, update

from app.domain.offsets import ReadOrder
from app.domain.records import RecordToAppend, SendBatch
from app.domain.topic_config import CleanupPolicy, TopicConfig
from app.services.log_cleaner import LogCleaner
from app.storage import read_committed
from app.storage.tables import group_offsets, partitions, topics

ORDERS = (ReadOrder.COMMIT, ReadOrder.OFFSET)
# The records left in _interleaved's partition to a reader at each offset from 0 to 19.
LEFT_IN_COMMIT_ORDER = [14, 13, 12, 11, 11, 11, 10, 9, 9, 8, 8, 8, 4, 3, 2, 1, 1, 1, 0, 0]
LEFT_IN_OFFSET_ORDER = [14, 13, 12, 11, 10, 9, 8, 7, 6, 6, 5, 4, 4, 3, 2, 1, 1, 1, 0, 0]


def _plain(services: Any, topic: str, n: int, keys: list[str] | None = None) -> None:
    recs = [RecordToAppend(None if keys is None else keys[i], str(i), None, 1) for i in range(n)]
    services.log.send([SendBatch(topic, 0, recs)], producer_id=None, producer_epoch=None, transactional_id=None)


def _txn(services: Any, topic: str, tid: str, p: Any, n: int, sequence: int) -> None:
    recs = [RecordToAppend(None, str(i), None, 1) for i in range(n)]
    services.log.send([SendBatch(topic, 0, recs, sequence)], producer_id=p.producer_id,
                      producer_epoch=p.producer_epoch, transactional_id=tid)


def _interleaved(services: Any) -> None:
    """Partition 0 of `many`, 18 offsets: plain 0..2, A's 3..4, plain 5..6, B's 7, B's COMMIT
    marker 8, A's 9..10, A's COMMIT marker 11, plain 12..14, C's 15, C's ABORT marker 16,
    plain 17. Positions: 0..2, 5, 6, 8 (B), 11 (A's four), 12..14, 17."""
    services.topics.create("many", 1)
    a, b, c = (services.coordinator.init_producer_id(transactional_id=t, transaction_timeout_ms=None)
               for t in ("ta", "tb", "tc"))
    _plain(services, "many", 3)
    services.coordinator.begin("ta", a.producer_id, a.producer_epoch)
    _txn(services, "many", "ta", a, 2, 0)
    _plain(services, "many", 2)
    services.coordinator.begin("tb", b.producer_id, b.producer_epoch)
    _txn(services, "many", "tb", b, 1, 0)
    services.coordinator.end_transaction("tb", b.producer_id, b.producer_epoch, commit=True)
    _txn(services, "many", "ta", a, 2, 2)
    services.coordinator.end_transaction("ta", a.producer_id, a.producer_epoch, commit=True)
    _plain(services, "many", 3)
    services.coordinator.begin("tc", c.producer_id, c.producer_epoch)
    _txn(services, "many", "tc", c, 1, 0)
    services.coordinator.end_transaction("tc", c.producer_id, c.producer_epoch, commit=False)
    _plain(services, "many", 1)


def _topic_id(conn: Any, topic: str) -> int:
    return conn.execute(select(topics.c.topic_id).where(topics.c.name == topic)).scalar_one()


def _set(database: Any, topic: str, **values: Any) -> None:
    with database.engine.begin() as conn:
        conn.execute(update(partitions).where(partitions.c.topic_id == _topic_id(conn, topic)).values(**values))


def _groups_everywhere(database: Any, topic: str, end: int, lowest: int = 0) -> None:
    """Two groups at each offset from `lowest` to past the log end, in each read order."""
    with database.engine.begin() as conn:
        topic_id = _topic_id(conn, topic)
        conn.execute(delete(group_offsets))
        conn.execute(insert(group_offsets), [
            {"group_id": f"{order.value}-{at:03d}-{twin}", "topic_id": topic_id, "partition": 0,
             "committed_offset": at, "metadata": None, "committed_ms": 0, "read_order": order.value}
            for order in ORDERS for at in range(lowest, end + 2) for twin in "ab"])


def _counted(database: Any, cap: int) -> dict[tuple[str, int], tuple[int, bool]]:
    """(read order, committed offset) → (count, exact), every group counted in one statement,
    the two groups at each offset given the same."""
    with database.engine.connect() as conn:
        counted = read_committed.committed_between_for_groups(conn, cap, None)
    out: dict[tuple[str, int], tuple[int, bool]] = {}
    for c in counted:
        assert out.setdefault((c.read_order.value, c.committed_offset), (c.count, c.exact)) == (c.count, c.exact)
    return out


def _reference(database: Any, topic: str, end: int, cap: int) -> dict[tuple[str, int], tuple[int, bool]]:
    """The same from the committed_records view: the rows positioned (commit order) or lying
    (offset order) at or past the group's start, the committed offset or the log start."""
    with database.engine.connect() as conn:
        topic_id = _topic_id(conn, topic)
        log_start = conn.execute(select(partitions.c.log_start_offset).where(partitions.c.topic_id == topic_id)
                                 ).scalar_one()
        seen = conn.execute(text('SELECT "offset", commit_position FROM committed_records '
                                 'WHERE topic_id = :t AND "partition" = 0'), {"t": topic_id}).all()
    out = {}
    for at in range(end + 2):
        start = max(at, log_start)
        for order, n in (("commit", sum(c >= start for _, c in seen)), ("offset", sum(o >= start for o, _ in seen))):
            out[(order, at)] = (min(n, cap), n < cap)
    return out


def _both_ways(database: Any, topic: str, end: int, cap: int,
               lowest: int = 0) -> dict[tuple[str, int], tuple[int, bool]]:
    """The counts of groups at each offset from `lowest` on, batch by batch (has_holes unset)
    and record by record (set), each equal to the reference."""
    _groups_everywhere(database, topic, end, lowest)
    reference = {k: v for k, v in _reference(database, topic, end, cap).items() if k[1] >= lowest}
    _set(database, topic, has_holes=False)
    by_batch = _counted(database, cap)
    _set(database, topic, has_holes=True)
    by_record = _counted(database, cap)
    _set(database, topic, has_holes=False)
    assert by_batch == reference
    assert by_record == reference
    return by_batch


def _column(counts: dict[tuple[str, int], tuple[int, bool]], order: str, end: int) -> list[tuple[int, bool]]:
    return [counts[(order, at)] for at in range(end + 2)]


def test_every_group_of_a_partition_is_given_its_own_count_in_each_order(services, database) -> None:  # type: ignore[no-untyped-def]
    _interleaved(services)
    counts = _both_ways(database, "many", 18, cap=1_000)
    # Commit order: 0..2, 5, 6, B at 8, A's four at 11, 12..14, 17: 14 records.
    assert [n for n, _ in _column(counts, "commit", 18)] == LEFT_IN_COMMIT_ORDER
    # Offset order: 0..7, 9, 10, 12..14, 17: A's records where they lie.
    assert [n for n, _ in _column(counts, "offset", 18)] == LEFT_IN_OFFSET_ORDER
    assert all(exact for _, exact in counts.values())


@pytest.mark.parametrize("cap", [1, 2, 4, 8, 11, 13, 14])
def test_the_cap_gives_the_groups_behind_it_at_least_the_cap_and_the_others_their_count(  # type: ignore[no-untyped-def]
        services, database, cap) -> None:
    _interleaved(services)
    counts = _both_ways(database, "many", 18, cap)
    assert _column(counts, "commit", 18) == [(min(n, cap), n < cap) for n in LEFT_IN_COMMIT_ORDER]
    assert _column(counts, "offset", 18) == [(min(n, cap), n < cap) for n in LEFT_IN_OFFSET_ORDER]


def test_the_lowest_group_reads_what_lies_behind_it_in_its_own_order(services, database) -> None:  # type: ignore[no-untyped-def]
    """Nothing below the lowest start of the partition's groups is counted, except, in commit
    order, a transaction's records below it whose marker is past it (A's 3..4 below 5,
    positioned at 11)."""
    _interleaved(services)
    for lowest in range(0, 19):
        for cap in (5, 1_000):
            counts = _both_ways(database, "many", 18, cap, lowest)
            assert counts[("commit", lowest)] == (min(LEFT_IN_COMMIT_ORDER[lowest], cap), LEFT_IN_COMMIT_ORDER[lowest] < cap)
            assert counts[("offset", lowest)] == (min(LEFT_IN_OFFSET_ORDER[lowest], cap), LEFT_IN_OFFSET_ORDER[lowest] < cap)


def test_a_log_start_inside_a_transactions_batch_bounds_every_groups_count(services, database) -> None:  # type: ignore[no-untyped-def]
    _interleaved(services)
    _set(database, "many", log_start_offset=4)  # A's record 3 is garbage, 4 is not
    counts = _both_ways(database, "many", 18, cap=9)
    # Commit order from the log start: 5, 6, B, A's three from 4, 12..14, 17: 10, at least 9.
    assert [counts[("commit", at)] for at in (0, 4, 5, 7, 9, 12, 17, 18)] == [
        (9, False), (9, False), (9, False), (8, True), (7, True), (4, True), (1, True), (0, True)]
    # Offset order from the log start: 4..7, 9, 10, 12..14, 17: 10, at least 9.
    assert [counts[("offset", at)] for at in (0, 4, 5, 9, 11, 17)] == [
        (9, False), (9, False), (9, False), (6, True), (4, True), (1, True)]


def test_a_compacted_partition_counts_every_group_record_by_record(services, database, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("kept", 1, TopicConfig(cleanup_policy=CleanupPolicy.COMPACT))
    # One batch 0..5 in which a@0, b@1 and a@3 are superseded (by a@5, b@4), one 6..8.
    _plain(services, "kept", 6, keys=["a", "b", "c", "a", "b", "a"])
    _plain(services, "kept", 3, keys=["d", "e", "f"])
    assert LogCleaner(services.db, services.settings, clock, chunk_rows=3).run_once().compaction == 3
    with database.engine.connect() as conn:
        assert conn.execute(select(partitions.c.has_holes)).scalar_one()
    _groups_everywhere(database, "kept", 9)
    for cap in (3, 5, 100):
        counts = _counted(database, cap)
        assert counts == _reference(database, "kept", 9, cap)
        # Stored: 2, 4, 5, 6, 7, 8.
        left = [6, 6, 6, 5, 5, 4, 3, 2, 1, 0, 0]
        assert _column(counts, "commit", 9) == _column(counts, "offset", 9) == [(min(n, cap), n < cap) for n in left]
