"""The ceiling of a batch layout (docs/DESIGN-batches.md), measured in SQL against today's.

Today a record row carries its producer's columns (producer id, epoch, sequence, txn id) and a
read_committed reader finds a transaction's records through its COMMIT marker
(`committed_records`). The proposed layout stores those columns once a batch, in a batch row
that also carries the batch's commit position once the transaction commits, and leaves a
record row its offset, timestamp, key, value and headers. This benchmark builds today's schema
with the real migrations of an older tree (`--today-tree`: since migration 0023 this
repository's records carry no producer columns, so "today" is the layout before it; a scratch
database, benchmarks/scratch.py) and, beside it, a
prototype of the proposed one (tables `proto_batches` and `proto_records`, made here), loads
the same log into both, and measures, in interleaved rounds whose order is shuffled (the seed
is printed):

(a) appends of 1,000-record batches: take the offsets (the partition row's UPDATE, as
    app/storage/log_end.py does) and COPY the rows, then commit. Today's plain Send's
    rows (the producer columns NULL), today's transactional Send's rows (producer id, epoch,
    sequence, txn id, the head's batch size), and the prototype's plain and transactional
    batches (a batch row, written on PostgreSQL by the statement that takes the offsets, and
    records of seven columns). The reference is today's plain append.
(b) a read_committed scan of a window of commit positions of one partition (plain,
    idempotent and transactional batches, some transactions aborted, some open): through
    today's `committed_records` view, through the prototype's scan (the committed batches'
    index range, each joined to its records' primary-key range; also as a view read the way
    Spark reads one, its bounds on the batch's position too), and, as the reference, a raw
    primary-key scan of as many rows of today's `records`. Both layouts' answers are checked
    equal, row for row, before anything is timed. Ordered (commit order, as HTTP Fetch reads),
    unordered (as Spark's JDBC source reads), and counted in the database.
(c) a Commit's completion in one partition: the claim's DELETE, the marker's offset and row,
    the commit; the prototype also records the commit position in each of the transaction's
    batch rows (an UPDATE of its own, or, on PostgreSQL, folded into the marker's INSERT by a
    data-modifying WITH). For transactions of 1 and of 15 batches (a commit every 100 ms is
    about 15 Sends a transaction in benchmarks/run.py).

Commits do not wait for the disk unless --durable (synchronous_commit off on PostgreSQL,
synchronous NORMAL on SQLite): the flush is the same for every path, and on a shared disk its
time varies more than the differences measured here.

With --backfill it first derives batch rows from today's records alone, in SQL, as the
migration to the batch layout would (BACKFILL), times it, and checks that every window reads the
same rows through them as through today's view.

Ratios are of rates (records, or rows, or commits per second) within the same run, with the
spread of the same ratio over each quarter of the rounds. On PostgreSQL the CPU the database
backend of the benchmark's connection used per record (or row, or commit) is read from
/proc/<pid>/stat around each timed unit.

    .venv/bin/python benchmarks/batch_layout.py                 # PostgreSQL and SQLite
    .venv/bin/python benchmarks/batch_layout.py --db postgresql --rounds 24 --seed 1
"""

from __future__ import annotations

import argparse
import random
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from run import ratio_line  # noqa: E402 - the benchmark's own modules, not a package

TOPIC_ID = 1
SCAN_PARTITION, COPY_PARTITION, COMMIT_PARTITION = 0, 1, 2
COPY_BATCH = 1_000
COMMIT_BATCH = 100
# The prototype scan widens its index range by the largest plain batch (a plain batch's
# commit position is its last offset, and a window may start inside it).
MAX_BATCH = 1_000

# The prototype layout. A batch is a run of offsets [base_offset, base_offset + record_count)
# of one partition, written by one append; a control marker is a batch of one offset with no
# record row. commit_position: the highest position at which the batch exposes records (a
# plain batch's last offset, set by its append; a transactional batch's COMMIT marker offset,
# set by the completion that writes the marker); NULL while it exposes nothing (an open or
# aborted transaction's batch, a marker). A record's position is its own offset in a plain
# batch and the batch's commit_position in a transactional one.
PROTO_DDL = [
    """CREATE TABLE proto_batches (
        topic_id integer NOT NULL,
        "partition" integer NOT NULL,
        base_offset bigint NOT NULL,
        record_count integer NOT NULL,
        producer_id bigint,
        producer_epoch integer,
        base_sequence integer,
        txn_id bigint,
        control_type varchar(8),
        commit_position bigint,
        PRIMARY KEY (topic_id, "partition", base_offset))""",
    """CREATE INDEX ix_proto_batches_committed ON proto_batches
        (topic_id, "partition", commit_position, base_offset) WHERE commit_position IS NOT NULL""",
    # What a completion stamps: the batches of a transaction that has no position yet.
    """CREATE INDEX ix_proto_batches_open ON proto_batches (topic_id, "partition", txn_id)
        WHERE txn_id IS NOT NULL AND commit_position IS NULL AND control_type IS NULL""",
    """CREATE TABLE proto_records (
        topic_id integer NOT NULL,
        "partition" integer NOT NULL,
        "offset" bigint NOT NULL,
        timestamp_ms bigint NOT NULL,
        key text,
        value text,
        headers text,
        message_id text,
        key_bytes bytea,
        value_bytes bytea,
        PRIMARY KEY (topic_id, "partition", "offset"),
        CONSTRAINT ck_proto_records_one_key CHECK (key IS NULL OR key_bytes IS NULL),
        CONSTRAINT ck_proto_records_one_value CHECK (value IS NULL OR value_bytes IS NULL))""",
    # What today's records keep besides the producer's columns, so that an append into either
    # table pays for the same constraints and for the one index left.
    """CREATE UNIQUE INDEX ix_proto_records_message_id ON proto_records (topic_id, message_id)
        WHERE message_id IS NOT NULL""",
]

TODAY_COLUMNS = ("topic_id", "partition", "offset", "timestamp_ms", "key", "value", "headers",
                 "producer_id", "producer_epoch", "sequence", "txn_id", "batch_record_count")
MARKER_COLUMNS = (*TODAY_COLUMNS, "control_type")
PROTO_RECORD_COLUMNS = ("topic_id", "partition", "offset", "timestamp_ms", "key", "value", "headers")
PROTO_BATCH_COLUMNS = ("topic_id", "partition", "base_offset", "record_count", "producer_id", "producer_epoch",
                       "base_sequence", "txn_id", "control_type", "commit_position")

VALUE = '{"order_id": %d, "customer": "c-0042", "amount_cents": 12345, "currency": "EUR", "lines": 3}'


# --- the two databases, through their own drivers --------------------------------------------

class Db:
    """One connection, SQL written with :name parameters for both drivers."""

    def __init__(self, kind: str, url: str, *, durable: bool) -> None:
        self.kind = kind
        if kind == "postgresql":
            self.conn: Any = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
            self.backend_pid: int | None = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            if not durable:
                self.conn.execute("SET synchronous_commit = off")
            self.conn.commit()
        else:
            self.conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            # FULL is the service's default; NORMAL does not wait for the disk at a commit.
            self.conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self.backend_pid = None

    def sql(self, text: str) -> str:
        if self.kind == "postgresql":
            return re.sub(r"(?<!:):(\w+)", r"%(\1)s", text)
        return text

    def begin(self) -> None:
        if self.kind == "sqlite":
            self.conn.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        if self.kind == "postgresql":
            self.conn.commit()
        elif self.conn.in_transaction:
            self.conn.execute("COMMIT")

    def execute(self, text: str, params: dict[str, Any] | None = None) -> list[tuple]:
        cur = self.conn.execute(self.sql(text), params or {})
        return cur.fetchall() if cur.description else []

    def copy(self, table: str, columns: Iterable[str], rows: Iterable[tuple]) -> None:
        """The rows in, as app.storage.dialect.bulk_insert sends them: COPY row by row on
        PostgreSQL, executemany on SQLite."""
        cols = ", ".join(f'"{c}"' for c in columns)
        if self.kind == "postgresql":
            with self.conn.cursor() as cur, cur.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join("?" for _ in cols.split(", "))
            self.conn.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", rows)

    def backend_cpu(self) -> float:
        """CPU seconds the PostgreSQL backend of this connection has run, from
        /proc/<pid>/schedstat (nanoseconds: /proc/<pid>/stat counts 10 ms ticks, coarser than
        one unit)."""
        if self.backend_pid is None:
            return 0.0
        return int(Path(f"/proc/{self.backend_pid}/schedstat").read_text().split()[0]) / 1e9

    def close(self) -> None:
        self.conn.close()


# --- the log both layouts hold ---------------------------------------------------------------

@dataclass
class Batch:
    base_offset: int
    record_count: int
    producer_id: int | None = None
    producer_epoch: int | None = None
    base_sequence: int | None = None
    txn_id: int | None = None
    control_type: str | None = None
    commit_position: int | None = None


@dataclass
class Log:
    batches: list[Batch] = field(default_factory=list)
    next_offset: int = 0


def make_log(rng: random.Random, records: int) -> Log:
    """A partition's log: plain batches (half of them an idempotent producer's) and batches of
    transactions of 1 to 3 batches interleaved with each other (up to 4 open at once), 85 %
    committed, 10 % aborted, 5 % left open."""
    log = Log()
    open_txns: dict[int, list[Batch]] = {}
    planned: dict[int, int] = {}
    next_txn, next_pid = 1, 1000
    sequences: dict[int, int] = {}
    while log.next_offset < records:
        if rng.random() < 0.5:
            n = rng.randint(50, 150)
            b = Batch(log.next_offset, n, commit_position=log.next_offset + n - 1)
            if rng.random() < 0.5:
                b.producer_id, b.producer_epoch, b.base_sequence = 7, 0, sequences.get(7, 0)
                sequences[7] = b.base_sequence + n
            log.batches.append(b)
            log.next_offset += n
            continue
        if len(open_txns) < 4 and (not open_txns or rng.random() < 0.4):
            open_txns[next_txn] = []
            planned[next_txn] = rng.randint(1, 3)
            next_txn += 1
        txn = rng.choice(sorted(open_txns))
        n = rng.randint(20, 100)
        pid = next_pid + txn
        b = Batch(log.next_offset, n, pid, 0, sequences.get(pid, 0), txn)
        sequences[pid] = b.base_sequence + n
        open_txns[txn].append(b)
        log.batches.append(b)
        log.next_offset += n
        if len(open_txns[txn]) == planned[txn]:
            outcome = rng.random()
            if outcome < 0.05:  # left open: no marker, ever
                open_txns.pop(txn)
                continue
            control = "COMMIT" if outcome < 0.90 else "ABORT"
            marker = Batch(log.next_offset, 1, pid, 0, None, txn, control)
            log.batches.append(marker)
            if control == "COMMIT":
                for tb in open_txns[txn]:
                    tb.commit_position = marker.base_offset
            open_txns.pop(txn)
            log.next_offset += 1
    return log


def today_rows(batch: Batch, partition: int, now_ms: int) -> Iterable[tuple]:
    """Today's `records` rows of a batch (MARKER_COLUMNS), as append_batches and marker_row
    write them."""
    if batch.control_type is not None:
        yield (TOPIC_ID, partition, batch.base_offset, now_ms, None, None, None, batch.producer_id,
               batch.producer_epoch, None, batch.txn_id, None, batch.control_type)
        return
    for i in range(batch.record_count):
        o = batch.base_offset + i
        yield (TOPIC_ID, partition, o, now_ms, f"k-{o % 977}", VALUE % o, None, batch.producer_id,
               batch.producer_epoch, None if batch.base_sequence is None else batch.base_sequence + i, batch.txn_id,
               batch.record_count if (i == 0 and batch.txn_id is not None) else None, None)


def proto_rows(batch: Batch, partition: int, now_ms: int) -> Iterable[tuple]:
    if batch.control_type is not None:
        return
    for i in range(batch.record_count):
        o = batch.base_offset + i
        yield (TOPIC_ID, partition, o, now_ms, f"k-{o % 977}", VALUE % o, None)


def proto_batch_row(batch: Batch, partition: int) -> tuple:
    return (TOPIC_ID, partition, batch.base_offset, batch.record_count, batch.producer_id, batch.producer_epoch,
            batch.base_sequence, batch.txn_id, batch.control_type, batch.commit_position)


def proto_view_ddl(kind: str) -> str:
    """The prototype's read_committed as a view, with the columns of `committed_records` and one
    more, `batch_position` (the batch's commit_position): a plain column, so that a reader's
    bounds on it (Spark's predicates) become the batch index's range, where its bounds on
    `commit_position` (a CASE) could only filter."""
    columns = ('t.name AS topic, b.topic_id, b."partition", r."offset", '
               'CASE WHEN b.txn_id IS NULL THEN r."offset" ELSE b.commit_position END AS commit_position, '
               "b.commit_position AS batch_position, r.timestamp_ms, r.key, r.value, r.headers, b.producer_id, "
               "b.txn_id IS NOT NULL AS transactional, r.key_bytes, r.value_bytes")
    run = ('r.topic_id = b.topic_id AND r."partition" = b."partition" AND r."offset" >= b.base_offset '
           'AND r."offset" < b.base_offset + b.record_count AND r."offset" >= p.log_start_offset')
    if kind == "postgresql":
        return (f"CREATE VIEW proto_committed_records AS SELECT {columns} FROM proto_batches b "
                "JOIN topics t ON t.topic_id = b.topic_id "
                'JOIN partitions p ON p.topic_id = b.topic_id AND p."partition" = b."partition" '
                "CROSS JOIN LATERAL (SELECT r.\"offset\", r.timestamp_ms, r.key, r.value, r.headers, r.key_bytes, "
                f"r.value_bytes FROM proto_records r WHERE {run} OFFSET 0) r WHERE b.commit_position IS NOT NULL")
    return (f"CREATE VIEW proto_committed_records AS SELECT {columns} FROM partitions p "
            "CROSS JOIN proto_batches b CROSS JOIN proto_records r JOIN topics t ON t.topic_id = b.topic_id "
            f'WHERE b.topic_id = p.topic_id AND b."partition" = p."partition" AND {run} '
            "AND b.commit_position IS NOT NULL")


def setup(db: Db, log: Log) -> None:
    """A topic of 3 partitions in today's schema, the prototype's tables, and the log in both."""
    db.begin()
    for ddl in (*PROTO_DDL, proto_view_ddl(db.kind)):
        db.execute(ddl)
    db.execute("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
               "check_expected_offsets, created_ms) VALUES (:t, 'batch-layout', 3, 'delete', -1, :f, 0)",
               {"t": TOPIC_ID, "f": False})
    for p in (SCAN_PARTITION, COPY_PARTITION, COMMIT_PARTITION):
        db.execute('INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) '
                   "VALUES (:t, :p, :n, 0)", {"t": TOPIC_ID, "p": p, "n": log.next_offset if p == SCAN_PARTITION else 0})
    db.copy("records", MARKER_COLUMNS, (row for b in log.batches for row in today_rows(b, SCAN_PARTITION, 1)))
    db.copy("proto_batches", PROTO_BATCH_COLUMNS, (proto_batch_row(b, SCAN_PARTITION) for b in log.batches))
    db.copy("proto_records", PROTO_RECORD_COLUMNS,
            (row for b in log.batches for row in proto_rows(b, SCAN_PARTITION, 1)))
    db.commit()
    if db.kind == "postgresql":
        db.conn.autocommit = True
        db.execute("VACUUM ANALYZE")
        db.conn.autocommit = False
    else:
        db.execute("ANALYZE")


# --- the migration's backfill -------------------------------------------------------------------

# Batch rows derived from today's records alone: the migration's own backfill (migration 0019,
# docs/DESIGN-batches.md, "Migration path for existing rows"), run into record_batches, which the
# scratch database has from its migrations: transactional batches from their heads and their
# partition's marker, markers one row each, plain records as runs of consecutive offsets of one
# producer and epoch with consecutive sequences (or none), cut every MAX_BATCH records.
BACKFILL_SQL = Path(__file__).resolve().parents[1] / "migrations" / "versions" / "sql" / "0019_backfill_batches.sql"
BACKFILL = ["DELETE FROM record_batches", *(s for s in BACKFILL_SQL.read_text().split("\n---\n") if s.strip())]


def backfill(db: Db, kind: str, windows: list[tuple[int, dict[str, Any], int]]) -> None:
    """Derive the batch rows from today's records (timed), then read every window through them
    and check the rows against today's view."""
    db.begin()
    t0 = time.perf_counter()
    for statement in BACKFILL:
        db.execute(statement)
    db.commit()
    took = time.perf_counter() - t0
    rows = db.execute('SELECT count(*) FROM records WHERE topic_id = :t AND "partition" = :p',
                      {"t": TOPIC_ID, "p": SCAN_PARTITION})[0][0]
    batches = db.execute("SELECT count(*) FROM record_batches")[0][0]
    scan = proto_scan_sql(kind).replace("proto_batches", "record_batches")
    for _, params, n in windows:
        if db.execute(scan, params) != db.execute(VIEW_SCAN, params):
            raise SystemExit(f"{kind}: the backfilled batch rows disagree with today's view on {params}")
    db.commit()
    print(f"backfill: {rows:,} rows of records → {batches:,} batch rows in {took:.2f} s ({rows / took:,.0f} rows/s); "
          f"every window reads the same rows through them as through today's view\n")


# --- (a) appends ------------------------------------------------------------------------------

TAKE_OFFSETS = ('UPDATE partitions SET next_offset = next_offset + :n, record_count = record_count + :n '
                'WHERE topic_id = :t AND "partition" = :p RETURNING next_offset')
# The prototype's batch row, written by the statement that takes the offsets (PostgreSQL: a
# data-modifying WITH, so the batch row costs no round trip).
TAKE_OFFSETS_WRITING_BATCH = (
    "WITH taken AS (" + TAKE_OFFSETS + ") "
    'INSERT INTO proto_batches (topic_id, "partition", base_offset, record_count, producer_id, producer_epoch, '
    "base_sequence, txn_id, commit_position) "
    "SELECT :t, :p, next_offset - :n, :n, CAST(:pid AS bigint), CAST(:epoch AS integer), CAST(:seq AS integer), "
    "CAST(:txn AS bigint), CASE WHEN CAST(:txn AS bigint) IS NULL THEN next_offset - 1 END FROM taken "
    "RETURNING base_offset")


class Appends:
    """One unit: a database transaction that appends one batch of COPY_BATCH records."""

    def __init__(self, db: Db) -> None:
        self.db = db
        self.sequence = 0
        self.txn_id = 10_000_000

    def _params(self, transactional: bool) -> dict[str, Any]:
        self.sequence += COPY_BATCH
        if not transactional:
            return {"t": TOPIC_ID, "p": COPY_PARTITION, "n": COPY_BATCH, "pid": None, "epoch": None, "seq": None,
                    "txn": None}
        self.txn_id += 1
        return {"t": TOPIC_ID, "p": COPY_PARTITION, "n": COPY_BATCH, "pid": 42, "epoch": 3,
                "seq": self.sequence - COPY_BATCH, "txn": self.txn_id}

    def today(self, transactional: bool) -> int:
        db, params = self.db, self._params(transactional)
        db.begin()
        base = db.execute(TAKE_OFFSETS, params)[0][0] - COPY_BATCH
        pid, epoch, seq, txn = params["pid"], params["epoch"], params["seq"], params["txn"]
        # As append_batches builds them: one tuple a record, the head's batch size set after.
        rows = [(TOPIC_ID, COPY_PARTITION, base + i, 1_700_000_000_000, f"k-{i}", VALUE % i, None, pid, epoch,
                 None if seq is None else seq + i, txn, None) for i in range(COPY_BATCH)]
        if txn is not None:
            rows[0] = rows[0][:-1] + (COPY_BATCH,)
        db.copy("records", TODAY_COLUMNS, rows)
        db.commit()
        return COPY_BATCH

    def proto(self, transactional: bool) -> int:
        db, params = self.db, self._params(transactional)
        db.begin()
        if db.kind == "postgresql":
            base = db.execute(TAKE_OFFSETS_WRITING_BATCH, params)[0][0]
        else:
            base = db.execute(TAKE_OFFSETS, params)[0][0] - COPY_BATCH
            db.execute('INSERT INTO proto_batches (topic_id, "partition", base_offset, record_count, producer_id, '
                       "producer_epoch, base_sequence, txn_id, commit_position) VALUES (:t, :p, :b, :n, :pid, :epoch, "
                       ":seq, :txn, CASE WHEN CAST(:txn AS bigint) IS NULL THEN :b + :n - 1 END)", {**params, "b": base})
        rows = [(TOPIC_ID, COPY_PARTITION, base + i, 1_700_000_000_000, f"k-{i}", VALUE % i, None)
                for i in range(COPY_BATCH)]
        db.copy("proto_records", PROTO_RECORD_COLUMNS, rows)
        db.commit()
        return COPY_BATCH


# --- (b) read_committed scans ----------------------------------------------------------------

# Ordered: commit order, as HTTP Fetch reads; unordered: as Spark's JDBC source reads the view.
VIEW_SCAN_UNORDERED = (
    'SELECT commit_position, "offset", timestamp_ms, key, value, headers, producer_id, transactional '
    'FROM committed_records WHERE topic_id = :t AND "partition" = :p '
    "AND commit_position >= :lo AND commit_position < :hi")
VIEW_SCAN = VIEW_SCAN_UNORDERED + ' ORDER BY commit_position, "offset"'


def proto_scan_sql(kind: str, ordered: bool = True) -> str:
    """The prototype's read_committed window: the committed batches whose positions meet
    [lo, hi) (ix_proto_batches_committed, one index range), each joined to its records'
    primary-key range; a plain batch's records keep only their own offsets within the window.
    Outer loop first, whatever the planner thinks, as the view does: LATERAL … OFFSET 0 on
    PostgreSQL, CROSS JOIN (never reordered) on SQLite."""
    position = 'CASE WHEN b.txn_id IS NULL THEN r."offset" ELSE b.commit_position END'
    batch_cond = ('b.topic_id = :t AND b."partition" = :p AND b.commit_position >= :lo '
                  "AND b.commit_position < :hi + :max_batch "
                  "AND ((b.txn_id IS NULL AND b.base_offset < :hi) OR (b.txn_id IS NOT NULL AND b.commit_position < :hi))")
    run_cond = ('r.topic_id = b.topic_id AND r."partition" = b."partition" AND r."offset" >= b.base_offset '
                'AND r."offset" < b.base_offset + b.record_count AND r."offset" >= p.log_start_offset '
                'AND (b.txn_id IS NOT NULL OR (r."offset" >= :lo AND r."offset" < :hi))')
    head = (f'SELECT {position} AS commit_position, r."offset", r.timestamp_ms, r.key, r.value, r.headers, '
            "b.producer_id, b.txn_id IS NOT NULL AS transactional ")
    order = ' ORDER BY b.commit_position, b.base_offset, r."offset"' if ordered else ""
    if kind == "postgresql":
        return (head + "FROM partitions p JOIN proto_batches b ON b.topic_id = p.topic_id AND b.\"partition\" = p.\"partition\" "
                "CROSS JOIN LATERAL (SELECT r.\"offset\", r.timestamp_ms, r.key, r.value, r.headers FROM proto_records r "
                f"WHERE {run_cond} OFFSET 0) r WHERE p.topic_id = :t AND p.\"partition\" = :p AND {batch_cond}" + order)
    return (head + "FROM partitions p CROSS JOIN proto_batches b CROSS JOIN proto_records r "
            f"WHERE p.topic_id = :t AND p.\"partition\" = :p AND b.topic_id = p.topic_id "
            f"AND b.\"partition\" = p.\"partition\" AND {batch_cond} AND {run_cond}" + order)


# As many rows as the window's, in the same shape, straight off today's primary key.
# Spark's read of the prototype's view: its bounds on commit_position, and the same bounds on the
# batch's position, widened by the largest plain batch.
PROTO_VIEW_SCAN = (
    'SELECT commit_position, "offset", timestamp_ms, key, value, headers, producer_id, transactional '
    'FROM proto_committed_records WHERE topic_id = :t AND "partition" = :p '
    "AND batch_position >= :lo AND batch_position < :hi + :max_batch "
    "AND commit_position >= :lo AND commit_position < :hi")

RAW_SCAN = ('SELECT "offset" AS commit_position, "offset", timestamp_ms, key, value, headers, producer_id, '
            'txn_id IS NOT NULL AS transactional FROM records '
            'WHERE topic_id = :t AND "partition" = :p AND "offset" >= :lo ORDER BY "offset" LIMIT :n')


def explain(db: Db, proto_scan: str, params: dict[str, Any], rows: int) -> None:
    """The plans of the three scans of one window (PostgreSQL: EXPLAIN ANALYZE; SQLite: EXPLAIN
    QUERY PLAN)."""
    prefix = "EXPLAIN (ANALYZE, BUFFERS) " if db.kind == "postgresql" else "EXPLAIN QUERY PLAN "
    for name, sql, p in (("committed_records view", VIEW_SCAN, params), ("batch rows", proto_scan, params),
                         ("batch rows through a view", PROTO_VIEW_SCAN, params),
                         ("raw primary key", RAW_SCAN, {**params, "n": rows})):
        print(f"-- {name}, [{params['lo']}, {params['hi']}), {rows} rows")
        for line in db.execute(prefix + sql, p):
            print(line[0] if db.kind == "postgresql" else line[-1])
        db.commit()
    print()


# --- (c) a Commit's completion -----------------------------------------------------------------

class Commits:
    """One unit: a database transaction that completes a committed transaction in one partition
    (the completion of app.storage.markers.write_control_markers); the transaction's batches are
    appended, untimed, before."""

    def __init__(self, db: Db) -> None:
        self.db = db
        self.txn_id = 20_000_000

    def prepare(self, proto: bool, batches: int) -> int:
        db = self.db
        self.txn_id += 1
        txn = self.txn_id
        db.begin()
        first = None
        for _ in range(batches):
            base = db.execute(TAKE_OFFSETS, {"t": TOPIC_ID, "p": COMMIT_PARTITION, "n": COMMIT_BATCH})[0][0] - COMMIT_BATCH
            first = base if first is None else first
            b = Batch(base, COMMIT_BATCH, 43, 0, base, txn)
            if proto:
                db.copy("proto_batches", PROTO_BATCH_COLUMNS, [proto_batch_row(b, COMMIT_PARTITION)])
                db.copy("proto_records", PROTO_RECORD_COLUMNS, proto_rows(b, COMMIT_PARTITION, 1))
            else:
                db.copy("records", MARKER_COLUMNS, today_rows(b, COMMIT_PARTITION, 1))
        db.execute('INSERT INTO transaction_partitions (transactional_id, topic_id, "partition", txn_id, first_offset) '
                   "VALUES (:x, :t, :p, :txn, :f)", {"x": f"tx-{txn}", "t": TOPIC_ID, "p": COMMIT_PARTITION,
                                                     "txn": txn, "f": first})
        db.commit()
        return txn

    def complete(self, proto: bool, txn: int, folded: bool = False) -> int:
        db = self.db
        params = {"x": f"tx-{txn}", "t": TOPIC_ID, "p": COMMIT_PARTITION, "txn": txn, "n": 1}
        db.begin()
        claimed = db.execute('DELETE FROM transaction_partitions WHERE transactional_id = :x AND txn_id = :txn '
                             'RETURNING topic_id, "partition"', params)
        assert claimed
        marker = db.execute(TAKE_OFFSETS.replace("record_count + :n", "record_count"), params)[0][0] - 1
        params["m"] = marker
        if proto and folded:
            # The stamp and the marker in one statement (PostgreSQL: a data-modifying WITH):
            # what recording the position adds without a round trip of its own.
            stamped = db.execute(
                'WITH stamped AS (UPDATE proto_batches SET commit_position = :m WHERE topic_id = :t '
                'AND "partition" = :p AND txn_id = :txn AND commit_position IS NULL AND control_type IS NULL '
                'RETURNING base_offset) INSERT INTO proto_batches (topic_id, "partition", base_offset, record_count, '
                "producer_id, producer_epoch, txn_id, control_type) SELECT :t, :p, :m, 1, 43, 0, :txn, 'COMMIT' "
                "WHERE EXISTS (SELECT FROM stamped) RETURNING base_offset", params)
            assert stamped
        elif proto:
            # The commit position, once a batch: what the prototype adds to a Commit.
            stamped = db.execute('UPDATE proto_batches SET commit_position = :m WHERE topic_id = :t AND "partition" = :p '
                                 "AND txn_id = :txn AND commit_position IS NULL AND control_type IS NULL "
                                 "RETURNING base_offset", params)
            assert stamped
            db.execute('INSERT INTO proto_batches (topic_id, "partition", base_offset, record_count, producer_id, '
                       "producer_epoch, txn_id, control_type) VALUES (:t, :p, :m, 1, 43, 0, :txn, 'COMMIT')", params)
        else:
            db.execute('INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, producer_id, producer_epoch, '
                       "txn_id, control_type) VALUES (:t, :p, :m, 0, 43, 0, :txn, 'COMMIT')", params)
        db.commit()
        return 1


# --- the rounds --------------------------------------------------------------------------------

Turn = tuple[int, float]


@dataclass
class Measured:
    turns: list[Turn] = field(default_factory=list)
    cpu: float = 0.0  # the database backend's (PostgreSQL)
    client_cpu: float = 0.0  # this process's: building rows, the driver

    @property
    def count(self) -> int:
        return sum(n for n, _ in self.turns)

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.turns)

    def rate(self) -> float:
        return self.count / self.seconds


def timed(db: Db, path: Measured, units: list[Callable[[], int]]) -> None:
    """Run the units, timing each (and the backend's CPU around it); one turn for the round."""
    n, took = 0, 0.0
    for unit in units:
        c0, p0 = db.backend_cpu(), time.process_time()
        t0 = time.perf_counter()
        n += unit()
        took += time.perf_counter() - t0
        path.client_cpu += time.process_time() - p0
        path.cpu += db.backend_cpu() - c0
    path.turns.append((n, took))


def run(kind: str, args: argparse.Namespace, rng: random.Random) -> None:
    log = make_log(rng, args.records)
    with scratch_database(kind, "batch_layout", migrate_with=(args.today_tree,)) as url:
        db = Db(kind, url, durable=args.durable)
        try:
            t0 = time.perf_counter()
            setup(db, log)
            load_s = time.perf_counter() - t0
            data = sum(b.record_count for b in log.batches if b.control_type is None)
            committed = sum(b.record_count for b in log.batches if b.commit_position is not None)
            print(f"\n## {kind}\n\nlog: {data:,} records in {len(log.batches):,} batches (markers included), "
                  f"{committed:,} of them committed, one partition; loaded into both layouts in {load_s:.1f} s\n")
            paths: dict[str, Measured] = {}
            appends, commits = Appends(db), Commits(db)
            proto_scan, proto_scan_unordered = proto_scan_sql(kind), proto_scan_sql(kind, ordered=False)

            def scan(sql: str, params: dict[str, Any]) -> Callable[[], int]:
                return lambda: len(db.execute(sql, params)) + (db.commit() or 0)

            def counted(sql: str, params: dict[str, Any]) -> Callable[[], int]:
                # The same scan, its rows counted in the database: the database's part alone,
                # without the driver building them in this process. The values' lengths are summed
                # so that every path reads its rows (a bare count lets PostgreSQL answer the raw
                # scan from the primary key's index alone).
                size = "octet_length" if kind == "postgresql" else "length"  # SQLite 3.40 has no octet_length
                return lambda: db.execute(f"SELECT count(*), sum({size}(value)) FROM ({sql}) s",
                                          params)[0][0] + (db.commit() or 0)

            # Windows: each holds about `window` positions; their rows are checked equal first.
            windows: list[tuple[int, dict[str, Any], int]] = []
            for window in args.windows:
                for _ in range(4):
                    lo = rng.randrange(0, log.next_offset - window)
                    params = {"t": TOPIC_ID, "p": SCAN_PARTITION, "lo": lo, "hi": lo + window, "max_batch": MAX_BATCH}
                    today = db.execute(VIEW_SCAN, params)
                    proto = db.execute(proto_scan, params)
                    unordered = db.execute(proto_scan_unordered, params)
                    through_view = db.execute(PROTO_VIEW_SCAN, params)
                    db.commit()
                    if ([tuple(r) for r in today] != [tuple(r) for r in proto]
                            or sorted(map(tuple, today)) != sorted(map(tuple, unordered))
                            or sorted(map(tuple, today)) != sorted(map(tuple, through_view))):
                        raise SystemExit(f"{kind}: the layouts disagree on window [{lo}, {lo + window}): "
                                         f"{len(today)} rows against {len(proto)}")
                    windows.append((window, params, len(today)))
                if args.explain:
                    explain(db, proto_scan, params, len(today))
            if args.backfill:
                backfill(db, kind, windows)

            for r in range(args.rounds):
                steps: list[tuple[str, Callable[[], None]]] = []
                for name, fn in (("append, today plain", lambda: appends.today(False)),
                                 ("append, today transactional", lambda: appends.today(True)),
                                 ("append, batch row plain", lambda: appends.proto(False)),
                                 ("append, batch row transactional", lambda: appends.proto(True))):
                    steps.append((name, lambda name=name, fn=fn: timed(db, paths.setdefault(name, Measured()),
                                                                         [fn] * args.appends)))
                for window in args.windows:
                    chosen = [w for w in windows if w[0] == window]
                    for name, make in (
                            ("scan, committed_records view", lambda p, n: scan(VIEW_SCAN, p)),
                            ("scan, batch rows", lambda p, n: scan(proto_scan, p)),
                            ("scan, committed_records view, unordered", lambda p, n: scan(VIEW_SCAN_UNORDERED, p)),
                            ("scan, batch rows, unordered", lambda p, n: scan(proto_scan_unordered, p)),
                            ("scan, batch rows through a view, unordered", lambda p, n: scan(PROTO_VIEW_SCAN, p)),
                            ("scan, raw primary key", lambda p, n: scan(RAW_SCAN, {**p, "n": n})),
                            ("counted, committed_records view", lambda p, n: counted(VIEW_SCAN, p)),
                            ("counted, batch rows", lambda p, n: counted(proto_scan, p)),
                            ("counted, raw primary key", lambda p, n: counted(RAW_SCAN, {**p, "n": n}))):
                        label = f"{name}, {window:,} positions"
                        steps.append((label, lambda label=label, make=make, chosen=chosen: timed(
                            db, paths.setdefault(label, Measured()), [make(p, n) for _, p, n in chosen])))
                for batches in (1, 15):
                    for proto, folded in ((False, False), (True, False)) + (((True, True),) if kind == "postgresql" else ()):
                        label = (f"commit, {batches} batch{'es' if batches > 1 else ''}, "
                                 f"{('batch rows, one statement' if folded else 'batch rows') if proto else 'today'}")

                        def commit_step(label: str = label, proto: bool = proto, batches: int = batches,
                                        folded: bool = folded) -> None:
                            txns = [commits.prepare(proto, batches) for _ in range(args.commits)]
                            timed(db, paths.setdefault(label, Measured()),
                                  [lambda t=t: commits.complete(proto, t, folded) for t in txns])
                        steps.append((label, commit_step))
                rng.shuffle(steps)
                for _, step in steps:
                    step()
            report(kind, args, paths)
        finally:
            db.close()


def report(kind: str, args: argparse.Namespace, paths: dict[str, Measured]) -> None:
    cpu = kind == "postgresql"
    print("CPU: µs per record (appends), per row (scans) or per commit, in this process (the client) and, on "
          "PostgreSQL, in the connection's database backend\n")
    print(f"| path | count | per second | ms per unit | client CPU |{' backend CPU |' if cpu else ''}")
    print(f"| --- | ---: | ---: | ---: | ---: |{' ---: |' if cpu else ''}")
    for name, p in sorted(paths.items()):
        units = len(p.turns) * (args.appends if name.startswith("append") else
                                args.commits if name.startswith("commit") else 4)
        line = f"| {name} | {p.count:,} | {p.rate():,.0f} | {p.seconds / units * 1e3:.2f} | {p.client_cpu / p.count * 1e6:.2f} |"
        if cpu:
            line += f" {p.cpu / p.count * 1e6:.2f} |"
        print(line)
    print("\n| ratio (of rates, same run) | value | in each quarter of the rounds |\n| --- | ---: | ---: |")

    def ratio(a: str, b: str, label: str) -> None:
        print(ratio_line(label, paths[a].rate() / paths[b].rate(), paths[a].turns, paths[b].turns))

    ref = "append, today plain"
    for name in ("append, today transactional", "append, batch row plain", "append, batch row transactional"):
        ratio(name, ref, f"{name} ÷ {ref}")
    for window in args.windows:
        raw = f"scan, raw primary key, {window:,} positions"
        for name in ("scan, committed_records view", "scan, batch rows", "scan, committed_records view, unordered",
                     "scan, batch rows, unordered", "scan, batch rows through a view, unordered"):
            ratio(f"{name}, {window:,} positions", raw, f"{name}, {window:,} positions ÷ raw")
        raw = f"counted, raw primary key, {window:,} positions"
        for name in ("counted, committed_records view", "counted, batch rows"):
            ratio(f"{name}, {window:,} positions", raw, f"{name}, {window:,} positions ÷ raw, counted in the database")
    folded = ("batch rows", "batch rows, one statement") if kind == "postgresql" else ("batch rows",)
    for batches in ("1 batch", "15 batches"):
        for variant in folded:
            ratio(f"commit, {batches}, {variant}", f"commit, {batches}, today",
                  f"commit, {batches}: {variant} ÷ today")

    # CPU is what a shared machine's load moves least: the reference's CPU per unit over the path's
    # (above 1: the path costs less).
    print("\n| CPU per unit, client + backend: the reference's ÷ the path's | value |\n| --- | ---: |")

    def per_unit(name: str) -> float:
        return (paths[name].cpu + paths[name].client_cpu) / paths[name].count

    for name in ("append, today transactional", "append, batch row plain", "append, batch row transactional"):
        print(f"| {name} (÷ {ref}) | {per_unit(ref) / per_unit(name):.2f} |")
    for window in args.windows:
        raw = f"scan, raw primary key, {window:,} positions"
        for name in ("scan, committed_records view", "scan, batch rows", "scan, committed_records view, unordered",
                     "scan, batch rows, unordered", "scan, batch rows through a view, unordered"):
            print(f"| {name}, {window:,} positions (÷ raw) | {per_unit(raw) / per_unit(f'{name}, {window:,} positions'):.2f} |")
    for batches in ("1 batch", "15 batches"):
        for variant in folded:
            print(f"| commit, {batches}, {variant} (÷ today) | "
                  f"{per_unit(f'commit, {batches}, today') / per_unit(f'commit, {batches}, {variant}'):.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("postgresql", "sqlite", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--records", type=int, default=200_000, help="records in the scanned partition")
    parser.add_argument("--today-tree", type=Path, required=True,
                        help="a tree of the repository before migration 0023 (a git worktree of an older commit): "
                             "its migrations make 'today's' schema, whose records still carry the producer columns")
    parser.add_argument("--appends", type=int, default=4, help="1,000-record appends per path per round")
    parser.add_argument("--commits", type=int, default=8, help="Commits per path per round")
    parser.add_argument("--windows", type=int, nargs="+", default=[1_000, 20_000],
                        help="positions a scan's window spans")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--durable", action="store_true",
                        help="commits wait for the disk, as the service's do (by default they do not: the flush "
                             "is the same for every path, and on a shared disk its time hides theirs)")
    parser.add_argument("--backfill", action="store_true",
                        help="first derive batch rows from today's records as a migration would, timed, and check "
                             "that every window reads the same through them")
    parser.add_argument("--explain", action="store_true", help="print the plans of one window's scans first")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.records < 10 * MAX_BATCH or args.appends < 1 or args.commits < 1:
        parser.error("--rounds, --appends and --commits must be at least 1, --records at least 10,000")
    if any(w < 1 or w >= args.records for w in args.windows):
        parser.error("each window must span at least 1 position and fewer than --records")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"# batch_layout: seed {seed}, {args.rounds} rounds, {args.records:,} records, "
          f"windows {', '.join(f'{w:,}' for w in args.windows)}, commits {'durable' if args.durable else 'not waiting for the disk'}")
    for kind in (("postgresql", "sqlite") if args.db == "both" else (args.db,)):
        run(kind, args, random.Random(seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
