"""Appends in the application's own transaction (app.in_database, outbox.append): what they
cost the application's transaction, and how soon a reader has the records.

    .venv/bin/python benchmarks/in_database.py [--db sqlite|postgresql|both] [--rounds 6]
                                              [--turn-seconds 1] [--samples 500]

1. cost: one application thread on one driver connection (psycopg, sqlite3) runs
   transactions that insert one order row into its own table, taking turns with:
   - the row alone, committed (the reference);
   - the row and one record appended by app.in_database.append (the Send decoder's checks in
     Python, then on PostgreSQL `SELECT outbox.append(…)`, on SQLite the append itself);
   - on PostgreSQL, the row and one `SELECT outbox.append(…)` sent as is (what a caller in
     another language pays);
   - the row and ten records in one append;
   - the row and one record, and ten, each with a message id (the retry key kept in
     record_message_ids);
   - the row committed, then its record sent with a Send over HTTP to `outbox serve` (the
     dual write the outbox pattern replaces: not atomic, shown for its cost).
   Each turn is `--turn-seconds` long, each path gets `--rounds` turns in rotation; figures
   are transactions per second and ratios to the row alone, per round's spread.
2. latency: an application transaction appends one record and commits; a reader thread,
   woken as the commit returns (as a LISTEN or a long-poll Fetch would wake it, never
   polling), fetches it read_committed over HTTP from the offset it must have. From the
   moment the application sends COMMIT to the moment the reader holds the record: p50, p99
   and max of `--samples` records, and the two parts (the COMMIT, which on PostgreSQL runs
   the trigger that gives the records their offsets, and the Fetch).

Client, service and database share the machine: the figures compare paths within one run.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
for path in (str(ROOT), str(ROOT / "benchmarks")):
    if path not in sys.path:
        sys.path.insert(0, path)

from app.in_database import OutboxRecord, append  # noqa: E402
from scratch import scratch_database  # noqa: E402
from run import Client, Service  # noqa: E402

VALUE = {"order": 0, "total": 1250, "items": ["pizza", "soda"]}


class App:
    """The application's connection and its orders table."""

    def __init__(self, url: str) -> None:
        self.sqlite = url.startswith("sqlite")
        if self.sqlite:
            self.conn: Any = sqlite3.connect(make_url(url).database, timeout=30)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.insert = "INSERT INTO orders VALUES (?, ?)"
        else:
            self.conn = psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False))
            self.insert = "INSERT INTO orders VALUES (%s, %s)"
        self.conn.execute("CREATE TABLE IF NOT EXISTS orders (id BIGINT PRIMARY KEY, total INTEGER NOT NULL)")
        self.conn.commit()
        self.next_id = 0

    def order(self) -> int:
        self.next_id += 1
        if self.sqlite:
            self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(self.insert, (self.next_id, 1250))
        return self.next_id


def paths(app: App, client: Client) -> dict[str, Callable[[], None]]:
    def row_only() -> None:
        app.order()
        app.conn.commit()

    def with_append(records: int, message_ids: bool = False) -> Callable[[], None]:
        def run() -> None:
            i = app.order()
            append(app.conn, "orders", 0, [OutboxRecord(key=str(i), value=VALUE,
                                                        message_id=f"order-{i}-{k}" if message_ids else None)
                                           for k in range(records)])
            app.conn.commit()
        return run

    value_text = orjson.dumps(VALUE).decode()

    def sql_append() -> None:
        i = app.order()
        app.conn.execute("SELECT outbox.append('orders', 0, %s, %s::json)", (str(i), value_text))
        app.conn.commit()

    def dual_write() -> None:
        i = app.order()
        app.conn.commit()
        status, body = client.request("POST", "/v1/records", orjson.dumps(
            {"batches": [{"topic": "orders", "partition": 1, "records": [{"key": str(i), "value": VALUE}]}]}))
        assert status == 200, body

    out = {"the row alone": row_only, "the row + append(1 record)": with_append(1)}
    if not app.sqlite:
        out["the row + SELECT outbox.append (SQL)"] = sql_append
    out["the row + append(10 records)"] = with_append(10)
    out["the row + append(1 record with a message id)"] = with_append(1, message_ids=True)
    out["the row + append(10 records with message ids)"] = with_append(10, message_ids=True)
    out["the row, commit, then a Send (dual write)"] = dual_write
    return out


def bench_cost(app: App, client: Client, rounds: int, turn_s: float) -> None:
    runs = paths(app, client)
    counts: dict[str, list[tuple[int, float]]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < turn_s:
                run()
                n += 1
            counts[name].append((n, time.perf_counter() - start))
    reference = counts["the row alone"]
    print("| application transaction | transactions/s | ÷ the row alone (per round) |")
    print("| --- | ---: | ---: |")
    for name, turns in counts.items():
        rate = sum(n for n, _ in turns) / sum(s for _, s in turns)
        ratios = [(n / s) / (rn / rs) for (n, s), (rn, rs) in zip(turns, reference, strict=True)]
        print(f"| {name} | {rate:,.0f} | {statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) |")
    print()


def bench_latency(app: App, client_url: str, samples: int) -> None:
    wake = threading.Event()
    expected: list[int] = []
    seen: list[float] = []
    misses = 0

    def reader() -> None:
        nonlocal misses
        client = Client(client_url)
        while True:
            wake.wait()
            wake.clear()
            if not expected:
                return
            offset = expected[-1]
            status, body = client.request("GET", f"/v1/topics/orders/partitions/0/records?offset={offset}&max_records=1")
            assert status == 200, body
            if not orjson.loads(body)["records"]:
                misses += 1
            seen.append(time.perf_counter())

    thread = threading.Thread(target=reader)
    thread.start()
    commits, totals = [], []
    offset = _log_end(client_url)
    for _ in range(samples):
        i = app.order()
        append(app.conn, "orders", 0, [OutboxRecord(key=str(i), value=VALUE)])
        sent = time.perf_counter()
        app.conn.commit()
        committed = time.perf_counter()
        expected.append(offset)
        offset += 1
        before = len(seen)
        wake.set()
        while len(seen) == before:
            time.sleep(0.0002)
        commits.append((committed - sent) * 1000)
        totals.append((seen[-1] - sent) * 1000)
        time.sleep(0.005)
    expected.clear()
    wake.set()
    thread.join()

    def q(ms: list[float]) -> str:
        s = sorted(ms)
        return f"{s[len(s) // 2]:.2f} | {s[int(len(s) * 0.99)]:.2f} | {s[-1]:.2f}"

    fetches = [t - c for t, c in zip(totals, commits, strict=True)]
    print(f"{samples} records, each appended and committed, then fetched by a reader woken at the commit; "
          f"records the reader did not find at their offset: {misses}.")
    print()
    print("| ms | p50 | p99 | max |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| COMMIT (publishes the records) | {q(commits)} |")
    print(f"| the reader's Fetch | {q(fetches)} |")
    print(f"| **COMMIT sent → the record in the reader's hands** | {q(totals)} |")
    print()


def _log_end(url: str) -> int:
    status, body = Client(url).request("GET", "/v1/topics/orders")
    assert status == 200, body
    return orjson.loads(body)["partitions"][0]["log_end_offset"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--turn-seconds", type=float, default=1.0)
    parser.add_argument("--samples", type=int, default=500)
    args = parser.parse_args(argv)
    import os

    print(f"# Appends in the application's transaction: {os.cpu_count()} cores")
    for kind in (["sqlite", "postgresql"] if args.db == "both" else [args.db]):
        with scratch_database(kind, "in_database") as url:
            service = Service(url)
            try:
                client = Client(service.url)
                status, body = client.request("POST", "/v1/topics", orjson.dumps({"name": "orders", "partitions": 2}))
                assert status == 201, body
                app = App(url)
                print(f"\n## {kind}\n\n### cost to the application's transaction "
                      f"({args.rounds} rounds of {args.turn_seconds} s turns)\n")
                bench_cost(app, client, args.rounds, args.turn_seconds)
                print("### commit → served\n")
                bench_latency(app, service.url, args.samples)
                app.conn.close()
            finally:
                service.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
