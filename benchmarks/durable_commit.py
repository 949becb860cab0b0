"""What a durable commit costs on this machine's disk: the same one-row UPDATE committed durably
and not, taking turns, on PostgreSQL (synchronous_commit on / off) and SQLite in WAL mode
(synchronous FULL / OFF), the settings the service runs with against the ones that skip the
flush of the log.

    .venv/bin/python benchmarks/durable_commit.py --samples 400

Every Commit of a transaction is one such durable write more per transaction than a plain
producer pays (benchmarks/txn_window.py's account): this is its floor, without HTTP or the
Commit's statements.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import _psycopg_url  # noqa: E402 - the benchmark's own modules, not a package
from scratch import scratch_database  # noqa: E402


def _postgresql(samples: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"on": [], "off": []}
    with scratch_database("postgresql", "durable") as url, psycopg.connect(_psycopg_url(url)) as c:
        c.execute("CREATE TABLE durable (k int PRIMARY KEY, v int)")
        c.execute("INSERT INTO durable VALUES (1, 0)")
        c.commit()
        for _ in range(samples):
            for mode in times:
                t0 = time.perf_counter()
                c.execute(f"SET LOCAL synchronous_commit = {mode}")
                c.execute("UPDATE durable SET v = v + 1 WHERE k = 1")
                c.commit()
                times[mode].append((time.perf_counter() - t0) * 1000)
    return times


def _sqlite(samples: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"FULL": [], "OFF": []}
    with tempfile.TemporaryDirectory() as d:
        c = sqlite3.connect(os.path.join(d, "durable.db"), isolation_level=None)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("CREATE TABLE durable (k int PRIMARY KEY, v int)")
        c.execute("INSERT INTO durable VALUES (1, 0)")
        for _ in range(samples):
            for mode in times:
                c.execute(f"PRAGMA synchronous={mode}")
                t0 = time.perf_counter()
                c.execute("BEGIN IMMEDIATE")
                c.execute("UPDATE durable SET v = v + 1 WHERE k = 1")
                c.execute("COMMIT")
                times[mode].append((time.perf_counter() - t0) * 1000)
        c.close()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=400)
    args = parser.parse_args(argv)
    print(f"# {args.samples} samples of each, taking turns; load average {os.getloadavg()[0]:.2f} at the start\n")
    print("| database | durable p50 ms | not durable p50 ms | durable mean ms | not durable mean ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (durable, fast) in (("PostgreSQL (synchronous_commit on / off)", _postgresql(args.samples).values()),
                                  ("SQLite WAL (synchronous FULL / OFF)", _sqlite(args.samples).values())):
        print(f"| {name} | {statistics.median(durable):.2f} | {statistics.median(fast):.2f} | "
              f"{statistics.mean(durable):.2f} | {statistics.mean(fast):.2f} |")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
