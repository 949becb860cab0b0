"""A window of commit positions read through the committed_records view as Spark bounds it
(spark_jobs.reader.statement.positions_predicate: commit_position and batch_position), far
from the partition's log start or across it, and ending inside a plain batch: exactly its
committed records; and on SQLite at the cost of a window near the log start (each run ranges
over the primary key from one lower bound, the later of its start and the log start)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.domain.records import RecordToAppend
from app.services.log_service import SendBatch
from spark_jobs.reader.statement import positions_predicate

PLAIN = 3_000  # plain records at offsets [0, 3000), then a transaction of 10 records and its marker


def _fill(services) -> None:  # type: ignore[no-untyped-def]
    """Partition 0 of topic `w`: plain records at [0, 3000), a transaction's 10 records at
    [3000, 3010) with its COMMIT marker at 3010, plain records at [3011, 3111)."""
    services.topics.create("w", 1)
    plain = [RecordToAppend(None, "1", None, 1) for _ in range(1_000)]
    for _ in range(PLAIN // 1_000):
        services.log.send([SendBatch("w", 0, plain)], producer_id=None, producer_epoch=None, transactional_id=None)
    p = services.coordinator.init_producer_id(transactional_id="far", transaction_timeout_ms=None)
    services.coordinator.begin("far", p.producer_id, p.producer_epoch)
    services.log.send([SendBatch("w", 0, plain[:10], 0)], producer_id=p.producer_id,
                      producer_epoch=p.producer_epoch, transactional_id="far")
    services.coordinator.end_transaction("far", p.producer_id, p.producer_epoch, commit=True)
    services.log.send([SendBatch("w", 0, plain[:100])], producer_id=None, producer_epoch=None, transactional_id=None)


def _window(database, lo: int, hi: int) -> list[tuple[int, int, bool]]:  # type: ignore[no-untyped-def]
    """(offset, commit_position, transactional) of the view's rows at positions [lo, hi), as
    spark_jobs/reader/split.py asks for them."""
    with database.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT \"offset\", commit_position, transactional FROM committed_records WHERE "
            + " AND ".join(positions_predicate("w", 0, lo, hi, database.dialect))
            + " ORDER BY commit_position, \"offset\"")).all()
    return [(o, c, bool(t)) for o, c, t in rows]


def test_a_window_far_from_the_log_start_reads_its_plain_and_committed_records(services, database) -> None:  # type: ignore[no-untyped-def]
    """It ends inside the plain batch [3011, 3111), positioned at 3110: its first records are
    in the window though the batch's position is past it."""
    _fill(services)
    services.topics.delete_records("w", 0, 500)

    assert _window(database, 2_995, 3_014) == [
        *((o, o, False) for o in range(2_995, 3_000)),
        *((o, 3_010, True) for o in range(3_000, 3_010)),
        *((o, o, False) for o in range(3_011, 3_014)),
    ]


def test_a_window_across_the_log_start_reads_nothing_below_it(services, database) -> None:  # type: ignore[no-untyped-def]
    _fill(services)
    services.topics.delete_records("w", 0, 500)

    assert _window(database, 490, 505) == [(o, o, False) for o in range(500, 505)]


def _vm_steps(database, lo: int, hi: int, *, batch_bounds: bool = True) -> int:  # type: ignore[no-untyped-def]
    """Hundreds of SQLite virtual machine instructions run to read the window: its work, counted.
    Without batch_bounds, bounded on commit_position alone, as an ad-hoc reader might."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    with database.engine.connect() as conn:
        raw = conn.connection.driver_connection
        raw.set_progress_handler(count, 100)
        try:
            where = positions_predicate("w", 0, lo, hi, database.dialect)
            if not batch_bounds:
                where = [c for c in where if "batch_position" not in c]
            conn.execute(text("SELECT * FROM committed_records WHERE " + " AND ".join(where))).all()
        finally:
            raw.set_progress_handler(None, 0)
    return steps


def _unflag(database) -> None:  # type: ignore[no-untyped-def]
    """Every batch and record as a writer before migration 0041 left them: not self-committed,
    read through the batch rows."""
    with database.engine.begin() as conn:
        conn.execute(text("UPDATE records SET self_committed = FALSE"))
        conn.execute(text("UPDATE record_batches SET self_committed = FALSE"))


@pytest.mark.unflagged_records
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_on_sqlite_a_window_far_from_the_log_start_costs_what_one_near_it_costs(services, database) -> None:  # type: ignore[no-untyped-def]
    """Through the batch rows (plain batches written before 0041), each window reads its own
    batches only, from the batch index's range: bounded on commit_position alone, the same
    window reads every committed batch of the partition."""
    _fill(services)
    services.topics.delete_records("w", 0, 50)
    _unflag(database)

    near, far = _vm_steps(database, 100, 200), _vm_steps(database, 2_900, 3_000)
    unbounded = _vm_steps(database, 2_900, 3_000, batch_bounds=False)

    assert far <= 2 * near, (near, far)
    assert 2 * far <= unbounded, (far, unbounded)


@pytest.mark.unflagged_records
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_on_sqlite_a_window_of_self_committed_records_is_a_range_of_them_however_it_is_bounded(  # type: ignore[no-untyped-def]
        services, database) -> None:
    """Self-committed records (docs/DESIGN-batches.md) are a range of the records' primary key:
    a window far from the log start costs what one near it costs, and a reader that bounds
    commit_position alone reads a range too (their position is their offset), where through
    the batch rows it reads every committed batch of the partition. Each window costs less than
    the same window read through the batch rows."""
    _fill(services)
    services.topics.delete_records("w", 0, 50)

    near, far = _vm_steps(database, 100, 200), _vm_steps(database, 2_900, 3_000)
    unbounded = _vm_steps(database, 2_900, 3_000, batch_bounds=False)
    _unflag(database)
    through_batches = _vm_steps(database, 100, 200), _vm_steps(database, 2_900, 3_000)

    assert far <= 2 * near and unbounded <= 2 * near, (near, far, unbounded)
    assert 2 * near <= through_batches[0] and 2 * far <= through_batches[1], (near, far, through_batches)
