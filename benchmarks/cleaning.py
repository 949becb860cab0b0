"""The log cleaner: how fast it deletes, what it does to Send latency, and whether the log stops growing.

    .venv/bin/python benchmarks/cleaning.py                          # SQLite and PostgreSQL, all three
    .venv/bin/python benchmarks/cleaning.py --db postgresql --only throughput --before /tmp/outbox-before
    .venv/bin/python benchmarks/cleaning.py --db postgresql --only soak --soak-seconds 300

1. throughput: `--records` expired rows of one partition (inserted straight into `records`
   and `record_batches` by the driver, batch rows as the appender writes them: plain batches
   of `--batch-records`, or with `--txn-batches N` committed transactions of N one-record
   batches and their COMMIT markers; then the partition's next_offset, record_count and
   size_bytes set to match), deleted by one LogCleaner.run_once
   (in a process of its own, timed inside it), against the same fill deleted by one raw
   `DELETE … WHERE offset < end` and by raw DELETEs of WHOLE_CHUNK_ROWS rows, one transaction
   each, as the cleaner chunks what it deletes whole. With `--before DIR` the cleaner of another source tree takes turns
   too. The paths take turns in rotation, `--rounds` times, each on a topic of its own. On
   PostgreSQL every turn ends with a VACUUM of `records` (the cleaner's own, or one the
   benchmark runs after a raw DELETE), timed apart, so every fill starts from the same table.
   With `--sum-paths`, the cleaner's SQL alone takes turns too: each chunk's aggregate, then its
   DELETE, and on PostgreSQL the one-pass alternative, a DELETE … RETURNING summed in the same
   statement. Then one more cleaner turn, in this process, with its steps timed per chunk.
2. latency: plain 1,000-record Sends over HTTP to `outbox serve`, one producer alternating
   between the partition being cleaned and another partition of the same topic, first with no
   cleaning, then while the cleaner deletes `--latency-records` expired records; p50, p99 and
   max of each, `--latency-rounds` times. The cleaner runs in a process of its own (serve with
   OUTBOX_RUN_COORDINATOR=false, as beside `outbox coordinator`), or as serve's own worker.
   With `--before DIR` each round runs once per source tree, the order alternating, each tree
   with a serve (and a cleaner) of its own; the p99 ratio is also given per round.
   `--setting OUTBOX_NAME=VALUE` passes a setting to serve and the cleaner.
3. soak: a producer at `--soak-rate` records/s to a topic with retention_bytes set so that the
   partitions fill it once every `--soak-seconds / --soak-periods` (a retention period), a
   LogCleaner in a process of its own every `--cleaner-interval-ms`, and the database's size
   sampled every `--sample-seconds`. On PostgreSQL once more with the cleaner's VACUUM
   switched off (monkeypatched in that process): what the VACUUM is for.

Client, service, cleaner and database share the machine (2 cores here, and other people's
tests): the figures compare paths with each other within one run. Every figure is measured in
the run that prints it; nothing is hard-coded.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import astuple, dataclass, field
from pathlib import Path

import orjson
from sqlalchemy import event
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
for path in (str(ROOT), str(ROOT / "benchmarks")):
    if path not in sys.path:
        sys.path.insert(0, path)

from app.domain.clock import system_clock  # noqa: E402
from app.domain.log_cleaning import record_size  # noqa: E402
from app.domain.topic_config import TopicConfig  # noqa: E402
from app.services import log_cleaner  # noqa: E402
from app.services.log_cleaner import CHUNK_ROWS, WHOLE_CHUNK_ROWS, CleanerPass, LogCleaner  # noqa: E402
from app.services.topic_service import TopicService  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage import cleaning  # noqa: E402
from app.storage.engine import Database, open_database  # noqa: E402
from scratch import scratch_database  # noqa: E402
from run import BATCH, VALUE, Client, Service, _post, _records  # noqa: E402

HOUR_MS = 3_600_000
VALUE_TEXT = orjson.dumps(VALUE).decode()
EXPIRED_TS = 1  # 1970: older than any retention_ms


# --- databases ----------------------------------------------------------------------------------


def open_db(url: str) -> tuple[Settings, Database]:
    settings = Settings(database_url=url)
    return settings, open_database(settings, pool_size=2)


class Raw:
    """The driver itself on one connection (autocommit; explicit transactions where needed):
    the fills, the reference DELETEs, VACUUM and the size samples."""

    def __init__(self, url: str, batch_records: int = 1_000, txn_batches: int = 0) -> None:
        self.sqlite = url.startswith("sqlite")
        self.batch_records, self.txn_batches, self.data_records = batch_records, txn_batches, 0
        if self.sqlite:
            import sqlite3

            self.path = make_url(url).database
            self.conn = sqlite3.connect(self.path, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")  # the service's default
            self.conn.execute("PRAGMA busy_timeout=30000")
            self.mark = "?"
        else:
            import psycopg

            self.conn = psycopg.connect(make_url(url).set(drivername="postgresql")
                                        .render_as_string(hide_password=False), autocommit=True)
            self.mark = "%s"

    def sql(self, statement: str, *params: object) -> list[tuple]:
        cur = self.conn.execute(statement.replace("?", self.mark), params)
        return list(cur.fetchall()) if cur.description is not None else []

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self.sqlite:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        else:
            with self.conn.transaction():
                yield

    def topic_id(self, name: str) -> int:
        return self.sql("SELECT topic_id FROM topics WHERE name = ?", name)[0][0]

    def fill(self, topic_id: int, partition: int, n: int, ts: int = EXPIRED_TS) -> int:
        """`n` rows at offsets 0…n-1 of an empty partition, their batch rows as the appender
        writes them (app.storage.batch_rows), and the partition's log end and counters to match,
        so the service sees a consistent log; returns the data records' bytes (and leaves their
        number in `data_records`). With `txn_batches` 0: plain batches of `batch_records`
        records (one Send each). Otherwise committed transactions of `txn_batches` one-record
        batches each, each followed by its COMMIT marker: the most batch rows a range can hold,
        every one transactional (chunk_summary's count of them, the rows read one by one)."""
        step = 100_000
        per_txn = self.txn_batches + 1  # its records and its marker
        for low in range(0, n, step):
            high = min(n, low + step)
            record_rows, batch_rows = [], []
            for o in range(low, high):
                if not self.txn_batches:
                    record_rows.append((topic_id, partition, o, ts, f"k{o}", VALUE_TEXT, None))
                    if o % self.batch_records == 0:
                        count = min(self.batch_records, n - o)
                        batch_rows.append((topic_id, partition, o, count, None, None, None, None, None,
                                           "committed", o + count - 1))
                    continue
                txn, i = divmod(o, per_txn)
                marker = txn * per_txn + self.txn_batches
                if marker >= n:  # a transaction cut by the fill's end: plain records instead
                    record_rows.append((topic_id, partition, o, ts, f"k{o}", VALUE_TEXT, None))
                    batch_rows.append((topic_id, partition, o, 1, None, None, None, None, None, "committed", o))
                elif i < self.txn_batches:
                    record_rows.append((topic_id, partition, o, ts, f"k{o}", VALUE_TEXT, None))
                    batch_rows.append((topic_id, partition, o, 1, txn + 1, 0, i, txn + 1, None, "committed",
                                       marker))
                else:
                    record_rows.append((topic_id, partition, o, ts, None, None, "COMMIT"))
                    batch_rows.append((topic_id, partition, o, 1, txn + 1, 0, None, txn + 1, "COMMIT", None, None))
            with self.transaction():
                self._copy('records (topic_id, "partition", "offset", timestamp_ms, key, value, control_type)',
                           record_rows)
                self._copy('record_batches (topic_id, "partition", base_offset, record_count, producer_id, '
                           'producer_epoch, base_sequence, txn_id, control_type, state, commit_position)', batch_rows)
        data = [o for o in range(n) if not self.txn_batches or o % per_txn < self.txn_batches
                or (o // per_txn) * per_txn + self.txn_batches >= n]
        self.data_records = len(data)
        # record_size of each (key, value), summed without encoding a million strings: both ASCII.
        assert record_size("k0", VALUE_TEXT, None) == 2 + len(VALUE_TEXT)
        size = sum(len(str(o)) + 1 for o in data) + len(data) * len(VALUE_TEXT)
        self.sql('UPDATE partitions SET next_offset = ?, record_count = ?, size_bytes = ? '
                 'WHERE topic_id = ? AND "partition" = ?', n, len(data), size, topic_id, partition)
        return size

    def _copy(self, into: str, rows: list[tuple]) -> None:
        if not rows:
            return
        if self.sqlite:
            marks = ",".join("?" * len(rows[0]))
            self.conn.executemany(f"INSERT INTO {into} VALUES ({marks})", rows)
            return
        with self.conn.cursor() as cur, cur.copy(f"COPY {into} FROM STDIN") as cp:
            for row in rows:
                cp.write_row(row)

    # The batch rows a raw deletion of [low, high) empties, deleted with its records as the
    # cleaner's delete_emptied_batches does (the fill's batches never cross a chunk's edge
    # but at the fill's own batch size: a row crossing `high` stays with its records).
    _BATCHES_EMPTIED = ('DELETE FROM record_batches WHERE topic_id = ? AND "partition" = ? AND base_offset >= ? '
                        'AND base_offset + record_count <= ?')

    def _delete_batches(self, topic_id: int, partition: int, low: int, high: int) -> None:
        self.conn.execute(self._BATCHES_EMPTIED.replace("?", self.mark), (topic_id, partition, low, high))

    def delete_all(self, topic_id: int, partition: int, end: int) -> int:
        with self.transaction():
            cur = self.conn.execute(
                f'DELETE FROM records WHERE topic_id = {self.mark} AND "partition" = {self.mark} '
                f'AND "offset" < {self.mark}', (topic_id, partition, end))
            self._delete_batches(topic_id, partition, 0, end)
        return cur.rowcount

    def delete_chunked(self, topic_id: int, partition: int, end: int, chunk: int) -> int:
        deleted = 0
        m = self.mark
        for low in range(0, end, chunk):
            with self.transaction():
                deleted += self.conn.execute(
                    f'DELETE FROM records WHERE topic_id = {m} AND "partition" = {m} '
                    f'AND "offset" >= {m} AND "offset" < {m}', (topic_id, partition, low, low + chunk)).rowcount
                self._delete_batches(topic_id, partition, max(0, low - self.batch_records), low + chunk)
        return deleted

    _SIZE = {"sqlite": "coalesce(length(CAST({} AS BLOB)), 0)", "postgresql": "coalesce(octet_length({}), 0)"}

    def sum_and_delete_chunked(self, topic_id: int, partition: int, end: int, chunk: int, one_pass: bool) -> int:
        """What the cleaner's SQL does per chunk, without its probes or counters: the chunk's
        aggregate (with chunk_summary's count of the transactional batch rows reaching into
        the chunk, from the batch row holding its first offset), then its DELETE and its
        emptied batch rows' (two passes over the rows); or, on PostgreSQL, one pass:
        `WITH d AS (DELETE … RETURNING …) SELECT <the aggregate> FROM d`."""
        m = self.mark
        size = " + ".join(self._SIZE["sqlite" if self.sqlite else "postgresql"].format(c)
                          for c in ("key", "value", "headers"))
        in_partition = f'topic_id = {m} AND "partition" = {m}'
        transactional = (f"(SELECT count(txn_id) FROM record_batches WHERE {in_partition} AND base_offset >= coalesce("
                         f"(SELECT base_offset FROM record_batches WHERE {in_partition} AND base_offset <= {m} "
                         f"ORDER BY base_offset DESC LIMIT 1), {m}) AND base_offset < {m})")
        sums = f"count(*), {transactional}, count(control_type), max(timestamp_ms), sum(size)"
        in_range = f'{in_partition} AND "offset" >= {m} AND "offset" < {m}'
        deleted = 0
        for low in range(0, end, chunk):
            params = (topic_id, partition, low, low + chunk)
            summed = (topic_id, partition, topic_id, partition, low, low, low + chunk)
            with self.transaction():
                if one_pass:
                    deleted += self.conn.execute(
                        f"WITH d AS (DELETE FROM records WHERE {in_range} "
                        f"RETURNING control_type, timestamp_ms, {size} AS size) SELECT {sums} FROM d",
                        (*params, *summed)).fetchone()[0]
                else:
                    self.conn.execute(f"SELECT {sums} FROM (SELECT control_type, timestamp_ms, {size} AS size "
                                      f"FROM records WHERE {in_range}) AS c", (*summed, *params)).fetchone()
                    deleted += self.conn.execute(f"DELETE FROM records WHERE {in_range}", params).rowcount
                self._delete_batches(topic_id, partition, max(0, low - self.batch_records), low + chunk)
        return deleted

    def vacuum(self) -> None:
        if not self.sqlite:
            self.conn.execute("VACUUM records, record_batches")

    def close(self) -> None:
        self.conn.close()


def create_topic(db: Database, settings: Settings, name: str, partitions: int, **config: int) -> int:
    return TopicService(db, settings, system_clock).create(name, partitions, TopicConfig(**config)).topic_id


@contextmanager
def patched(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


class VacuumClock:
    """Times the cleaner's VACUUMs (app.storage.cleaning.vacuum_records), whose spans the
    results report apart from the deletions."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []  # time.monotonic(), comparable across processes
        self._real = cleaning.vacuum_records

    def __call__(self, conn) -> None:  # type: ignore[no-untyped-def]
        t0 = time.monotonic()
        self._real(conn)
        self.spans.append((t0, time.monotonic()))

    @property
    def seconds(self) -> float:
        return sum(b - a for a, b in self.spans)


def rate(turns: list[tuple[int, float]]) -> float:
    return sum(n for n, _ in turns) / sum(s for _, s in turns)


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    return f"{fmt.format(min(values))}–{fmt.format(max(values))}"


# --- 1. throughput ----------------------------------------------------------------------------


class ChunkProfile:
    """Where a cleaner pass's time goes, per chunk: each storage call of the retention step,
    timed by wrapping it where app.services.log_cleaner finds it; the counters UPDATE, timed
    by SQLAlchemy's cursor events and taken out of the deletion that runs it; a transaction's
    begin and commit (Database.write's and read's own time around the calls); the WAL's
    checkpoint (SQLite). Also how long the write transaction lasted: what every other writer
    waits for on SQLite."""

    STEPS = ("look: connection", "chunk_start", "first_stored", "log_start", "last_stored", "chunk_summary",
             "write: begin", "delete_summed", "stored_rows", "retention_bound", "DELETE", "counters UPDATE",
             "write: commit", "checkpoint")
    DELETIONS = ("delete_summed", "DELETE")

    def __init__(self, cleaner: LogCleaner) -> None:
        self.cleaner = cleaner
        self.t = dict.fromkeys(self.STEPS, 0.0)
        self.chunks = 0  # transactions that deleted; the pass's look at each empty partition is in the times
        self.total = 0.0
        self.write_held = 0.0  # inside Database.write, begin to commit
        self.running: str | None = None  # the wrapped step running now
        self.inside = 0.0  # time of the wrapped steps so far (to take out of a transaction's own)
        self.vacuum_s = 0.0  # the cleaner's VACUUM, which the pass's figures leave out

    def _timed(self, step: str, fn: Callable) -> Callable:
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            t0, self.running = time.perf_counter(), step
            try:
                return fn(*args, **kwargs)
            finally:
                self.running = None
                took = time.perf_counter() - t0
                self.t[step] += took
                self.inside += took
                if step in self.DELETIONS:
                    self.chunks += 1
        return wrapper

    @contextmanager
    def active(self) -> Iterator[None]:
        db, profile = self.cleaner.db, self

        class TimedDatabase:
            def __getattr__(self, name: str) -> object:
                return getattr(db, name)

            @contextmanager
            def autocommit(self) -> Iterator[object]:  # the look at a chunk, and the VACUUM (apart)
                t0, inside, vacuumed = time.perf_counter(), profile.inside, profile.vacuum_s
                with db.autocommit() as conn:
                    yield conn
                took = time.perf_counter() - t0 - (profile.vacuum_s - vacuumed)
                profile.t["look: connection"] += took - (profile.inside - inside)
                profile.total += took

            @contextmanager
            def write(self, **kwargs: object) -> Iterator[object]:
                t0 = time.perf_counter()
                with db.write(**kwargs) as conn:  # type: ignore[arg-type]
                    t1 = time.perf_counter()
                    profile.t["write: begin"] += t1 - t0
                    yield conn
                    t2 = time.perf_counter()
                t3 = time.perf_counter()
                profile.t["write: commit"] += t3 - t2
                profile.total += t3 - t0
                profile.write_held += t3 - t0

            def checkpoint(self) -> None:
                t0 = time.perf_counter()
                db.checkpoint()
                took = time.perf_counter() - t0
                profile.t["checkpoint"] += took
                profile.total += took

        def before(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
            conn.info["profile_t0"] = time.perf_counter()

        def after(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
            if statement.lstrip().upper().startswith("UPDATE PARTITIONS"):
                took = time.perf_counter() - conn.info["profile_t0"]
                self.t["counters UPDATE"] += took
                self.inside += took
                if self.running == "DELETE":  # delete_prefix runs it: its time includes it
                    self.t["DELETE"] -= took

        steps = [(cleaning, name, name) for name in ("chunk_start", "first_stored", "log_start", "last_stored",
                                                      "chunk_summary", "delete_summed", "stored_rows")
                 if hasattr(cleaning, name)]
        steps += [(cleaning, name, "DELETE") for name in ("delete_prefix",) if hasattr(cleaning, name)]
        steps += [(log_cleaner, "retention_bound", "retention_bound")]
        event.listen(db.engine, "before_cursor_execute", before)
        event.listen(db.engine, "after_cursor_execute", after)
        try:
            with ExitStack() as stack:
                stack.enter_context(patched(self.cleaner, "db", TimedDatabase()))
                for module, name, step in steps:
                    stack.enter_context(patched(module, name, self._timed(step, getattr(module, name))))
                vacuum = cleaning.vacuum_records

                def timed_vacuum(conn) -> None:  # type: ignore[no-untyped-def]
                    t0 = time.perf_counter()
                    vacuum(conn)
                    self.vacuum_s += time.perf_counter() - t0

                stack.enter_context(patched(cleaning, "vacuum_records", timed_vacuum))
                yield
        finally:
            event.remove(db.engine, "before_cursor_execute", before)
            event.remove(db.engine, "after_cursor_execute", after)


# A cleaner turn of the throughput benchmark, in a process of its own on a given source tree
# (this one, or --before's): one pass, timed inside, its VACUUM apart.
_CLEANER_TURN = r"""
import json, sys, time
import app
from app.domain.clock import system_clock
from app.services.log_cleaner import LogCleaner
from app.settings import Settings
from app.storage import cleaning
from app.storage.engine import open_database

settings = Settings(database_url=sys.argv[1])
db = open_database(settings, pool_size=2)
with db.read() as conn:  # the pool's first connection, outside the timing
    pass
cleaner = LogCleaner(db, settings, system_clock)
vacuum, spent = cleaning.vacuum_records, [0.0]

def timed_vacuum(conn):
    t0 = time.perf_counter()
    vacuum(conn)
    spent[0] += time.perf_counter() - t0

cleaning.vacuum_records = timed_vacuum
t0 = time.perf_counter()
done = cleaner.run_once()
took = time.perf_counter() - t0
db.dispose()
print(json.dumps({"app": app.__file__, "retention": done.retention, "vacuums": done.vacuums,
                  "seconds": took - spent[0], "vacuum_seconds": spent[0]}))
"""


def cleaner_turn(tree: Path, url: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env["PYTHONPATH"] = str(tree)  # the tree's own `app` package first
    out = subprocess.run([sys.executable, "-c", _CLEANER_TURN, url], cwd=tree, env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the cleaner turn for {tree} failed:\n{out.stderr[-3000:]}")
    result = orjson.loads(out.stdout.strip().splitlines()[-1])
    if not Path(result["app"]).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"the cleaner turn for {tree} imported {result['app']}")
    return result


def bench_throughput(kind: str, url: str, records: int, rounds: int, before: Path | None,
                     sum_paths: bool = False, batch_records: int = 1_000, txn_batches: int = 0) -> None:
    settings, db = open_db(url)
    raw = Raw(url, batch_records, txn_batches)
    trees = {"cleaner": ROOT, **({"cleaner, before": before} if before is not None else {})}
    chunk = WHOLE_CHUNK_ROWS[kind]
    raw_paths = ("raw DELETE, one statement", f"raw DELETE, {chunk:,}-row chunks")
    sums = ((f"raw sum then DELETE, {chunk:,}-row chunks",)
            + ((f"raw DELETE … RETURNING summed in one statement, {chunk:,}-row chunks",) if kind == "postgresql" else ())
            if sum_paths else ())
    paths = (*trees, *raw_paths, *sums)
    turns: dict[str, list[tuple[int, float]]] = {p: [] for p in paths}
    vacuum_s: dict[str, list[float]] = {p: [] for p in paths}
    fill_s: list[float] = []
    size = 0
    try:
        def fill(name: str) -> int:
            nonlocal size
            topic_id = create_topic(db, settings, name, 1, retention_ms=HOUR_MS)
            t0 = time.perf_counter()
            size = raw.fill(topic_id, 0, records)
            fill_s.append(time.perf_counter() - t0)
            return topic_id

        for r in range(rounds):
            for i, path in enumerate(paths):
                topic_id = fill(f"t-{r}-{i}")
                if path in trees:
                    result = cleaner_turn(trees[path], url)
                    n, took, vac = result["retention"], result["seconds"], result["vacuum_seconds"]
                    if kind == "postgresql" and not result["vacuums"]:
                        raise RuntimeError("the cleaner did not VACUUM: the next fill would not start alike")
                else:
                    t0 = time.perf_counter()
                    if path.endswith("one statement"):
                        n = raw.delete_all(topic_id, 0, records)
                    elif path.startswith("raw DELETE,"):
                        n = raw.delete_chunked(topic_id, 0, records, chunk)
                    else:
                        n = raw.sum_and_delete_chunked(topic_id, 0, records, chunk, one_pass="RETURNING" in path)
                    took = time.perf_counter() - t0
                    # The log the cleaner would have left (its counters are the cleaner's
                    # measure of live records, which decides when it vacuums).
                    raw.sql('UPDATE partitions SET log_start_offset = next_offset, record_count = 0, size_bytes = 0 '
                            'WHERE topic_id = ?', topic_id)
                    t1 = time.perf_counter()
                    raw.vacuum()
                    vac = time.perf_counter() - t1
                # The cleaner counts data records; a raw DELETE every row, markers too.
                if n != (raw.data_records if path in trees else records):
                    raise RuntimeError(f"{path} deleted {n}, not {records} rows ({raw.data_records} records)")
                turns[path].append((n, took))
                vacuum_s[path].append(vac)
        # One more cleaner turn (this tree, in this process), every step timed: where its time goes.
        fill("t-profile")
        cleaner = LogCleaner(db, settings, system_clock)
        profile = ChunkProfile(cleaner)
        vacuum_clock = VacuumClock()
        with patched(cleaning, "vacuum_records", vacuum_clock), profile.active():
            t0 = time.perf_counter()
            done = cleaner.run_once()
            profiled_s = time.perf_counter() - t0 - vacuum_clock.seconds
    finally:
        raw.close()
        db.dispose()

    print(f"### {kind}: cleaning throughput\n")
    layout = (f"plain batches of {batch_records:,} records" if not txn_batches else
              f"committed transactions of {txn_batches:,} one-record batches, each followed by its COMMIT marker "
              f"({raw.data_records:,} records)")
    print(f"{records:,} expired rows in {layout}, records of {size / raw.data_records:.0f} bytes, in one partition, "
          f"deleted by each path in "
          f"turn, {rounds} rounds; a fill took {statistics.median(fill_s):.1f} s (median). A cleaner turn is one "
          f"LogCleaner.run_once in a process of its own, timed inside it"
          + (f"; before: the tree at {before}" if before is not None else "") + ".\n")
    print("| path | records/s | per turn (min–max) | VACUUM after, s (median) | records/s, VACUUM included |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for path in paths:
        per_turn = [n / s for n, s in turns[path]]
        with_vacuum = sum(n for n, _ in turns[path]) / (sum(s for _, s in turns[path]) + sum(vacuum_s[path]))
        vac = f"{statistics.median(vacuum_s[path]):.2f}" if kind == "postgresql" else "none (SQLite)"
        print(f"| {path} | {rate(turns[path]):,.0f} | {spread(per_turn)} | {vac} | {with_vacuum:,.0f} |")
    print("\n| ratio | value | per round (min–max) |\n| --- | ---: | ---: |")
    pairs = [(a, b) for a in trees for b in raw_paths]
    pairs += [(a, raw_paths[0]) for a in sums]
    if before is not None:
        pairs.append(("cleaner", "cleaner, before"))
    for a, b in pairs:
        per_round = [(x[0] / x[1]) / (y[0] / y[1]) for x, y in zip(turns[a], turns[b], strict=True)]
        target = " (target ≥ 0.5)" if a == "cleaner" and b in raw_paths else ""
        print(f"| {a} ÷ {b}{target} | {rate(turns[a]) / rate(turns[b]):.2f} | {spread(per_round, '{:.2f}')} |")
    chunk_ref = statistics.median(s / (n / chunk) for n, s in turns[raw_paths[1]]) * 1000
    print(f"\nWhere the cleaner's time goes: one more turn, in this process, each step timed ({profile.chunks} "
          f"chunks that deleted, and a look at each of the earlier turns' empty partitions; {done.retention / profiled_s:,.0f} records/s with the timers on; a raw {chunk:,}-row "
          f"chunk, DELETE and commit, took {chunk_ref:.2f} ms, median of its turns).\n")
    print("| step, per chunk | ms | share |\n| --- | ---: | ---: |")
    for step in ChunkProfile.STEPS:
        print(f"| {step} | {profile.t[step] / profile.chunks * 1000:.2f} | {profile.t[step] / profile.total:.0%} |")
    rest = profile.total - sum(profile.t.values())
    print(f"| the rest (Python between the steps) | {rest / profile.chunks * 1000:.2f} | {rest / profile.total:.0%} |")
    print(f"| **a chunk** | **{profile.total / profile.chunks * 1000:.2f}** | |")
    print(f"| of which in the write transaction (what SQLite's other writers wait for) | "
          f"{profile.write_held / profile.chunks * 1000:.2f} | {profile.write_held / profile.total:.0%} |\n")


# --- cleaner in a child process (2 and 3) ---------------------------------------------------


def _cleaner_process(url: str, interval_s: float | None, vacuum: bool, ready, go, stop, out) -> None:  # type: ignore[no-untyped-def]
    """A LogCleaner of its own process (as `outbox coordinator` runs one): one pass, or a pass
    every `interval_s` until `stop`. Sends each pass's span and VACUUM spans on `out`."""
    settings, db = open_db(url)
    cleaner = LogCleaner(db, settings, system_clock)
    clock = VacuumClock()
    cleaning.vacuum_records = clock
    if not vacuum:
        cleaner._reclaim_space = lambda done: CleanerPass()  # type: ignore[method-assign]
    ready.set()
    go.wait()
    try:
        while True:
            t0 = time.monotonic()
            done = cleaner.run_once()
            out.put({"start": t0, "end": time.monotonic(), "pass": astuple(done), "vacuums": clock.spans})
            clock.spans = []
            if interval_s is None or stop.wait(interval_s):
                return
    finally:
        db.dispose()


class CleanerProcess:
    def __init__(self, url: str, *, interval_s: float | None = None, vacuum: bool = True) -> None:
        ctx = mp.get_context("spawn")
        self.ready, self.go, self.stop_event = ctx.Event(), ctx.Event(), ctx.Event()
        self.out = ctx.Queue()
        self.proc = ctx.Process(target=_cleaner_process, daemon=True,
                                args=(url, interval_s, vacuum, self.ready, self.go, self.stop_event, self.out))
        self.proc.start()
        if not self.ready.wait(60):
            self.kill()
            raise RuntimeError("the cleaner process did not start")
        self.passes: list[dict] = []

    def start(self) -> None:
        self.go.set()

    def drain(self) -> list[dict]:
        while True:
            try:
                self.passes.append(self.out.get_nowait())
            except Exception:  # noqa: BLE001 - queue.Empty
                return self.passes

    def alive(self) -> bool:
        return self.proc.is_alive()

    def finish(self) -> list[dict]:
        self.stop_event.set()
        self.proc.join(120)
        self.kill()
        while self.proc.exitcode is None:
            time.sleep(0.01)
        passes = self.drain()
        if self.proc.exitcode != 0:
            raise RuntimeError(f"the cleaner process failed (exit {self.proc.exitcode})")
        return passes

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)


def totals(passes: list[dict]) -> CleanerPass:
    done = CleanerPass()
    for p in passes:
        done += CleanerPass(*p["pass"])
    return done


# --- 2. Send latency under cleaning ----------------------------------------------------------


@dataclass
class SendTimes:
    by: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # (phase, partition) -> ms
    during_vacuum: dict[int, list[float]] = field(default_factory=dict)


def quantiles(ms: list[float]) -> tuple[float, float, float]:
    if len(ms) < 2:  # one Send through a whole pass: it waited for all of it
        return (ms[0],) * 3 if ms else (float("nan"),) * 3
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return statistics.median(ms), q[98], max(ms)


# The latency benchmark's cleaner in a process of its own, on a given source tree (this one,
# or --before's): it opens the database, says so, waits for a line on stdin, runs one pass and
# prints its span and its VACUUMs' spans (time.monotonic, comparable across processes).
_CLEANER_PASS = r"""
import json, sys, time
import app
from app.domain.clock import system_clock
from app.services.log_cleaner import LogCleaner
from app.settings import Settings
from app.storage import cleaning
from app.storage.engine import open_database

settings = Settings()
db = open_database(settings, pool_size=2)
with db.read() as conn:  # the pool's first connection, before the pass
    pass
cleaner = LogCleaner(db, settings, system_clock)
vacuum, spans = cleaning.vacuum_records, []

def timed_vacuum(conn):
    t0 = time.monotonic()
    vacuum(conn)
    spans.append((t0, time.monotonic()))

cleaning.vacuum_records = timed_vacuum
print(json.dumps({"app": app.__file__}), flush=True)
sys.stdin.readline()
t0 = time.monotonic()
done = cleaner.run_once()
print(json.dumps({"start": t0, "end": time.monotonic(), "retention": done.retention, "vacuums": spans}), flush=True)
db.dispose()
"""


class ChildCleaning:
    """The cleaning of the latency benchmark by a LogCleaner in a process of its own (as
    `outbox coordinator` runs one), from the round's source tree: one pass, which reports its
    span and its VACUUM's."""

    where = "a LogCleaner in another process (as `outbox coordinator` runs one), one pass"

    def __init__(self, url: str, raw: Raw, topic_id: int, records: int, tree: Path,
                 settings: dict[str, str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
        env.update({"PYTHONPATH": str(tree), "OUTBOX_DATABASE_URL": url, **settings})
        # Started now: its start-up is in neither phase.
        self.proc = subprocess.Popen([sys.executable, "-c", _CLEANER_PASS], cwd=tree, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.records = records
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        first = orjson.loads(self.lines.get(timeout=60))
        if not Path(first["app"]).resolve().is_relative_to(tree.resolve()):
            raise RuntimeError(f"the cleaner process for {tree} imported {first['app']}")
        self.result: dict | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def start(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def done(self) -> bool:
        if self.result is None:
            try:
                self.result = orjson.loads(self.lines.get_nowait())
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the cleaner process failed (exit {self.proc.returncode})") from None
        return self.result is not None

    def finish(self) -> tuple[float, float, list[tuple[float, float]]]:
        """The pass's start and end and its VACUUMs' spans (time.monotonic)."""
        assert self.result is not None
        if self.result["retention"] != self.records:
            raise RuntimeError(f"the cleaner deleted {self.result['retention']}, not {self.records} records")
        return self.result["start"], self.result["end"], [tuple(v) for v in self.result["vacuums"]]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


class ServeCleaning:
    """The cleaning of the latency benchmark by `outbox serve`'s own cleaner worker (the
    default deployment: OUTBOX_RUN_COORDINATOR=true), every OUTBOX_CLEANER_INTERVAL_MS. The
    topic is created with retention_ms -1, so its passes find nothing to do until the
    benchmark sets retention_ms in the database, as a config change would. The cleaning
    starts at the last look (between two Sends) that found the log start not yet moved, and
    ends when it has reached the last expired record and, on PostgreSQL, the cleaner's VACUUM
    has ended (pg_stat_user_tables.vacuum_count), if it runs one."""

    where = "`outbox serve`'s own cleaner worker"

    def __init__(self, url: str, raw: Raw, topic_id: int, records: int, tree: Path,
                 settings: dict[str, str]) -> None:
        self.raw, self.topic_id, self.records = raw, topic_id, records

    def _vacuums(self) -> int:
        if self.raw.sqlite:
            return 0
        # `records` is a leaf per log partition (migration 0035): a VACUUM of it counts on each leaf.
        return self.raw.sql("SELECT coalesce(sum(vacuum_count), 0) FROM pg_stat_user_tables "
                            "WHERE relid IN (SELECT relid FROM pg_partition_tree('records'))")[0][0]

    def _vacuuming(self) -> bool:
        return bool(self.raw.sql("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND state = 'active' AND upper(left(query, 6)) = 'VACUUM'"))

    def start(self) -> None:
        self.vacuums = self._vacuums()
        self.deleted_at: float | None = None
        self.ended_at: float | None = None
        self.asked_at = self.started_at = time.monotonic()
        self.raw.sql("UPDATE topics SET retention_ms = ? WHERE topic_id = ?", HOUR_MS, self.topic_id)

    def done(self) -> bool:
        now = time.monotonic()
        if self.deleted_at is None:
            (log_start,) = self.raw.sql('SELECT log_start_offset FROM partitions WHERE topic_id = ? AND "partition" = 0',
                                        self.topic_id)[0]
            if log_start == 0:
                self.started_at = now
            if log_start >= self.records:
                self.deleted_at = now
        if self.deleted_at is not None and (self.raw.sqlite or self._vacuums() > self.vacuums
                                            or (now - self.deleted_at > 2 and not self._vacuuming())):
            self.ended_at = now  # (no VACUUM within 2 s: the cleaner found none due)
            self.vacuumed = not self.raw.sqlite and self._vacuums() > self.vacuums
            return True
        if now - self.asked_at > 300:
            raise RuntimeError("serve's cleaner did not finish within 300 s")
        return False

    def finish(self) -> tuple[float, float, list[tuple[float, float]]]:
        assert self.deleted_at is not None and self.ended_at is not None
        vacuums = [(self.deleted_at, self.ended_at)] if self.vacuumed else []
        return self.started_at, self.ended_at, vacuums

    def close(self) -> None:
        pass


def bench_latency(kind: str, url: str, records: int, rounds: int, quiet_s: float, where: str,
                  interval_ms: int, before: Path | None, settings: dict[str, str]) -> None:
    """Each round: for each tree in turn (the order alternating by round), a serve of its own
    on the same database, a topic, its fill, Sends without cleaning, then Sends while the
    tree's cleaner cleans."""
    raw = Raw(url)
    trees = {"after": ROOT, **({"before": before} if before is not None else {})}
    # The fill can take longer than uvicorn's keep-alive (5 s): the client's one connection
    # would find itself closed by the server.
    serve_settings = {"OUTBOX_HTTP_KEEP_ALIVE_TIMEOUT_S": "600", **settings}
    if where == "serve":
        serve_settings.update(OUTBOX_RUN_COORDINATOR="true", OUTBOX_CLEANER_INTERVAL_MS=str(interval_ms))
        cleaning_kind: type[ChildCleaning] | type[ServeCleaning] = ServeCleaning
        retention_ms = -1
    else:
        serve_settings.update(OUTBOX_RUN_COORDINATOR="false")
        cleaning_kind, retention_ms = ChildCleaning, HOUR_MS
    batch = _records(BATCH)
    times = {name: SendTimes() for name in trees}
    per_round: dict[str, list[SendTimes]] = {name: [] for name in trees}
    cleans: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}  # seconds, VACUUM seconds
    fill_s: list[float] = []

    def send(client: Client, topic: str, partition: int) -> tuple[float, float]:
        t0 = time.monotonic()
        _post(client, "/v1/records", {"batches": [{"topic": topic, "partition": partition, "records": batch}]})
        return t0, (time.monotonic() - t0) * 1000

    try:
        for r in range(rounds):
            for name in (list(trees) if r % 2 == 0 else list(reversed(trees))):
                tree = trees[name]
                service = Service(url, tree, **serve_settings)
                client = Client(service.url)
                this_round = SendTimes()
                try:
                    topic = f"lat-{r}-{name}"
                    _post(client, "/v1/topics", {"name": topic, "partitions": 2,
                                                 "config": {"retention_ms": retention_ms}})
                    topic_id = raw.topic_id(topic)
                    t0 = time.perf_counter()
                    raw.fill(topic_id, 0, records)
                    fill_s.append(time.perf_counter() - t0)
                    cleaning = cleaning_kind(url, raw, topic_id, records, tree, settings)
                    try:
                        # No cleaning: as long as this tree's last cleaning took (the first round: quiet_s).
                        deadline = time.monotonic() + (cleans[name][-1][0] if cleans[name] else quiet_s)
                        partition = 1
                        while time.monotonic() < deadline:
                            this_round.by.setdefault(("none", partition), []).append(
                                send(client, topic, partition)[1])
                            partition ^= 1
                        cleaning.start()
                        sent: list[tuple[int, float, float]] = []
                        while not cleaning.done():
                            sent.append((partition, *send(client, topic, partition)))
                            partition ^= 1
                        started, ended, vacuums = cleaning.finish()
                    finally:
                        cleaning.close()
                finally:
                    client.close()
                    service.stop()
                cleans[name].append((ended - started, sum(b - a for a, b in vacuums)))
                for part, start, ms in sent:
                    if not started <= start <= ended:
                        continue  # before the pass began or after it ended
                    this_round.by.setdefault(("cleaning", part), []).append(ms)
                    if any(a <= start <= b for a, b in vacuums):
                        this_round.during_vacuum.setdefault(part, []).append(ms)
                per_round[name].append(this_round)
                for key, ms in this_round.by.items():
                    times[name].by.setdefault(key, []).extend(ms)
                for part, ms in this_round.during_vacuum.items():
                    times[name].during_vacuum.setdefault(part, []).extend(ms)
    finally:
        raw.close()

    interval = f" (OUTBOX_CLEANER_INTERVAL_MS={interval_ms})" if where == "serve" else ""
    extra = "".join(f", {k}={v}" for k, v in settings.items())
    print(f"### {kind}: Send latency under cleaning by {cleaning_kind.where}{interval}{extra}\n")
    print(f"Plain Sends of {BATCH:,} records over HTTP, one producer alternating between partition 1 (another "
          f"partition of the topic) and partition 0, whose {records:,} expired records the cleaner deletes; "
          f"{rounds} rounds, each: fill (median {statistics.median(fill_s):.1f} s), Sends without cleaning, then "
          f"Sends while it cleans"
          + (f"; each round once per tree, in turn, each with a serve of its own (before: {before})"
             if before is not None else "") + ".\n")
    for name in trees:
        secs = [s for s, _ in cleans[name]]
        vac = [v for _, v in cleans[name]]
        print(f"{name}: the cleaning took {spread(secs, '{:.1f}')} s ({records / statistics.median(secs):,.0f} "
              f"records/s, median)" + (f", its VACUUM {spread(vac, '{:.1f}')} s of it" if kind == "postgresql" else "")
              + ".\n")
    names = {1: "another partition", 0: "the partition cleaned"}
    print("| tree | Sends to | cleaning | Sends | p50 ms | p99 ms | max ms |\n"
          "| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for name in trees:
        for part in (1, 0):
            for phase in ("none", "cleaning"):
                ms = times[name].by.get((phase, part), [])
                p50, p99, top = quantiles(ms)
                print(f"| {name} | {names[part]} | {phase} | {len(ms)} | {p50:.1f} | {p99:.1f} | {top:.1f} |")
            if len(times[name].during_vacuum.get(part, [])) >= 2:
                ms = times[name].during_vacuum[part]
                p50, p99, top = quantiles(ms)
                print(f"| {name} | {names[part]} | of which during its VACUUM | {len(ms)} | {p50:.1f} | {p99:.1f} "
                      f"| {top:.1f} |")
    print("\n| tree | Sends to | cleaning ÷ none: p50 | p99 (target ≤ 1.5) | p99, per round (min–max) | max |\n"
          "| --- | --- | ---: | ---: | ---: | ---: |")
    for name in trees:
        for part in (1, 0):
            a, b = quantiles(times[name].by.get(("cleaning", part), [])), quantiles(times[name].by[("none", part)])
            rounds_p99 = [quantiles(t.by.get(("cleaning", part), []))[1] / quantiles(t.by[("none", part)])[1]
                          for t in per_round[name]]
            print(f"| {name} | {names[part]} | {a[0] / b[0]:.2f} | {a[1] / b[1]:.2f} | "
                  f"{spread(rounds_p99, '{:.2f}')} | {a[2] / b[2]:.2f} |")
    print()


# --- 3. soak ------------------------------------------------------------------------------------


class Sizes:
    """The database's size now: PostgreSQL's relation sizes, SQLite's pages (and each b-tree's
    pages, from dbstat) and its -wal file."""

    def __init__(self, raw: Raw) -> None:
        self.raw = raw

    def sample(self) -> dict[str, float]:
        raw, mb = self.raw, 1 / 2**20
        out: dict[str, float] = {}
        if raw.sqlite:
            page_size = raw.sql("PRAGMA page_size")[0][0]
            pages, free = raw.sql("PRAGMA page_count")[0][0], raw.sql("PRAGMA freelist_count")[0][0]
            for name, size in raw.sql("SELECT name, sum(pgsize) FROM dbstat "
                                      "WHERE name = 'records' OR name IN "
                                      "(SELECT name FROM sqlite_master WHERE tbl_name = 'records' AND type = 'index') "
                                      "GROUP BY name ORDER BY name"):
                out[name] = size * mb
            out["file"] = pages * page_size * mb
            out["free pages"] = free * page_size * mb
            wal = raw.path + "-wal"
            out["-wal"] = (os.path.getsize(wal) if os.path.exists(wal) else 0) * mb
        else:
            # Summed over `records`' leaves (migration 0035), its primary key's too.
            leaves = "SELECT relid FROM pg_partition_tree('records') WHERE isleaf"
            out["records (heap)"] = raw.sql(f"SELECT coalesce(sum(pg_relation_size(relid)), 0) FROM ({leaves}) l")[0][0] * mb
            out["pk_records"] = raw.sql("SELECT coalesce(sum(pg_relation_size(relid)), 0) "
                                        "FROM pg_partition_tree('pk_records') WHERE isleaf")[0][0] * mb
            out["records, total"] = raw.sql(f"SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM ({leaves}) l")[0][0] * mb
            out["partitions, total (KiB)"] = raw.sql("SELECT pg_total_relation_size('partitions')")[0][0] / 1024
        return out


def bench_soak(kind: str, url: str, seconds: float, periods: int, rate_per_s: int, partitions: int,
               interval_ms: int, sample_s: float, vacuum: bool) -> None:
    raw = Raw(url)
    service = Service(url, OUTBOX_RUN_COORDINATOR="false")
    client = Client(service.url)
    batch = _records(BATCH)
    record_bytes = sum(record_size(r["key"], orjson.dumps(r["value"]).decode(), None) for r in batch) / BATCH
    period_s = seconds / periods
    retention_bytes = int(rate_per_s * period_s * record_bytes / partitions)
    topic = f"soak-{'vacuum' if vacuum else 'novacuum'}"
    samples: list[dict] = []
    cleaner = None
    try:
        _post(client, "/v1/topics", {"name": topic, "partitions": partitions,
                                     "config": {"retention_ms": -1, "retention_bytes": retention_bytes}})
        topic_id = raw.topic_id(topic)
        sizes = Sizes(raw)
        cleaner = CleanerProcess(url, interval_s=interval_ms / 1000, vacuum=vacuum)
        cleaner.start()
        produced, partition = 0, 0
        t0 = time.monotonic()
        next_send, next_sample = t0, t0
        late = 0.0
        while True:
            now = time.monotonic()
            if now >= next_sample:
                live = raw.sql("SELECT coalesce(sum(record_count), 0) FROM partitions WHERE topic_id = ?", topic_id)[0][0]
                samples.append({"t": now - t0, "produced": produced, "live": int(live),
                                "cleaned": totals(cleaner.drain()), **sizes.sample()})
                next_sample += sample_s
                if now - t0 >= seconds:
                    break
                continue
            if now < next_send:
                time.sleep(min(next_send, next_sample) - now)
                continue
            late = max(late, now - next_send)
            _post(client, "/v1/records", {"batches": [{"topic": topic, "partition": partition, "records": batch}]})
            produced += BATCH
            partition = (partition + 1) % partitions
            next_send += BATCH / rate_per_s
        passes = cleaner.finish()
    finally:
        if cleaner is not None:
            cleaner.kill()
        client.close()
        service.stop()
        raw.close()

    took = samples[-1]["t"]
    done = totals(passes)
    print(f"### {kind}: soak, the cleaner's VACUUM {'on' if vacuum else 'OFF'}\n")
    print(f"A producer at {rate_per_s:,} records/s ({samples[-1]['produced'] / took:,.0f} reached; at worst "
          f"{late:.2f} s behind schedule) of {record_bytes:.0f} bytes, {BATCH:,}-record Sends over HTTP to "
          f"{partitions} partitions with retention_bytes {retention_bytes:,} each: a retention period of "
          f"{period_s:.0f} s; the cleaner every {interval_ms:,} ms in another process: {len(passes)} passes, "
          f"{done.retention:,} records deleted, {done.vacuums} VACUUMs. Sizes in MiB.\n")
    size_keys = [k for k in samples[0] if k not in ("t", "produced", "live", "cleaned")]
    print("| s | period | produced | stored | deleted | VACUUMs | " + " | ".join(size_keys) + " |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in size_keys) + " |")
    per_period = rate_per_s * period_s

    def period(s: dict) -> int:
        return int(s["produced"] // per_period) + 1

    for s in samples:
        print(f"| {s['t']:.0f} | {period(s)} | {s['produced']:,} | {s['live']:,} | {s['cleaned'].retention:,} | "
              f"{s['cleaned'].vacuums} | "
              + " | ".join(f"{s[k]:.1f}" for k in size_keys) + " |")
    print()
    marks = []
    for k in (1, 2):
        at = next((s for s in samples if s["produced"] >= k * per_period), None)
        if at is not None and at is not samples[-1]:
            marks.append((k, at))
    if marks:
        end = samples[-1]
        print("| growth | " + " | ".join(size_keys) + " |\n| --- | " + " | ".join("---:" for _ in size_keys) + " |")
        for k, at in marks:
            cells = []
            for key in size_keys:
                a, b = at[key], end[key]
                cells.append(f"{b - a:+.1f} ({(b - a) / a:+.0%})" if a else f"{b - a:+.1f}")
            print(f"| end of period {k} ({at['t']:.0f} s) → end ({end['t']:.0f} s) | " + " | ".join(cells) + " |")
        print()


# --- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--only", default="throughput,latency,soak",
                        help="comma-separated: throughput, latency, soak")
    parser.add_argument("--records", type=int, default=500_000, help="throughput: records per fill")
    parser.add_argument("--rounds", type=int, default=3, help="throughput: turns of each path, in rotation")
    parser.add_argument("--before", type=Path, help="throughput and latency: another source tree whose cleaner "
                        "(and, for latency, serve) takes turns too (e.g. git archive <commit> | tar -x -C DIR)")
    parser.add_argument("--batch-records", type=int, default=1_000,
                        help="throughput: records per plain batch row of a fill (one Send's)")
    parser.add_argument("--txn-batches", type=int, default=0,
                        help="throughput: fill with committed transactions of this many one-record batches, "
                             "each followed by its COMMIT marker, instead of plain batches")
    parser.add_argument("--sum-paths", action="store_true",
                        help="throughput: also the cleaner's SQL alone, a chunk's sum then its DELETE, and on "
                        "PostgreSQL a DELETE … RETURNING summed in the same statement (one pass)")
    parser.add_argument("--setting", action="append", default=[], metavar="OUTBOX_NAME=VALUE",
                        help="latency: a setting for serve and the cleaner (repeatable), e.g. a cleaner throttle")
    parser.add_argument("--latency-records", type=int, default=1_000_000, help="latency: records the cleaner deletes")
    parser.add_argument("--latency-rounds", type=int, default=3)
    parser.add_argument("--latency-cleaner", choices=["process", "serve", "both"], default="both",
                        help="latency: the cleaner in a process of its own, inside `outbox serve`, or each in turn")
    parser.add_argument("--serve-cleaner-interval-ms", type=int, default=1_000,
                        help="latency, cleaner inside serve: its OUTBOX_CLEANER_INTERVAL_MS")
    parser.add_argument("--quiet-seconds", type=float, default=10.0,
                        help="latency: Sends without cleaning in the first round (later: as long as the last pass)")
    parser.add_argument("--soak-seconds", type=float, default=120.0)
    parser.add_argument("--soak-periods", type=int, default=4, help="retention periods in the soak")
    parser.add_argument("--soak-rate", type=int, default=20_000, help="records/s the soak's producer sends")
    parser.add_argument("--soak-partitions", type=int, default=2)
    parser.add_argument("--cleaner-interval-ms", type=int, default=1_000, help="soak: pause between cleaner passes")
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--soak-vacuum", choices=["on", "off", "both"], default="both",
                        help="PostgreSQL: soak with the cleaner's VACUUM, without, or both")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    if parts - {"throughput", "latency", "soak"}:
        parser.error(f"--only: unknown {', '.join(sorted(parts - {'throughput', 'latency', 'soak'}))}")
    kinds = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    latency_settings = dict(item.split("=", 1) for item in args.setting)
    if any(not k.startswith("OUTBOX_") for k in latency_settings):
        parser.error("--setting: OUTBOX_NAME=VALUE")
    import app

    print(f"# The log cleaner: {os.cpu_count()} cores; cleaner chunks of "
          f"{', '.join(f'{n:,} rows on {k}' for k, n in CHUNK_ROWS.items())} (deleted whole: "
          f"{', '.join(f'{n:,} on {k}' for k, n in WHOLE_CHUNK_ROWS.items())}); "
          f"the service's source: {Path(app.__file__).parent.parent}\n")
    for kind in kinds:
        print(f"## {kind}\n")
        if "throughput" in parts:
            with scratch_database(kind, "cleaning") as url:
                bench_throughput(kind, url, args.records, args.rounds, args.before, args.sum_paths,
                                 args.batch_records, args.txn_batches)
        if "latency" in parts:
            for where in (("process", "serve") if args.latency_cleaner == "both" else (args.latency_cleaner,)):
                with scratch_database(kind, "cleaning") as url:
                    bench_latency(kind, url, args.latency_records, args.latency_rounds, args.quiet_seconds, where,
                                  args.serve_cleaner_interval_ms, args.before, latency_settings)
        if "soak" in parts:
            for vacuum in ((True,) if kind == "sqlite" else
                           {"on": (True,), "off": (False,), "both": (True, False)}[args.soak_vacuum]):
                with scratch_database(kind, "cleaning") as url:
                    bench_soak(kind, url, args.soak_seconds, args.soak_periods, args.soak_rate,
                               args.soak_partitions, args.cleaner_interval_ms, args.sample_seconds, vacuum)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
