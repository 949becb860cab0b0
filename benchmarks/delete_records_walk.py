"""What lies across an offset (committed_across, app/storage/read_committed.py) and a refused
DeleteRecords, on a partition of many one-record committed transactions: the walk DeleteRecords,
the deletion of consumed records and an offset commit's straddle run under the partition's
append lock, as it was (every committed transactional batch positioned from the offset on) and
as it is (the window of commit positions from the offset up to the partition's largest span past
it, read first from ix_record_batches_txn_span, migration 0050), on the same database in the
same run. "after" is the two statements committed_across runs; "before" the one it ran.

    .venv/bin/python benchmarks/delete_records_walk.py                       # SQLite and PostgreSQL
    .venv/bin/python benchmarks/delete_records_walk.py --db postgresql --txns 100000 --repeats 5
    .venv/bin/python benchmarks/delete_records_walk.py --long                # the bound's worst case
    .venv/bin/python benchmarks/delete_records_walk.py --plans --repeats 1   # EXPLAIN each form first
    .venv/bin/python benchmarks/delete_records_walk.py --commits 300         # what the index costs a Commit

The log, written with SQL into a scratch database migrated to head (benchmarks/scratch.py), its
topic created by TopicService: `--plain` one-record plain batches, then `--txns` one-record
committed transactions, each its record at an offset and its COMMIT marker at the next. Each
marker's offset has that transaction across it; each record's offset is a clean cut. With
`--long` the first transaction's marker is written last instead, so that it lies across every
offset past its record: the largest span is the whole log, the window every transaction, and
the bound saves nothing (the walk is the old one's, plus one probe).

Timed, each the median of `--repeats`, before then after, and their ratio: committed_across at
the marker of the first transaction (start), of the middle one and of the last (end), and a
refused DeleteRecords to the middle marker (TopicService.delete_records, which reads what lies
across the offset, then what lies across the nearest clean cuts below and above it, in one
database transaction). Every answer of the two forms is compared, and the refusal's text too.
On PostgreSQL autovacuum is off for the scratch database's log tables, so that the planner's
knowledge is the run's: measured three times, with no statistics (the fill's), after the
indexes are built again (REINDEX: the table's size known, its columns' NULLs not) and after
ANALYZE.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, bindparam, case, func, insert, select, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratch import scratch_database  # noqa: E402

from app.domain.errors import OffsetOutOfRange  # noqa: E402
from app.domain.log_start import Across  # noqa: E402
from app.services.topic_service import TopicService  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage import dialect, read_committed  # noqa: E402
from app.storage.engine import Database, build_engine  # noqa: E402
from app.storage.read_committed import (  # noqa: E402
    batch_runs,
    committed_batch,
    run_end,
    widest_txn_span_stmt,
)
from app.storage.tables import record_batches, records  # noqa: E402

NOW_MS = 1_700_000_000_000
CHUNK = 10_000
AFTER = read_committed.committed_across


@cache
def before_stmt(dialect_name: str) -> Any:
    """committed_across_stmt as it was before 0050: every committed transactional batch
    positioned from the offset on."""
    topic, part, at, log_start = (bindparam(n, type_=BigInteger())
                                  for n in ("topic_id", "partition", "position", "log_start"))
    rb = record_batches
    b = select(rb).where(rb.c.topic_id == topic, rb.c.partition == part, rb.c.txn_id.is_not(None),
                         committed_batch(rb), rb.c.commit_position >= at)
    run = batch_runs(dialect_name, b.subquery("b"), lambda b, r: (r.c.offset, b.c.commit_position),
                     lambda b: dialect.greatest(b.c.base_offset, log_start),
                     lambda b: dialect.least(run_end(b), at), partition_of=(topic, part)).subquery()
    marker = case((run.c.offset.is_not(None), run.c.commit_position))
    return select(func.min(run.c.offset), func.min(marker), func.max(marker))


def before_across(conn: Any, topic_id: int, partition: int, position: int, log_start: int) -> Across | None:
    """committed_across as it was before 0050: before_stmt alone."""
    first, first_marker, last_marker = conn.execute(before_stmt(conn.dialect.name), {
        "topic_id": topic_id, "partition": partition, "position": position, "log_start": log_start}).one()
    return None if first is None else Across(first, first_marker, last_marker)


def fill(db: Database, plain: int, txns: int, long: bool) -> int:
    """The log (the module's docstring); its log end."""
    end = plain + 2 * txns
    rec: list[dict[str, Any]] = []
    bat: list[dict[str, Any]] = []

    def flush() -> None:
        with db.write() as conn:
            if rec:
                conn.execute(insert(records), rec)
            if bat:
                conn.execute(insert(record_batches), bat)
        rec.clear()
        bat.clear()

    for o in range(plain):
        rec.append({"topic_id": 1, "partition": 0, "offset": o, "timestamp_ms": NOW_MS, "value": "p", "control_type": None})
        bat.append({"topic_id": 1, "partition": 0, "base_offset": o, "record_count": 1, "producer_id": None,
                    "producer_epoch": None, "base_sequence": None, "txn_id": None, "control_type": None,
                    "state": "committed", "commit_position": o})
        if len(rec) >= CHUNK:
            flush()
    for i in range(txns):
        o = plain + 2 * i
        marker = end if long and i == 0 else o + 1
        rec.append({"topic_id": 1, "partition": 0, "offset": o, "timestamp_ms": NOW_MS, "value": "t", "control_type": None})
        rec.append({"topic_id": 1, "partition": 0, "offset": marker, "timestamp_ms": NOW_MS,
                    "value": None, "control_type": "COMMIT"})
        bat.append({"topic_id": 1, "partition": 0, "base_offset": o, "record_count": 1, "producer_id": 5 + i,
                    "producer_epoch": 0, "base_sequence": 0, "txn_id": 1 + i, "control_type": None,
                    "state": "committed", "commit_position": marker})
        bat.append({"topic_id": 1, "partition": 0, "base_offset": marker, "record_count": 1, "producer_id": 5 + i,
                    "producer_epoch": 0, "base_sequence": None, "txn_id": 1 + i, "control_type": "COMMIT",
                    "state": None, "commit_position": None})
        if len(rec) >= CHUNK:
            flush()
    flush()
    log_end = end + 1 if long else end
    with db.write() as conn:
        conn.execute(text('UPDATE partitions SET next_offset = :n WHERE topic_id = 1 AND "partition" = 0'),
                     {"n": log_end})
    return log_end


def timed(call: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The median ms of `repeats` calls, and the last call's answer."""
    times, got = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        got = call()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), got


def refusal(service: TopicService, offset: int) -> str:
    try:
        service.delete_records("t", 0, offset)
    except OffsetOutOfRange as e:
        return str(e)
    raise AssertionError(f"DeleteRecords to {offset} was not refused")


def explain(db: Database, cases: dict[str, int]) -> None:
    """The plan of each form at each offset: EXPLAIN ANALYZE on PostgreSQL (its rows and times
    per node), EXPLAIN QUERY PLAN on SQLite."""
    name = db.engine.dialect.name
    for form, stmt in (("before", before_stmt), ("after", read_committed.committed_across_stmt)):
        for case_name, offset in cases.items():
            if case_name.startswith("DeleteRecords"):
                continue
            params = {"topic_id": 1, "partition": 0, "position": offset, "log_start": 0}
            with db.read() as conn:
                if form == "after":
                    span = conn.execute(widest_txn_span_stmt(), {"topic_id": 1, "partition": 0}).scalar_one()
                    params["before"] = offset + span
                sql = str(stmt(name).params(**params).compile(
                    conn, compile_kwargs={"literal_binds": True, "render_postcompile": True}))
                prefix = "EXPLAIN (ANALYZE, COSTS OFF, BUFFERS) " if name == "postgresql" else "EXPLAIN QUERY PLAN "
                rows = conn.exec_driver_sql(prefix + sql).all()
            lines = [r[0] for r in rows] if name == "postgresql" else [r[3] for r in rows]
            print(f"    {form}, {case_name} at {offset}:")
            print("\n".join(f"      {line}" for line in lines), flush=True)


def measure_state(db: Database, service: TopicService, cases: dict[str, int], repeats: int, label: str,
                  plans: bool = False) -> None:
    if plans:
        print(f"{label}, plans:")
        explain(db, cases)
    line = []
    for case_name, offset in cases.items():
        answers, ms = {}, {}
        for form, across in (("before", before_across), ("after", AFTER)):
            # TopicService reads what lies across an offset through the module's attribute.
            read_committed.committed_across = across
            try:
                if case_name == "DeleteRecords (middle)":
                    ms[form], answers[form] = timed(lambda: refusal(service, offset), repeats)
                else:
                    with db.read() as conn:
                        ms[form], answers[form] = timed(lambda: across(conn, 1, 0, offset, 0), repeats)
            finally:
                read_committed.committed_across = AFTER
        assert answers["before"] == answers["after"], answers
        line.append(f"  {case_name:22s} at {offset:7d}: before {ms['before']:8.2f} ms, after {ms['after']:6.2f} ms, "
                    f"before ÷ after {ms['before'] / ms['after']:7.1f}   ({answers['after']})")
    print(f"{label}:")
    print("\n".join(line), flush=True)


def measure(kind: str, plain: int, txns: int, repeats: int, long: bool, plans: bool) -> None:
    with scratch_database(kind, "delwalk_bench") as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
        db = Database(build_engine(url, pool_size=2))
        try:
            service = TopicService(db, settings, lambda: NOW_MS)
            service.create("t", 1)
            if kind == "postgresql":
                with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    for table in ("record_batches", "records_1_0" if _has_leaf(conn) else "records"):
                        conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            t0 = time.perf_counter()
            log_end = fill(db, plain, txns, long)
            print(f"{kind}: {plain:,} plain batches, {txns:,} one-record transactions{' (the first across all)' if long else ''}"
                  f", log end {log_end:,}, filled in {time.perf_counter() - t0:.0f} s; median of {repeats} each",
                  flush=True)
            first, last = plain + 1, plain + 2 * (txns - 1) + 1
            middle = plain + 2 * (txns // 2) + 1
            cases = {"start": first, "middle": middle, "end": last, "DeleteRecords (middle)": middle}
            if kind == "sqlite":
                measure_state(db, service, cases, repeats, "  SQLite", plans)
                return
            measure_state(db, service, cases, repeats, "  PostgreSQL, no statistics", plans)
            with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("REINDEX TABLE record_batches")
            measure_state(db, service, cases, repeats, "  PostgreSQL, after REINDEX (size known, NULLs not)", plans)
            with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("ANALYZE record_batches")
                conn.exec_driver_sql("ANALYZE records")
            measure_state(db, service, cases, repeats, "  PostgreSQL, after ANALYZE", plans)
        finally:
            db.engine.dispose()


def measure_commits(kind: str, commits: int, rounds: int) -> None:
    """What ix_record_batches_txn_span costs a Commit: transactions of one Send of 10 records
    each, through the services (begin, Send, Commit), in rounds alternating with the index
    dropped and built again, on one scratch database; each round's Commit median, and the
    medians of the rounds of each."""
    from app.composition import Services
    from app.domain.records import RecordToAppend
    from app.services.log_service import SendBatch

    with scratch_database(kind, "delwalk_commit") as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
        db = Database(build_engine(url, pool_size=2))
        try:
            services = Services.build(settings, db, lambda: int(time.time() * 1000))
            services.topics.create("t", 1)
            p = services.coordinator.init_producer_id(transactional_id="c", transaction_timeout_ms=None)
            batch = [RecordToAppend(None, "1", None, 1) for _ in range(10)]
            seq = 0
            medians: dict[bool, list[float]] = {True: [], False: []}
            for r in range(-1, 2 * rounds):  # round -1 warms up, not counted
                with_index = r % 2 == 0
                with db.write() as conn:
                    conn.exec_driver_sql(f"DROP INDEX IF EXISTS {SPAN_INDEX}")
                    if with_index:
                        conn.exec_driver_sql(SPAN_INDEX_DDL)
                times = []
                for _ in range(commits):
                    services.coordinator.begin("c", p.producer_id, p.producer_epoch)
                    services.log.send([SendBatch("t", 0, batch, seq)], producer_id=p.producer_id,
                                      producer_epoch=p.producer_epoch, transactional_id="c")
                    seq += len(batch)
                    t0 = time.perf_counter()
                    services.coordinator.end_transaction("c", p.producer_id, p.producer_epoch, commit=True)
                    times.append((time.perf_counter() - t0) * 1000)
                if r >= 0:
                    medians[with_index].append(statistics.median(times))
            w, wo = statistics.median(medians[True]), statistics.median(medians[False])
            print(f"{kind}: Commit of a one-Send transaction, median of {rounds} rounds of {commits} each: with the "
                  f"index {w:.3f} ms (rounds {min(medians[True]):.3f}..{max(medians[True]):.3f}), without "
                  f"{wo:.3f} ms (rounds {min(medians[False]):.3f}..{max(medians[False]):.3f}), with ÷ without "
                  f"{w / wo:.3f}", flush=True)
        finally:
            db.engine.dispose()


SPAN_INDEX = "ix_record_batches_txn_span"
SPAN_INDEX_DDL = (f'CREATE INDEX {SPAN_INDEX} ON record_batches (topic_id, "partition", (commit_position - base_offset)) '
                  "WHERE txn_id IS NOT NULL AND commit_position IS NOT NULL AND control_type IS NULL")


def _has_leaf(conn: Any) -> bool:
    return conn.exec_driver_sql("SELECT to_regclass('records_1_0') IS NOT NULL").scalar()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--plain", type=int, default=1_000)
    parser.add_argument("--txns", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--long", action="store_true")
    parser.add_argument("--plans", action="store_true", help="print each form's plan at each offset first")
    parser.add_argument("--commits", type=int, default=0,
                        help="instead: time this many Commits a round with the index and without (measure_commits)")
    parser.add_argument("--rounds", type=int, default=6, help="--commits' rounds of each")
    args = parser.parse_args()
    for kind in (["sqlite", "postgresql"] if args.db == "both" else [args.db]):
        if args.commits:
            measure_commits(kind, args.commits, args.rounds)
            continue
        measure(kind, args.plain, args.txns, args.repeats, args.long, args.plans)


if __name__ == "__main__":
    main()
