"""Kafka's Fetch reads its batches and their records as ranges of primary keys, on a partition
the planner has no statistics for (the service never runs ANALYZE): the batch rows from the
one holding the read's start (one probe of record_batches' primary key, backwards), the
records as one range of theirs, and the aborted transactions' first batches through
ix_record_batches_txn; ListOffsets by timestamp walks the records and probes a batch row
per record its timestamp lets through. A scan of the partition's batches or records per
read would make a Fetch cost the partition's size instead of the answer's."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import event, text

from app.domain.records import RecordToAppend
from app.domain.types import IsolationLevel
from app.services.log_service import SendBatch
from app.storage.fetch_plan import SIZES_PAGE
from app.storage.offset_order import _firsts_stmt, _offset_for_timestamp_stmt, _stmts

SENDS = 40
RECORDS_PER_SEND = 20


def _fill(services: Any) -> int:
    """Aborted transactions of one Send each, between plain Sends, in partition 0; the topic id.
    Another topic beside it, so that on PostgreSQL `records` has leaves other than the
    partition's."""
    services.topics.create("plans", 1)
    services.topics.create("beside", 2)
    p = services.coordinator.init_producer_id(transactional_id="planner", transaction_timeout_ms=None)
    records = [RecordToAppend(None, "1", None, 1) for _ in range(RECORDS_PER_SEND)]
    for i in range(SENDS):
        services.coordinator.begin("planner", p.producer_id, p.producer_epoch)
        services.log.send([SendBatch("plans", 0, records, i * RECORDS_PER_SEND)], producer_id=p.producer_id,
                          producer_epoch=p.producer_epoch, transactional_id="planner")
        services.coordinator.end_transaction("planner", p.producer_id, p.producer_epoch, commit=False)
        services.log.send([SendBatch("plans", 0, records)], producer_id=None, producer_epoch=None,
                          transactional_id=None)
    return int(services.topics.get("plans").topic_id)


def _plan(database: Any, stmt: Any, **params: Any) -> list[str]:
    with database.engine.connect() as conn:
        sql = str(stmt.params(**params).compile(conn, compile_kwargs={"literal_binds": True,
                                                                      "render_postcompile": True}))
        if database.dialect != "postgresql":
            return [row[3] for row in conn.execute(text("EXPLAIN QUERY PLAN " + sql))]
        lines = [row[0] for row in conn.execute(text("EXPLAIN " + sql))]
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'plans'")).scalar_one()
    # `records` is a leaf per log partition on PostgreSQL (migration 0035): the statement names
    # its partition, so it is planned for that leaf alone, whose primary key is pk_records'.
    leaves = set(re.findall(r"using (records_[0-9]+_[0-9]+)_pkey", " ".join(lines)))
    assert leaves <= {f"records_{topic_id}_0"}, lines
    return [re.sub(r"records_[0-9]+_[0-9]+_pkey", "pk_records", line) for line in lines]


def _scans(lines: list[str]) -> list[str]:
    """What each scan reads, in plan order: a primary key's range or an index's, by name, or
    'whole' for a scan of a whole table."""
    names = {"pk_record_batches": "batches", "sqlite_autoindex_record_batches_1": "batches",
             "pk_records": "records", "sqlite_autoindex_records_1": "records",
             "ix_record_batches_txn": "txn"}
    out = []
    for line in lines:
        if "Seq Scan" in line or line.startswith("SCAN "):
            out.append("whole")
        else:
            out += [v for k, v in names.items() if k in line]
    return out


def test_the_batches_of_a_read_are_a_probe_then_a_range_of_the_batches_primary_key(services: Any, database: Any) -> None:
    topic_id = _fill(services)
    lines = _plan(database, _stmts()[1], topic_id=topic_id, partition=0, start=300, last=500)
    assert _scans(lines) == ["batches", "batches"], lines
    # The probe for the batch holding the start reads one entry, from the start downwards.
    if database.dialect == "postgresql":
        assert any("Index Only Scan Backward" in line for line in lines), lines


def test_the_records_of_a_read_are_one_range_of_the_records_primary_key(services: Any, database: Any) -> None:
    topic_id = _fill(services)
    lines = _plan(database, _stmts()[2], topic_id=topic_id, partition=0, start=300, last=500)
    assert _scans(lines) == ["records"], lines
    assert not any("Sort" in line or "TEMP B-TREE" in line for line in lines), lines


def test_the_aborted_transactions_first_batches_are_probed_in_the_transaction_index(services: Any, database: Any) -> None:
    topic_id = _fill(services)
    lines = _plan(database, _firsts_stmt(database.dialect), topic_id=topic_id, partition=0, txn_ids=[3, 4])
    assert _scans(lines) == ["txn"], lines
    # The transaction id is part of the index condition, not a filter over every batch.
    assert any("txn_id" in line for line in lines if "ix_record_batches_txn" in line or "Index Cond" in line), lines


def test_list_offsets_by_timestamp_walks_the_records_and_probes_a_batch_row_per_candidate(services: Any, database: Any) -> None:
    topic_id = _fill(services)
    lines = _plan(database, _offset_for_timestamp_stmt(), topic_id=topic_id, partition=0, start=0, end=10**6,
                  timestamp_ms=0)
    # Not a hash anti-join over the partition's batch rows: a walk that stops at its first
    # record would pay for every batch of the partition.
    assert _scans(lines) == ["records", "batches"], lines


def _one_byte_records(services: Any) -> None:
    """Topic `sized`: 3,000 records of one byte each in partition 0, three Sends of 1,000."""
    services.topics.create("sized", 1)
    one_byte = [RecordToAppend(None, "1", None, 1) for _ in range(1_000)]
    for _ in range(3):
        services.log.send([SendBatch("sized", 0, one_byte)], producer_id=None, producer_epoch=None,
                          transactional_id=None)


def _read_sized(services: Any, max_bytes: int) -> list[int]:
    read = services.log.read_in_offset_order("sized", 0, offset=0, isolation=IsolationLevel.READ_UNCOMMITTED,
                                             max_bytes=max_bytes, max_records=10_000)
    return [r.offset for b in read.batches for r in b.records]


def test_a_read_cut_by_its_byte_limit_sizes_at_most_a_page_of_rows_past_the_cut(services: Any, database: Any) -> None:
    _one_byte_records(services)
    sized_up_to: list[int] = []

    def count(conn: Any, clause: Any, multiparams: Any, params: Any, options: Any) -> None:
        if clause is _stmts()[0]:
            sized_up_to.append(params["limit"])

    event.listen(database.engine, "before_execute", count)
    try:
        offsets = _read_sized(services, 1_500)
    finally:
        event.remove(database.engine, "before_execute", count)
    # 1,500 records of one byte each, of the 3,000 and the 10,000 the record limit allows
    assert offsets == list(range(1_500))
    assert sum(sized_up_to) <= 1_500 + SIZES_PAGE, sized_up_to


def test_a_byte_limit_on_a_page_boundary_cuts_there(services: Any) -> None:
    _one_byte_records(services)
    assert _read_sized(services, 2 * SIZES_PAGE) == list(range(2 * SIZES_PAGE))
