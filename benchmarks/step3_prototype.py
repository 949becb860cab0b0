"""PROTOTYPE of step 3 (docs/DESIGN-partitioned-records.md) on the partitioned layout of
migration 0035: each record carrying its batch's base offset (`batch_base`), and each log
partition's view joining its committed batches to its records by equality
(`r.batch_base = b.base_offset`) instead of one primary-key range per batch.

Built by `ensure`, in a scratch database filled by benchmarks/spark_source.py (--fill) only,
never in a service's database (it alters `records`):

- `records` (the partitioned parent, so every leaf) gains `batch_base bigint`, filled leaf by
  leaf from `record_batches` (each record's batch is the batch row of its topic and partition
  with base_offset <= offset < base_offset + record_count: a loop over the partition's batch
  rows in base-offset order, one primary-key range each), then VACUUM FULL, so that each leaf
  is rewritten in the order the rows were updated (offset order, as the leaves were), and
  ANALYZE; every record is checked to have found its batch;
- `ix_step3_records_batch_base` on (topic_id, "partition", batch_base): what the loop plan
  descends (the hash plan reads no index of `records`);
- in schema `step3_views`, for each log partition (topic_id t, partition p), two views rendered
  from app/storage/sql/committed_records.postgresql.sql exactly as outbox.create_partition_view
  renders the partition's view (the partition written in, on the run and on the batch rows),
  with the join alone changed (each rewrite must match once):
  - `loop_<t>_<p>`: the fenced LATERAL kept, its offset range replaced by
    `r.batch_base = b.base_offset AND r."offset" >= p.log_start_offset` (one descent of the new
    index per committed batch);
  - `hash_<t>_<p>`: the LATERAL made a plain join of the partition's records behind OFFSET 0
    (so the batch rows cannot reach into it: no loop per batch), on
    `r.batch_base = b.base_offset AND r."offset" >= p.log_start_offset`: the planner is left a
    hash join (or a merge join);
  each checked to return exactly the rows of the real partition view (count and sums).

`split_statements` (benchmarks/scan_view_cost.py, relation `records`) gives the third form,
per Spark split: the split's committed batches hashed, one offset range of the leaf.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.storage.sql import EVERY_PARTITION, load  # noqa: E402
from migrations.sql_files import render  # noqa: E402

SCHEMA = "step3_views"
INDEX = "ix_step3_records_batch_base"
TOPIC = "orders"
COLUMNS = '"partition", "offset", commit_position, timestamp_ms, key, value, headers'

RANGE = (r'AND r\."offset" >= GREATEST\(b\.base_offset, p\.log_start_offset\)\s*'
         r'AND r\."offset" < b\.base_offset \+ b\.record_count',
         'AND r.batch_base = b.base_offset\n      AND r."offset" >= p.log_start_offset')
LATERAL = (r'CROSS JOIN LATERAL \(\s*SELECT r\."offset", (.*?) FROM records r\s*'
           r'WHERE (r\.topic_id = \d+ AND r\."partition" = \d+)\s*'
           r'-- .*?AND r\."offset" < b\.base_offset \+ b\.record_count\s*OFFSET 0\s*\) r',
           r'JOIN (\n    SELECT r."offset", r.batch_base, \1 FROM records r\n    WHERE \2\n    OFFSET 0\n) r '
           r'ON r.batch_base = b.base_offset AND r."offset" >= p.log_start_offset')


def partition_view(topic_id: int, partition: int) -> str:
    return f"committed_records.partition_{int(topic_id)}_{int(partition)}"


def prototype_view(kind: str, topic_id: int, partition: int) -> str:
    return f"{SCHEMA}.{kind}_{int(topic_id)}_{int(partition)}"


def rendered(view: str, topic_id: int, partition: int) -> str:
    """The template rendered as outbox.create_partition_view renders a partition's view."""
    # The joins of the view of every partition (EVERY_PARTITION's), as a partition's view had them
    # before migration 0045 wrote its topic's name in: the prototype's relations join the same.
    return render(load("committed_records.postgresql.sql"), {
        **{k: EVERY_PARTITION[k] for k in ("topic", "records_joins", "log_start", "batches_topic_join")},
        "view": view, "topic_id": str(int(topic_id)), "partition": str(int(partition)),
        "of_partition": f'\n  AND b.topic_id = {int(topic_id)} AND b."partition" = {int(partition)}',
        "records_of_partition": f'\n  AND r.topic_id = {int(topic_id)} AND r."partition" = {int(partition)}'})


def rewritten(sql: str, pattern: str, replacement: str) -> str:
    out, n = re.subn(pattern, replacement, sql, flags=re.S)
    if n != 1:
        raise SystemExit(f"the view's template changed: {pattern!r} matched {n} times")
    return out


def loop_sql(topic_id: int, partition: int) -> str:
    return rewritten(rendered(prototype_view("loop", topic_id, partition), topic_id, partition), *RANGE)


def hash_sql(topic_id: int, partition: int) -> str:
    return rewritten(rendered(prototype_view("hash", topic_id, partition), topic_id, partition), *LATERAL)


def log_partitions(conn: psycopg.Connection) -> list[tuple[int, int]]:
    return [tuple(r) for r in conn.execute(
        'SELECT p.topic_id, p."partition" FROM partitions p JOIN topics t USING (topic_id) '
        'WHERE t.name = %s ORDER BY 2', (TOPIC,)).fetchall()]


def fingerprint(conn: psycopg.Connection, relation: str) -> tuple[Any, ...]:
    return conn.execute(
        f'SELECT count(*), sum("offset"), sum(commit_position), sum(batch_position), sum(timestamp_ms), '
        f"sum(length(key)), sum(length(value)), sum(length(headers)), sum(producer_id), "
        f"count(*) FILTER (WHERE transactional), sum(length(key_bytes)), sum(length(value_bytes)), count(DISTINCT topic) "
        f"FROM {relation}").fetchone()


def ensure(conn: psycopg.Connection, *, log: Any = print) -> bool:
    """Build the prototype unless there (autocommit connection); whether it did."""
    has = conn.execute("SELECT 1 FROM information_schema.columns WHERE table_name = 'records' "
                       "AND column_name = 'batch_base' AND table_schema = current_schema()").fetchone()
    if has and conn.execute(f"SELECT to_regnamespace('{SCHEMA}')").fetchone()[0] is not None:
        return False
    parts = log_partitions(conn)
    if not has:
        conn.execute("ALTER TABLE records ADD COLUMN batch_base bigint")
        conn.execute("SET enable_hashjoin = off")
        conn.execute("SET enable_mergejoin = off")
        for t, p in parts:
            conn.execute(
                "UPDATE records r SET batch_base = b.base_offset FROM ("
                "SELECT base_offset, record_count FROM record_batches "
                f'WHERE topic_id = {t} AND "partition" = {p} ORDER BY base_offset) b '
                f'WHERE r.topic_id = {t} AND r."partition" = {p} '
                'AND r."offset" >= b.base_offset AND r."offset" < b.base_offset + b.record_count')
        conn.execute("RESET enable_hashjoin")
        conn.execute("RESET enable_mergejoin")
        missing = conn.execute("SELECT count(*) FROM records WHERE batch_base IS NULL").fetchone()[0]
        assert missing == 0, f"{missing} records found no batch"
        conn.execute("VACUUM FULL records")
        conn.execute(f'CREATE INDEX IF NOT EXISTS {INDEX} ON records (topic_id, "partition", batch_base)')
        conn.execute("ANALYZE records")
    conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    conn.execute(f"CREATE SCHEMA {SCHEMA}")
    for t, p in parts:
        conn.execute(loop_sql(t, p))
        conn.execute(hash_sql(t, p))
        expected = fingerprint(conn, partition_view(t, p))
        for kind in ("loop", "hash"):
            got = fingerprint(conn, prototype_view(kind, t, p))
            assert got == expected, (kind, t, p, got, expected)
        log(f"  step3 prototype: partition {p}: loop and hash views equal to {partition_view(t, p)} "
            f"({expected[0]:,} rows)")
    return True


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True)
    parser.add_argument("--print", action="store_true", help="print partition 0's prototype views' SQL")
    a = parser.parse_args()
    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={a.database}", autocommit=True) as c:
        if a.print:
            t0, p0 = log_partitions(c)[0]
            print(loop_sql(t0, p0), "\n\n", hash_sql(t0, p0))
        else:
            print("built" if ensure(c) else "already there")
