"""A partition appended by `outbox.append`, one record per application transaction, or by an
idempotent producer (--writer idempotent), read whole through the view `committed_records`
against straight from `records` (PostgreSQL): what the view costs beyond the table for the
outbox's commonest write, and for Kafka's default producer's (docs/DESIGN-batches.md,
"Self-committed records"; docs/benchmarks.md).

--fill makes the database (migrated to the head of the tree this runs from: run it from each
tree to compare them), a topic `scan` of one partition and --records records, each appended by
`SELECT outbox.append(...)` and committed on its own (so one batch row per record; from
migration 0041 on each flagged self-committed); with --writer idempotent, in batches of
--batch-records records of one idempotent producer, each appended by the service's appender
(app.storage.append.append_batches, as an idempotent Send appends) in a database transaction
of its own (from migration 0044 on each flagged self-committed). Then rounds, after a warm-up round, each
reading both ways in an order shuffled afresh from a printed --seed, by `COPY (SELECT ...) TO
STDOUT` through psycopg (every row sent as text, as a JDBC read fetches it), the output
discarded; --jit on or off as a session setting (the service reads with jit off).

    PYTHONPATH=<tree> .venv/bin/python benchmarks/self_committed_scan.py --database outbox_selfscan --fill
    PYTHONPATH=<tree> .venv/bin/python benchmarks/self_committed_scan.py --database outbox_idemscan --fill \
        --writer idempotent --batch-records 1
    PYTHONPATH=<tree> .venv/bin/python benchmarks/self_committed_scan.py --database outbox_selfscan --rounds 9
    psql -h 127.0.0.1 -U postgres -c 'DROP DATABASE outbox_selfscan'
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
_AT_ONCE = 200
COLUMNS = '"partition", "offset", commit_position, timestamp_ms, key, value, headers'
READS = {
    "view": f"SELECT {COLUMNS} FROM committed_records WHERE topic = 'scan' AND \"partition\" = 0",
    "records": ('SELECT "partition", "offset", "offset" AS commit_position, timestamp_ms, key, value, headers '
                "FROM records WHERE topic_id = (SELECT topic_id FROM topics WHERE name = 'scan') "
                'AND "partition" = 0'),
}


def fill(database: str, records: int, writer: str = "append", batch_records: int = 1) -> None:
    from app.storage import migrate

    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
    migrate.upgrade(url)
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{database}") as conn:
        conn.execute("INSERT INTO topics (name, partition_count, cleanup_policy, retention_ms, check_expected_offsets, "
                     "created_ms) VALUES ('scan', 1, 'delete', -1, FALSE, 0)")
        conn.execute('INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) '
                     "SELECT topic_id, 0, 0, 0 FROM topics WHERE name = 'scan'")
        conn.commit()
        if writer == "idempotent":
            fill_idempotent(url, records, batch_records)
            conn.execute("VACUUM ANALYZE")
            return
        conn.autocommit = True
        # The commits' WAL flushed in the background: the rows and their layout are the same,
        # the fill is not held to the disk's flushes.
        conn.execute("SET synchronous_commit = off")
        started = time.perf_counter()
        # Each record an application transaction of its own (BEGIN, the append, COMMIT, which
        # publishes it), _AT_ONCE of them sent in one round trip.
        for first in range(0, records, _AT_ONCE):
            conn.execute("".join(
                f"BEGIN; SELECT outbox.append('scan', 0, NULL, '{{\"n\": {i}, \"pad\": \"{'x' * 40}\"}}'::json); COMMIT;"
                for i in range(first, min(first + _AT_ONCE, records))))
        print(f"filled {records} records in {time.perf_counter() - started:.1f} s")
        conn.execute("VACUUM ANALYZE")


_PRODUCER_ID = 1_000


def fill_idempotent(url: str, records: int, batch_records: int) -> None:
    """Topic `scan`'s partition filled by one idempotent producer's batches of `batch_records`
    records, each appended as an idempotent Send appends it, in a transaction of its own."""
    from sqlalchemy import create_engine, text

    from app.domain.records import RecordToAppend
    from app.storage.append import append_batches
    from app.storage.record_rows import BatchToAppend

    engine = create_engine(url, pool_size=1)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO producers (producer_id, producer_epoch, created_ms) VALUES (:p, 0, 0)"),
                     {"p": _PRODUCER_ID})
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'scan'")).scalar_one()
    started = time.perf_counter()
    with engine.connect() as conn:
        conn.execute(text("SET synchronous_commit = off"))
        conn.commit()
        for first in range(0, records, batch_records):
            batch = [RecordToAppend(None, f'{{"n": {i}, "pad": "{"x" * 40}"}}', None, 1)
                     for i in range(first, min(first + batch_records, records))]
            with conn.begin():
                append_batches(conn, [BatchToAppend(topic_id, 0, batch, base_sequence=first)],
                               producer_id=_PRODUCER_ID, producer_epoch=0, transactional_id=None, txn_id=None,
                               now_ms=1)
    engine.dispose()
    print(f"filled {records} records in {time.perf_counter() - started:.1f} s")


def read(conn: psycopg.Connection, sql: str) -> float:
    started = time.perf_counter()
    with conn.cursor().copy(f"COPY ({sql}) TO STDOUT") as copy:
        for _ in copy:
            pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database", required=True)
    parser.add_argument("--fill", action="store_true")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--writer", choices=("append", "idempotent"), default="append")
    parser.add_argument("--batch-records", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--jit", choices=("on", "off"), default="off")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    if args.fill:
        fill(args.database, args.records, args.writer, args.batch_records)
        return
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}, jit {args.jit}")
    rng = random.Random(seed)
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{args.database}", autocommit=True) as conn:
        conn.execute(f"SET jit = {args.jit}")
        counts = {name: conn.execute(f"SELECT count(*), sum(\"offset\"), sum(commit_position) FROM ({sql}) s").fetchone()
                  for name, sql in READS.items()}
        assert len(set(counts.values())) == 1, counts
        print(f"rows, offsets, positions: {counts['view']}")
        times: dict[str, list[float]] = {name: [] for name in READS}
        for round_ in range(args.rounds + 1):
            order = list(READS)
            rng.shuffle(order)
            for name in order:
                took = read(conn, READS[name])
                if round_:  # the first round warms up
                    times[name].append(took)
    ratios = [r / v for r, v in zip(times["records"], times["view"])]
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})")
    print(f"records ÷ view: median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
