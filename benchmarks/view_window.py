"""A read_committed window of 1,000 positions through the `committed_records` view, near the start,
in the middle and at the end of a 200,000-record partition, with this tree's view and another
tree's, in the same database and the same run.

    git worktree add /tmp/outbox-before <commit>
    .venv/bin/python benchmarks/view_window.py --before /tmp/outbox-before
    .venv/bin/python benchmarks/view_window.py --db sqlite --rounds 24 --before /tmp/outbox-before

A scratch database per kind (benchmarks/scratch.py), migrated by this tree, holds one partition
of benchmarks/batch_layout.py's log (plain and idempotent batches, transactions of 1-3 batches
interleaved, 85 % committed, 10 % aborted, 5 % open) and, beside this tree's view, the --before
tree's (its app/storage/sql/committed_records.sqlite.sql or .postgresql.sql) as
`committed_records_before`. No ANALYZE unless --analyze: the service never runs one. Both views'
rows of every window are checked equal before anything is timed.

Each round reads every window, in an order shuffled each round (seeded, printed): through both
views as Spark's Python data source asks (spark_jobs.reader.statement.select_statement, ordered by
commit position) and as Spark's JDBC source does (the same without ORDER BY); and, for
reference, as this tree's HTTP Fetch (app.storage.read.fetch, read_committed, 1,000 records) and
Kafka Fetch (app.storage.offset_order.read_batches, 1,000 rows) read the same position, which do not
read the view. Prints milliseconds per read (median) and this tree's rate ÷ the --before tree's,
with its spread over each quarter of the rounds; on SQLite also the virtual machine instructions
each read ran (counted once, after the rounds, with a progress handler): its work, which other
processes' load on the machine does not move.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import ROOT, scratch_database  # noqa: E402
from batch_layout import BACKFILL, MARKER_COLUMNS, TOPIC_ID, Db, make_log, today_rows  # noqa: E402
from run import ratio_line  # noqa: E402 - the benchmark's own modules, not a package

sys.path.insert(0, str(ROOT))
from app.domain.types import IsolationLevel  # noqa: E402
from app.storage import offset_order, read  # noqa: E402
from spark_jobs.common.positions import TopicRange  # noqa: E402
from spark_jobs.reader.planning import Split  # noqa: E402
from spark_jobs.reader.statement import positions_predicate, select_statement, split_predicate  # noqa: E402

TOPIC = "view-window"
WINDOW = 1_000


def positions(records: int) -> tuple[int, ...]:
    """Where the windows start: near the log start, in the middle, near the end (1,000, 100,000
    and 190,000 of 200,000 records)."""
    return WINDOW, records // 2, records * 19 // 20


def setup(kind: str, url: str, before: Path, records: int, seed: int, analyze: bool) -> int:
    """The partition's log, the --before tree's view beside this one's; the log end."""
    db = Db(kind, url, durable=False)
    log = make_log(random.Random(seed), records)
    db.begin()
    db.execute("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
               "check_expected_offsets, created_ms) VALUES (:t, :n, 1, 'delete', -1, :f, 0)",
               {"t": TOPIC_ID, "n": TOPIC, "f": False})
    db.execute('INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (:t, 0, :n, 0)',
               {"t": TOPIC_ID, "n": log.next_offset})
    db.copy("records", MARKER_COLUMNS, (row for b in log.batches for row in today_rows(b, 0, 1)))
    # The records' batch rows, as migration 0019 derives them (the view reads through them).
    for backfill in BACKFILL:
        db.execute(backfill)
    ddl = (before / "app" / "storage" / "sql" / f"committed_records.{kind}.sql").read_text()
    renamed = ddl.replace("VIEW committed_records AS", "VIEW committed_records_before AS", 1)
    assert renamed != ddl, "the --before tree's view is not CREATE [OR REPLACE] VIEW committed_records AS"
    db.execute(renamed)
    db.commit()
    if analyze:
        if kind == "postgresql":
            db.conn.autocommit = True
        db.execute("ANALYZE")
    db.close()
    return log.next_offset


def statement(kind: str, view: str, lo: int, *, ordered: bool) -> str:
    split = Split(TopicRange(TOPIC, 0, lo, lo + WINDOW))
    sql = select_statement(split, kind, include_headers=True)
    if view != "committed_records":
        # A view before batch_position (before migration 0020) was read bounded on
        # commit_position alone, as its readers bounded it.
        alone = [c for c in positions_predicate(TOPIC, 0, lo, lo + WINDOW, kind) if "batch_position" not in c]
        sql = sql.replace(split_predicate(split, kind), " AND ".join(alone)).replace(
            "FROM committed_records ", f"FROM {view} ")
    return sql if ordered else sql.rsplit(" ORDER BY ", 1)[0]


def run(kind: str, args: argparse.Namespace, rng: random.Random) -> None:
    with scratch_database(kind, "view_window") as url:
        end = setup(kind, url, args.before, args.records, args.seed, args.analyze)
        engine = create_engine(url, poolclass=NullPool)
        with engine.connect() as conn:
            def view_read(view: str, lo: int, ordered: bool) -> Callable[[], int]:
                sql = statement(kind, view, lo, ordered=ordered)
                return lambda: len(conn.exec_driver_sql(sql).all())

            def http_fetch(lo: int) -> Callable[[], int]:
                return lambda: len(read.fetch(conn, topic_id=TOPIC_ID, partition=0, offset=lo, max_records=WINDOW,
                                              isolation=IsolationLevel.READ_COMMITTED).records)

            def kafka_fetch(lo: int) -> Callable[[], int]:
                return lambda: sum(len(b.records) for b in offset_order.read_batches(
                    conn, TOPIC_ID, 0, lo, end, WINDOW, max_bytes=2**31 - 1, min_one=True))

            units: dict[tuple[str, int, str], Callable[[], int]] = {}
            for lo in positions(args.records):
                for ordered, how in ((True, "ordered"), (False, "unordered")):
                    before, after = (conn.exec_driver_sql(statement(kind, v, lo, ordered=True)).all()
                                     for v in ("committed_records_before", "committed_records"))
                    assert before == after, f"the views differ at [{lo}, {lo + WINDOW})"
                    units[(how, lo, "before")] = view_read("committed_records_before", lo, ordered)
                    units[(how, lo, "after")] = view_read("committed_records", lo, ordered)
                units[("HTTP Fetch", lo, "this tree")] = http_fetch(lo)
                units[("Kafka Fetch", lo, "this tree")] = kafka_fetch(lo)
            conn.rollback()
            turns: dict[tuple[str, int, str], list[tuple[int, float]]] = defaultdict(list)
            steps: dict[tuple[str, int, str], int] = {}
            keys = list(units)
            for _ in range(args.rounds):
                rng.shuffle(keys)
                for key in keys:
                    started = time.perf_counter()
                    n = units[key]()
                    turns[key].append((n, time.perf_counter() - started))
                    conn.rollback()
            if kind == "sqlite":  # the work itself, which the machine's load does not move
                raw = conn.connection.driver_connection
                for key in keys:
                    counted = [0]
                    raw.set_progress_handler(lambda: counted.__setitem__(0, counted[0] + 1) or 0, 1_000)
                    units[key]()
                    raw.set_progress_handler(None, 0)
                    conn.rollback()
                    steps[key] = counted[0]
        engine.dispose()

    def ms(key: tuple[str, int, str]) -> float:
        return statistics.median(t for _, t in turns[key]) * 1000

    print(f"\n{kind}: {end:,} offsets, windows of {WINDOW:,} positions, {args.rounds} rounds"
          f"{', ANALYZEd' if args.analyze else ''}")
    def vm(key: tuple[str, int, str]) -> str:
        return f" {steps[key]:,} |" if steps else ""

    vm_head = " SQLite VM instructions (thousands), before / after |" if steps else ""
    print(f"| window from | read | rows | before, ms | after, ms | rate after ÷ before | quarters |{vm_head}")
    print("| ---: | --- | ---: | ---: | ---: | ---: | --- |" + (" ---: |" if steps else ""))
    for lo in positions(args.records):
        for how in ("ordered", "unordered"):
            a, b = turns[(how, lo, "after")], turns[(how, lo, "before")]
            rate = (sum(n for n, _ in a) / sum(t for _, t in a)) / (sum(n for n, _ in b) / sum(t for _, t in b))
            row = ratio_line(f"{lo:,} | view, {how} | {a[0][0]:,} | {ms((how, lo, 'before')):.2f} | "
                             f"{ms((how, lo, 'after')):.2f}", rate, a, b)
            print(row + (f" {steps[(how, lo, 'before')]:,} / {steps[(how, lo, 'after')]:,} |" if steps else ""))
    for lo in positions(args.records):
        for how in ("HTTP Fetch", "Kafka Fetch"):
            key = (how, lo, "this tree")
            print(f"| {lo:,} | {how} (no view) | {turns[key][0][0]:,} | | {ms(key):.2f} | | |{vm(key)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="the source tree whose view is the reference")
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--analyze", action="store_true", help="ANALYZE the database after filling it")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**31)
    print(f"seed {args.seed}")
    rng = random.Random(args.seed)
    for kind in (("sqlite", "postgresql") if args.db == "both" else (args.db,)):
        run(kind, args, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
