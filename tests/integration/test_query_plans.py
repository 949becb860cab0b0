"""The read_committed joins start from the few rows that select, whatever the planner knows.

A read_committed window is a range of the committed batches' index (ix_record_batches_committed)
and, per batch, a range of the records' primary key (its run of offsets); the view's
self-committed records (docs/DESIGN-batches.md) are a range of the records' primary key alone. Read the other way
round, the join walks every record of the partition per batch: on a partition of 60,000
records one fetch took 111 s on SQLite and 0.3 s instead of 2 ms on PostgreSQL before the join
order was fixed (then from the COMMIT markers). The service never runs ANALYZE, and a partition
just filled has no statistics, so the order is written into the SQL (LATERAL on PostgreSQL,
CROSS JOIN on SQLite); and a run is bounded below by one expression, so that the primary key's
range starts at the batch, not at the log start. These tests read the plans.

A transactional id prefix (GET /v1/transactions) is a range scan of the transactions' primary key on SQLite.
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select, text

from app.domain.records import RecordToAppend
from app.services.log_service import SendBatch
from app.storage import cleaning, message_ids
from app.storage.read_window import _batch_page_stmt, _records_stmt
from app.storage.read_committed import (
    committed_between_for_groups_stmt,
    committed_across_stmt,
    group_positions_stmt,
    widest_txn_span_stmt,
)
from app.storage.tables import transactions
from app.storage.transaction_listing import _id_starts_with
from spark_jobs.reader.statement import positions_predicate
from tests.conftest import unavailable
from tests.migration_helpers import connected

TRANSACTIONS = 20
RECORDS_PER_SEND = 50


def _fill(services) -> None:  # type: ignore[no-untyped-def]
    """Transactions of two Sends each, interleaved with plain records, in partition 0. Another
    topic beside it, so that on PostgreSQL `records` has leaves other than the partition's."""
    services.topics.create("plans", 1)
    services.topics.create("beside", 2)
    p = services.coordinator.init_producer_id(transactional_id="planner", transaction_timeout_ms=None)
    records = [RecordToAppend(None, "1", None, 1) for _ in range(RECORDS_PER_SEND)]
    seq = 0
    for _ in range(TRANSACTIONS):
        services.coordinator.begin("planner", p.producer_id, p.producer_epoch)
        for _ in range(2):
            services.log.send([SendBatch("plans", 0, records, seq)], producer_id=p.producer_id,
                              producer_epoch=p.producer_epoch, transactional_id="planner")
            seq += RECORDS_PER_SEND
            services.log.send([SendBatch("plans", 0, records)], producer_id=None, producer_epoch=None,
                              transactional_id=None)
        services.coordinator.end_transaction("planner", p.producer_id, p.producer_epoch, commit=True)


_LEAF_SCAN = re.compile(r"using (records_[0-9]+_[0-9]+)_pkey on (records_[0-9]+_[0-9]+)")


def _plan(database, sql: str, *, pruned_when_planned: bool = True) -> list[str]:  # type: ignore[no-untyped-def]
    """The plan's lines, outer loops first. On PostgreSQL `records` is a leaf per log partition
    (migration 0035): a scan of the leaf of `plans`/0 reads here as the scan of `records` by
    pk_records it stands for. A statement that names its partition by its parameters is planned
    for that leaf alone (`pruned_when_planned`), and the plan then names no other leaf; one
    that takes the partition from another table's rows holds every leaf, pruned as it runs, and
    the other leaves' scans are left out here."""
    with database.engine.connect() as conn:
        if database.dialect != "postgresql":
            return [row[3] for row in conn.execute(text("EXPLAIN QUERY PLAN " + sql))]
        return _as_records(conn, [row[0] for row in conn.execute(text("EXPLAIN " + sql))], pruned_when_planned)


def _as_records(conn, lines: list[str], pruned_when_planned: bool = True) -> list[str]:  # type: ignore[no-untyped-def]
    """A PostgreSQL plan's lines with the scan of the leaf of `plans`/0 read as a scan of
    `records` by pk_records (_plan)."""
    topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'plans'")).scalar_one()
    leaf = f"records_{topic_id}_0"
    out, others, skipping = [], [], False
    for line in lines:
        scan = _LEAF_SCAN.search(line)
        if scan and scan[2] != leaf:
            others.append(line)
            skipping = True
            continue
        if skipping and line.lstrip().startswith(("Index Cond", "Filter", "Heap Fetches")):
            continue
        skipping = False
        out.append(line.replace(f"{leaf}_pkey on {leaf}", "pk_records on records"))
    assert not (pruned_when_planned and others), lines
    return out


def _scans(lines: list[str]) -> list[str]:
    """The index each scan of `records` uses, in plan order (outer first)."""
    names = ("pk_records", "sqlite_autoindex_records_1", "ix_record_batches_committed_txn", "ix_record_batches_committed",
             "ix_record_batches_txn_span", "ix_record_batches_txn",
             "pk_record_batches", "sqlite_autoindex_record_batches_1")
    return [next(n for n in names if n in line) for line in lines if any(n in line for n in names)]


def _compiled(conn, stmt, **params) -> str:  # type: ignore[no-untyped-def]
    return str(stmt.params(**params).compile(conn, compile_kwargs={"literal_binds": True, "render_postcompile": True}))


def _run_bounds(database, lines: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    """The primary key's bounds on the records' offset in each scan of `records` (one lower,
    one upper: a run's range starts at its batch, not at the log start)."""
    if database.dialect == "postgresql":
        return re.findall(r'"offset" (>=|<) ', " ".join(line for line in lines if "Index Cond" in line
                                                          and "records.partition" not in line
                                                          and '"offset"' in line))
    return re.findall(r"offset(>|<)\?", " ".join(line for line in lines if "USING" in line and " records " in
                                                 f" {line} "))


def test_a_read_committed_fetch_plans_from_the_batch_index_then_each_batchs_run(services, database) -> None:  # type: ignore[no-untyped-def]
    """A plan's page: the next committed batches from the position (the batch index's range,
    with a LIMIT), each counted and sized through a primary-key range of its run."""
    _fill(services)
    with database.engine.connect() as conn:
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'plans'")).scalar_one()
        sql = _compiled(conn, _batch_page_stmt(database.dialect), topic_id=topic_id, partition=0, start=100,
                        high_watermark=10_000, log_start=0, limit=64, want=1000)
    lines = _plan(database, sql)
    primary_key = "pk_records" if database.dialect == "postgresql" else "sqlite_autoindex_records_1"
    assert _scans(lines) == ["ix_record_batches_committed", primary_key], lines
    assert sorted(_run_bounds(database, lines)) == sorted(["<", ">=" if database.dialect == "postgresql" else ">"]), lines


def test_a_read_committed_fetch_reads_the_batch_index_range_then_each_batchs_run(services, database) -> None:  # type: ignore[no-untyped-def]
    """A plan's records: the batches positioned in the window (the batch index's range), each
    joined to its run (one primary-key range, bounded once below and once above)."""
    _fill(services)
    with database.engine.connect() as conn:
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'plans'")).scalar_one()
        sql = _compiled(conn, _records_stmt(database.dialect), topic_id=topic_id, partition=0, first=100, last=1000,
                        batches_to=1000, from_offset=0, to_offset=2**62)
    lines = _plan(database, sql)
    primary_key = "pk_records" if database.dialect == "postgresql" else "sqlite_autoindex_records_1"
    assert _scans(lines) == ["ix_record_batches_committed", primary_key], lines
    assert sorted(_run_bounds(database, lines)) == sorted(["<", ">=" if database.dialect == "postgresql" else ">"]), lines
    assert not [line for line in lines if "Seq Scan" in line or re.search(r"SCAN (records|record_batches)\b", line)]


def _view_scans(lines: list[str]) -> list[str]:
    """The index each scan of `record_batches` and `records` uses, in plan order (outer first);
    a scan of either table by no index is "whole"."""
    names = ("ix_record_batches_committed_joined", "ix_record_batches_committed", "pk_records",
             "sqlite_autoindex_records_1")
    out = []
    for line in lines:
        if any(n in line for n in names):
            out.append(next(n for n in names if n in line).replace("sqlite_autoindex_records_1", "pk_records"))
        elif re.search(r"Seq Scan on record|SCAN (b|r)\b", line):
            out.append("whole")
    return out


# The view's two parts (app/storage/sql/committed_records.postgresql.sql, and SQLite's), as
# _view_scans reads their scans: the self-committed records, a range of the records' primary
# key; then the committed batches not flagged (their index's range), each joined to its run.
_VIEW_PARTS = ["pk_records", "ix_record_batches_committed_joined", "pk_records"]


def test_a_read_of_the_view_bounded_as_spark_bounds_it_is_the_records_range_and_the_batch_index_range(  # type: ignore[no-untyped-def]
        services, database) -> None:
    """The view on a partition with no statistics, bounded as Spark's readers bound it
    (positions_predicate): the self-committed records from the records' primary key, the
    committed batches from their index, each batch's run from the records' primary key; and the
    range's upper end from two probes of the same (the next batch within NEXT_BATCH_WINDOW of
    the end, then past it), each bounded from below; no scan of either table whole."""
    _fill(services)
    sql = "SELECT * FROM committed_records WHERE " + " AND ".join(
        positions_predicate("plans", 0, 100, 1000, database.dialect))
    lines = _plan(database, sql, pruned_when_planned=False)
    if database.dialect == "postgresql":
        # The probes first (InitPlans), then the window.
        assert _view_scans(lines) == _VIEW_PARTS * 3, lines
        bounds = lines[next(i for i, line in enumerate(lines) if "on record_batches b " in line) + 1]
        assert "(commit_position >= 100) AND (commit_position <= COALESCE(" in bounds, lines
        ranges = [lines[i + 1] for i, line in enumerate(lines) if "pk_records on records" in line]
        # The self-committed part of the window, then of each probe: a range of the offsets.
        assert [r for r in ranges if "GREATEST" not in r] == [
            r for r in ranges if re.search(r'\("offset" >= (1000|2000|p\.log_start_offset)\)', r)], ranges
        assert any('("offset" >= 1000) AND ("offset" < 2000)' in r for r in ranges), ranges
    else:
        # The view flattened into the query (its parts' columns of one affinity each), so the
        # bounds holding the probes are each part's: the probes (scalar subqueries, each the
        # two parts merged in order) listed in each part, after the scan they bound.
        probes = _VIEW_PARTS * 2
        assert _view_scans(lines) == ["pk_records", *probes, "ix_record_batches_committed_joined", *probes,
                                      "pk_records"], lines
        window_batches = next(line for line in lines[lines.index("UNION ALL"):] if line.startswith("SEARCH b "))
        assert "commit_position>? AND commit_position<?" in window_batches, lines
    # Each batch's run from one lower bound of the records' primary key: the later of the run's
    # start and the log start; each range of the self-committed records from one too.
    runs = [lines[i + 1] if database.dialect == "postgresql" else line for i, line in enumerate(lines)
            if "pk_records" in line or "sqlite_autoindex_records_1" in line]
    assert len(runs) == (6 if database.dialect == "postgresql" else 10) and all(
        re.search(r'"offset" >= GREATEST\(|"offset" >= |\(topic_id=\? AND partition=\? AND offset>\?( AND offset<\?)?\)', r)
        for r in runs), runs


def test_a_read_of_the_view_bounded_on_commit_positions_alone_still_uses_the_batch_index(  # type: ignore[no-untyped-def]
        services, database) -> None:
    """A reader that bounds commit_position alone (ad-hoc SQL) is read right, but as every
    committed batch not flagged of the partition (the index's range on the topic and partition
    only), each joined to its run: what batch_position's bounds avoid. The self-committed
    records are a range of the primary key all the same (their commit_position is their offset)."""
    _fill(services)
    sql = ("SELECT * FROM committed_records WHERE topic = 'plans' AND \"partition\" = 0 "
           "AND commit_position >= 100 AND commit_position < 1000")
    assert _view_scans(_plan(database, sql, pruned_when_planned=False)) == _VIEW_PARTS


def _scans_of(node: dict, out: list[tuple[str, str | None, int]]) -> list[tuple[str, str | None, int]]:
    """(relation, index, rows it returned over every loop) of each scan in a PostgreSQL plan
    (EXPLAIN ANALYZE's JSON), the leaves of `records` as `records`."""
    if "Relation Name" in node:
        relation = re.sub(r"^records_[0-9]+_[0-9]+$", "records", node["Relation Name"])
        out.append((relation, node.get("Index Name"), node["Actual Rows"] * node["Actual Loops"]))
    for child in node.get("Plans", []):
        _scans_of(child, out)
    return out


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_a_read_of_the_view_over_self_committed_records_is_a_range_of_the_records_alone(  # type: ignore[no-untyped-def]
        services, database, idempotent) -> None:
    """A partition appended by plain Sends only, or by an idempotent producer's (self-committed
    batches, docs/DESIGN-batches.md; an idempotent one since migration 0044, its records
    carrying its producer id), read through the view as Spark bounds it: the window is one
    range of the records' primary key, and no batch row is read. On SQLite, the plan's first
    part (the self-committed records) searches the topic, the partition and the records' range
    only; on PostgreSQL every scan of record_batches, as run, returns nothing, and the records
    come from the primary key."""
    services.topics.create("plans", 1)
    services.topics.create("beside", 2)
    records = [RecordToAppend(None, "1", None, 1) for _ in range(RECORDS_PER_SEND)]
    p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None) if idempotent else None
    for i in range(20):
        services.log.send([SendBatch("plans", 0, records, None if p is None else i * RECORDS_PER_SEND)],
                          producer_id=None if p is None else p.producer_id,
                          producer_epoch=None if p is None else p.producer_epoch, transactional_id=None)
    sql = "SELECT * FROM committed_records WHERE " + " AND ".join(
        positions_predicate("plans", 0, 100, 900, database.dialect))
    with database.engine.connect() as conn:
        assert [(r.offset, r.producer_id) for r in conn.execute(text(sql + ' ORDER BY "offset"'))] == [
            (o, None if p is None else p.producer_id) for o in range(100, 900)]
        if database.dialect == "sqlite":
            lines = [row[3] for row in conn.execute(text("EXPLAIN QUERY PLAN " + sql))]
            first = lines[lines.index("LEFT-MOST SUBQUERY") + 1:]
            first = first[:next(i for i, line in enumerate(first) if not line.startswith("SEARCH "))]
            assert [line.split(" USING")[0] for line in first] == ["SEARCH t", "SEARCH p", "SEARCH r"], lines
            assert first[2] == ("SEARCH r USING INDEX sqlite_autoindex_records_1 "
                                "(topic_id=? AND partition=? AND offset>? AND offset<?)"), lines
            return
        plan = conn.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)).scalar_one()
    scans = _scans_of(plan[0]["Plan"], [])
    assert [rows for relation, _, rows in scans if relation == "record_batches"] == [0, 0, 0], scans
    assert all(index.endswith("_pkey") for relation, index, rows in scans if relation == "records"), scans
    # The window's 800 records, and the probe's: those from the window's end to the
    # partition's, within NEXT_BATCH_WINDOW (the first of them is the next batch's).
    assert sum(rows for relation, _, rows in scans if relation == "records") == 800 + 100, scans


def _compiled_with_jit(conn, sql: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether PostgreSQL compiles `sql` with JIT on this connection, were every plan costly
    enough for it (`jit_above_cost` 0 for this transaction)."""
    with conn.begin():
        conn.execute(text("SET LOCAL jit_above_cost = 0"))
        plan = conn.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)).scalar_one()
    return "JIT" in plan[0]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_the_services_connections_compile_no_read_committed_fetch_with_jit(services, database, db_url) -> None:  # type: ignore[no-untyped-def]
    """Its plans are index ranges and nested loops of milliseconds, estimated at a share of the
    whole table per batch: on a `records` table of 2,040,000 rows (255,000 a partition) a
    1,000-record Fetch took 25.8 ms with JIT's compilation and 13.5 without."""
    _fill(services)
    with database.engine.connect() as conn:
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'plans'")).scalar_one()
        sql = _compiled(conn, _records_stmt(database.dialect), topic_id=topic_id, partition=0, first=100, last=1000,
                        batches_to=1000, from_offset=0, to_offset=2**62)
    with connected(db_url) as conn:  # a connection of the same database that is not the service's
        if not _compiled_with_jit(conn, sql):
            unavailable("this PostgreSQL compiles nothing with JIT, so the test cannot tell: install its "
                        "JIT provider (Debian's postgresql-15 has llvmjit) and leave jit on by default")
    with database.engine.connect() as conn:
        assert not _compiled_with_jit(conn, sql)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_transactional_id_prefix_is_a_range_of_the_primary_key_on_sqlite(services, database) -> None:  # type: ignore[no-untyped-def]
    """(On PostgreSQL the prefix is starts_with(), exact under any collation: see _id_starts_with.)"""
    for n in range(20):
        services.coordinator.init_producer_id(transactional_id=f"sink.{n}", transaction_timeout_ms=None)
    with database.engine.connect() as conn:
        sql = str(select(transactions).where(_id_starts_with("sink.", "sqlite")).compile(
            conn, compile_kwargs={"literal_binds": True}))
        lines = [row[3] for row in conn.execute(text("EXPLAIN QUERY PLAN " + sql))]
    assert any("sqlite_autoindex_transactions_1" in line for line in lines), lines
    assert not any(line.startswith("SCAN") for line in lines), lines


def _lag_plan(services, database, group_id: str | None, limit: int | None, order: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The plan of the lag of two groups of _fill's partition (committed at 100 and 300 in
    `order`), every group's or one's, its partition and order written in."""
    _fill(services)
    with database.engine.connect() as conn:
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'plans'")).scalar_one()
        conn.execute(text("INSERT INTO group_offsets (group_id, topic_id, partition, committed_offset, metadata, "
                          "committed_ms, read_order) VALUES ('g', :t, 0, 100, NULL, 0, :o), "
                          "('h', :t, 0, 300, NULL, 0, :o)"), {"t": topic_id, "o": order})
        conn.commit()
        pos = group_positions_stmt(limit, group_id).cte("pos")
        sql = str(committed_between_for_groups_stmt(database.dialect, 1_000_000, pos, [(topic_id, 0, order)]).compile(
            conn, compile_kwargs={"literal_binds": True, "render_postcompile": True}))
    return _plan(database, sql)


def _counted_once(database, lines: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Never a whole scan of the partition's records or batch rows; the intervals counted once,
    in a CTE materialized, whatever loop over the groups joins them (run as a subquery, it was
    put inside one on PostgreSQL, and the partition counted once per group again)."""
    assert not [line for line in lines if re.search(r"Seq Scan on record", line)
                or re.search(r"SCAN (records|record_batches)\b", line)], lines
    assert ("CTE counted_0" if database.dialect == "postgresql" else "MATERIALIZE counted_0") in [
        line.strip() for line in lines], lines


def _bounded(database, lines: list[str], column: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The scans of record_batches bounded on `column` on both sides."""
    if database.dialect == "postgresql":
        return [line for line in lines if "Index Cond" in line and f"({column} >= " in line
                and f"({column} < " in line]
    return [line for line in lines if f"{column}>? AND {column}<?" in line]


@pytest.mark.parametrize(("group_id", "limit"), [(None, 10_000), ("g", None)], ids=["every group", "one group"])
def test_a_groups_lag_is_counted_by_interval_through_indexes_never_a_whole_scan(  # type: ignore[no-untyped-def]
        services, database, group_id, limit) -> None:
    """The lag (committed_between_for_groups) of every group (the /metrics scrape) or of one
    (GET /v1/groups/{group_id}/lag), once per partition for all of its groups: per interval
    between two groups' starts, the committed batches positioned in it (the batch index's
    range, bounded on both sides) and the one positioned past it first (a probe of the same
    index), counted batch by batch, or for a partition with holes each batch's run (primary
    key) record by record. On PostgreSQL planned for the leaf of the partition counted alone."""
    lines = _lag_plan(services, database, group_id, limit, "commit")
    primary_key = "pk_records" if database.dialect == "postgresql" else "sqlite_autoindex_records_1"
    assert set(_scans(lines)) == {"ix_record_batches_committed", primary_key}, lines
    _counted_once(database, lines)
    # In each of the two counts of an interval (record by record, batch by batch), the range
    # and the probe past it (up to the log end) bounded.
    assert len(_bounded(database, lines, "commit_position")) == 4, lines
    assert set(_run_bounds(database, lines)) == {"<", ">=" if database.dialect == "postgresql" else ">"}, lines


def test_a_kafka_consumers_lag_is_counted_by_interval_through_primary_keys_never_a_whole_scan(  # type: ignore[no-untyped-def]
        services, database) -> None:
    """The lag of offsets in offset order (a Kafka consumer's): per interval, the batches whose
    runs start in it (the batches' primary key's range, bounded on both sides) and the one whose
    run crosses its start (a probe of the same key), each batch's run clipped to it."""
    lines = _lag_plan(services, database, None, 10_000, "offset")
    primary_key = "pk_records" if database.dialect == "postgresql" else "sqlite_autoindex_records_1"
    batches = "pk_record_batches" if database.dialect == "postgresql" else "sqlite_autoindex_record_batches_1"
    assert set(_scans(lines)) == {batches, primary_key}, lines
    _counted_once(database, lines)
    assert len(_bounded(database, lines, "base_offset")) == 2, lines
    assert set(_run_bounds(database, lines)) == {"<", ">=" if database.dialect == "postgresql" else ">"}, lines


def test_the_first_record_committed_from_a_position_walks_the_committed_transactional_batches_only(  # type: ignore[no-untyped-def]
        services, database) -> None:
    """first_record_committed_from and committed_across (DeleteRecords, a deletion of consumed
    records, under the append lock): the committed transactional batches from the position up
    to the partition's largest span past it (ix_record_batches_committed_txn's range, bounded
    on both sides, never the plain batches ix_record_batches_committed holds too), then each
    batch's run; the largest span one probe of ix_record_batches_txn_span's end. On a partition
    with no statistics."""
    _fill(services)
    with database.engine.connect() as conn:
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'plans'")).scalar_one()
        sql = _compiled(conn, committed_across_stmt(database.dialect), topic_id=topic_id, partition=0,
                        position=100, log_start=0, before=150)
        span_sql = _compiled(conn, widest_txn_span_stmt(), topic_id=topic_id, partition=0)
    lines = _plan(database, sql)
    primary_key = "pk_records" if database.dialect == "postgresql" else "sqlite_autoindex_records_1"
    assert _scans(lines) == ["ix_record_batches_committed_txn", primary_key], lines
    assert not [line for line in lines if "Seq Scan" in line or re.search(r"SCAN (records|record_batches|b)\b", line)]
    # The walk's range is bounded above as well as below.
    walk = [line for line in lines if "commit_position >=" in line or "commit_position>?" in line]
    assert walk and all("commit_position <" in line or "commit_position<?" in line for line in walk), lines
    span_lines = _plan(database, span_sql)
    assert _scans(span_lines) == ["ix_record_batches_txn_span"], span_lines
    assert not [line for line in span_lines if "Sort" in line or "TEMP B-TREE" in line or "Seq Scan" in line
                or re.search(r"SCAN record_batches\b", line)], span_lines


_CLEANER_STATEMENTS = {
    "chunk_start": (cleaning._CHUNK_START, {"c_topic_id": None, "c_partition": 0, "c_start": 100}),
    "last_stored": (cleaning._LAST_STORED, {"c_topic_id": None, "c_partition": 0, "c_start": 100, "c_end": 1000}),
    "chunk_summary": (cleaning._CHUNK_SUMMARY, {"c_topic_id": None, "c_partition": 0, "c_start": 100, "c_end": 1000}),
    "stored_rows' batches": (cleaning._RUN_TXNS, {"topic_id": None, "partition": 0, "start": 100, "last": 999}),
    "compaction_rows' batches": (cleaning._COMPACTION_BATCHES, {"topic_id": None, "partition": 0, "start": 100,
                                                               "last": 999, "limit": 10}),
}


@pytest.mark.parametrize("name", list(_CLEANER_STATEMENTS))
def test_the_cleaners_batch_row_lookups_are_primary_key_probes_and_ranges(services, database, name) -> None:  # type: ignore[no-untyped-def]
    """The log cleaner finds a row's batch row (the one holding an offset) and a range's batch
    rows through record_batches' primary key: never ix_record_batches_txn, which a planner
    without statistics may pick for `txn_id IS NOT NULL` and walk every transactional batch of
    the partition with; never a scan of a whole table."""
    _fill(services)
    stmt, params = _CLEANER_STATEMENTS[name]
    with database.engine.connect() as conn:
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'plans'")).scalar_one()
        key = "c_topic_id" if "c_topic_id" in params else "topic_id"
        # Bound, not rendered as literals: their bind parameters are untyped.
        compiled = stmt.compile(conn)
        bound = compiled.construct_params({**params, key: topic_id})
        if database.dialect == "postgresql":
            lines = [row[0] for row in conn.exec_driver_sql("EXPLAIN " + str(compiled), bound)]
        else:
            lines = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled),
                                                            tuple(bound[k] for k in compiled.positiontup))]
    batch_key = "pk_record_batches" if database.dialect == "postgresql" else "sqlite_autoindex_record_batches_1"
    scans = _scans(lines)
    assert batch_key in scans and "ix_record_batches_txn" not in scans, lines
    assert not [line for line in lines if "Seq Scan" in line or re.search(r"SCAN (records|record_batches|holder)\b", line)]


def test_the_batch_rows_a_deletion_empties_are_found_by_one_probe_of_the_records_each(services, database) -> None:  # type: ignore[no-untyped-def]
    """delete_emptied_batches: the batch rows of the range (a primary-key range), each probed
    for a record of its run (the records' primary key bounded by the run's both ends). Bounded
    by the partition alone, or below only, a probe walks the partition's records (or the
    chunk's just deleted) per batch row."""
    _fill(services)
    with database.engine.connect() as conn:
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'plans'")).scalar_one()
        compiled = cleaning._DELETE_EMPTIED_BATCHES.compile(conn)
        bound = compiled.construct_params({"c_topic_id": topic_id, "c_partition": 0, "c_start": 100, "c_end": 1000})
        if database.dialect == "postgresql":
            lines = _as_records(conn, [row[0] for row in conn.exec_driver_sql("EXPLAIN " + str(compiled), bound)])
            probes = [cond for scan, cond in zip(lines, lines[1:]) if "using pk_records" in scan]
            assert probes and all('"offset" >= record_batches.base_offset' in cond and '"offset" <' in cond
                                  for cond in probes), "\n".join(lines)
        else:
            lines = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled),
                                                            tuple(bound[k] for k in compiled.positiontup))]
            probes = [line for line in lines if "sqlite_autoindex_records_1" in line]
            assert probes and all("offset>?" in line and "offset<?" in line for line in probes), lines
    assert not [line for line in lines if "Seq Scan" in line or re.search(r"SCAN (records|record_batches)\b", line)]


def test_the_message_ids_a_deletion_frees_are_a_range_of_their_records_each_probed_once(services, database) -> None:  # type: ignore[no-untyped-def]
    """message_ids.DELETE_ORPHANED: the ids of the range (uq_record_message_ids_record's range),
    each probed for its record by the records' primary key, with equality. Scanning the ids of
    every topic, or the partition's records per id, would make each deletion of records cost
    in proportion to the log."""
    _fill(services)
    with database.engine.begin() as conn:  # an id for every record of the topic
        conn.execute(text('INSERT INTO record_message_ids (topic_id, message_id, "partition", "offset") '
                          """SELECT r.topic_id, 'm' || r."partition" || '-' || r."offset", r."partition", r."offset" """
                          "FROM records r JOIN topics t ON t.topic_id = r.topic_id WHERE t.name = 'plans'"))
    with database.engine.connect() as conn:
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'plans'")).scalar_one()
        compiled = message_ids.DELETE_ORPHANED.compile(conn)
        bound = compiled.construct_params({"c_topic_id": topic_id, "c_partition": 0, "c_start": 100, "c_end": 1000})
        if database.dialect == "postgresql":
            lines = _as_records(conn, [row[0] for row in conn.exec_driver_sql("EXPLAIN " + str(compiled), bound)])
            ids = [cond for scan, cond in zip(lines, lines[1:]) if "uq_record_message_ids_record" in scan]
            probes = [cond for scan, cond in zip(lines, lines[1:]) if "using pk_records" in scan]
            assert ids and all('"offset" >= ' in cond and '"offset" < ' in cond for cond in ids), "\n".join(lines)
            assert probes and all('"offset" = record_message_ids."offset"' in cond for cond in probes), "\n".join(lines)
        else:
            lines = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled),
                                                            tuple(bound[k] for k in compiled.positiontup))]
            assert [line for line in lines if "sqlite_autoindex_record_message_ids_2" in line and "offset>?" in line], lines
            assert [line for line in lines if "sqlite_autoindex_records_1" in line and "offset=?" in line], lines
    assert not [line for line in lines
                if "Seq Scan" in line or re.search(r"SCAN (records|record_message_ids)\b", line)], lines
