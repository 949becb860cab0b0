"""Throughput and latency of the service next to what the database itself can insert.

    .venv/bin/python benchmarks/run.py                 # SQLite and PostgreSQL
    .venv/bin/python benchmarks/run.py --db postgresql --seconds 5

Starts a real `outbox serve` process per database (a fresh SQLite file; a fresh PostgreSQL
database on OUTBOX_BENCH_POSTGRES_URL, default the local server) and drives it over HTTP
from this process. Client, service and database share the machine, as they do here (2 cores):
the figures are for comparing paths with each other in one run, not absolute capacity.
Every figure is measured in the run that prints it; nothing is hard-coded.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
ADMIN_URL = os.environ.get("OUTBOX_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
BATCH = 1_000
VALUE = {"order_id": 123456, "meal": "Pizza", "value": 12.5, "customer": "c-000042", "note": "extra cheese"}


@dataclass
class Row:
    db: str
    name: str
    records_per_s: float | None = None
    extra: dict[str, str] = field(default_factory=dict)
    per_round: list[float] = field(default_factory=list)  # records/s of each interleaved round


# --- a service under test ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    def __init__(self, url: str, **settings: str) -> None:
        self.port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
        env.update({"OUTBOX_DATABASE_URL": url, "OUTBOX_LOG_LEVEL": "warning", **settings})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("service did not start")
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _post(client: httpx.Client, path: str, body: dict | bytes) -> dict:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    r = client.post(path, content=content, headers={"content-type": "application/json"})
    if r.status_code != 200 and r.status_code != 201:
        raise RuntimeError(f"{path}: {r.status_code} {r.text[:300]}")
    return r.json()


def _init_producer(client: httpx.Client, tid: str | None) -> dict:
    """InitProducerId (transactional when `tid` is given): the producer_id and producer_epoch
    every later call of that producer carries."""
    p = _post(client, "/v1/producers", {} if tid is None else {"transactional_id": tid})
    return {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}


def _records(n: int) -> list[dict]:
    return [{"key": f"k{i}", "value": VALUE} for i in range(n)]


# --- producers ----------------------------------------------------------------------------------


def produce(url: str, topic: str, *, mode: str, seconds: float, partition: int = 0,
            tid: str | None = None, commit_every_ms: float | None = None) -> int:
    """One producer for `seconds`; returns records written. mode: plain | idempotent | transactional.
    Each call initialises its producer: a new epoch of `tid`, whose sequences start at 0."""
    records = _records(BATCH)
    written = 0
    with httpx.Client(base_url=url, timeout=60) as c:
        ident: dict = {}
        if mode != "plain":
            ident = _init_producer(c, tid if mode == "transactional" else None)
        seq = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if mode == "transactional":
                _post(c, f"/v1/transactions/{tid}/begin", ident)
            txn_started = time.monotonic()
            while True:
                body: dict = {"batches": [{"topic": topic, "partition": partition, "records": records}]}
                if mode != "plain":
                    body.update(ident)
                    body["batches"][0]["base_sequence"] = seq
                    seq += BATCH
                if mode == "transactional":
                    body["transactional_id"] = tid
                _post(c, "/v1/records", body)
                written += BATCH
                # commit every BATCH records, or (commit_every_ms) every so many ms
                if commit_every_ms is None or (time.monotonic() - txn_started) * 1000 >= commit_every_ms:
                    break
            if mode == "transactional":
                _post(c, f"/v1/transactions/{tid}/commit", ident)
    return written


def concurrent(n: int, target: Callable[[int], int]) -> int:
    results = [0] * n

    def run(i: int) -> None:
        results[i] = target(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(results)


def create_topic(url: str, name: str, partitions: int) -> None:
    with httpx.Client(base_url=url) as c:
        _post(c, "/v1/topics", {"name": name, "partitions": partitions})


# --- reads and latency ----------------------------------------------------------------------------


def read_all(url: str, topic: str, isolation: str) -> tuple[int, float]:
    n, offset = 0, 0
    t0 = time.perf_counter()
    with httpx.Client(base_url=url, timeout=60) as c:
        while True:
            page = c.get(f"/v1/topics/{topic}/partitions/0/records",
                         params={"offset": offset, "isolation": isolation, "max_records": 5000}).json()
            n += len(page["records"])
            if page["next_offset"] >= page["high_watermark"]:
                break
            offset = page["next_offset"]
    return n, time.perf_counter() - t0


def commit_to_visible(url: str, topic: str, rounds: int) -> list[float]:
    """ms from Commit answered to the records returned by a read_committed fetch."""
    tid = f"lat-{uuid.uuid4().hex[:8]}"
    out = []
    with httpx.Client(base_url=url, timeout=60) as c:
        ident = _init_producer(c, tid)
        seq, position = 0, 0
        for _ in range(rounds):
            _post(c, f"/v1/transactions/{tid}/begin", ident)
            _post(c, "/v1/records", {**ident, "transactional_id": tid, "batches": [
                {"topic": topic, "partition": 0, "base_sequence": seq, "records": _records(10)}]})
            seq += 10
            _post(c, f"/v1/transactions/{tid}/commit", ident)
            t0 = time.perf_counter()
            while True:
                page = c.get(f"/v1/topics/{topic}/partitions/0/records",
                             params={"offset": position, "max_records": 100}).json()
                position = page["next_offset"]
                if page["records"]:
                    break
            out.append((time.perf_counter() - t0) * 1000)
    return out


def request_latencies(url: str, topic: str, rounds: int) -> dict[str, float]:
    """Median ms of each request of a one-Send transaction, next to a plain Send and a request
    that does no work, taking turns: what a transaction costs on top of its records."""
    tid = f"req-{uuid.uuid4().hex[:8]}"
    times: dict[str, list[float]] = {k: [] for k in ("GET /healthz", "Send, plain", "BeginTransaction",
                                                       "Send, transactional", "Commit")}
    records = _records(BATCH)
    with httpx.Client(base_url=url, timeout=60) as c:
        ident = _init_producer(c, tid)
        calls: list[tuple[str, Callable[[int], object]]] = [
            ("GET /healthz", lambda _: c.get("/healthz")),
            ("Send, plain", lambda _: _post(c, "/v1/records", {"batches": [
                {"topic": topic, "partition": 0, "records": records}]})),
            ("BeginTransaction", lambda _: _post(c, f"/v1/transactions/{tid}/begin", ident)),
            ("Send, transactional", lambda seq: _post(c, "/v1/records", {**ident, "transactional_id": tid, "batches": [
                {"topic": topic, "partition": 0, "base_sequence": seq, "records": records}]})),
            ("Commit", lambda _: _post(c, f"/v1/transactions/{tid}/commit", ident)),
        ]
        for r in range(rounds):
            for name, call in calls:
                t0 = time.perf_counter()
                call(r * BATCH)
                times[name].append((time.perf_counter() - t0) * 1000)
    return {name: statistics.median(v) for name, v in times.items()}


# --- the database's own limit -------------------------------------------------------------------


def raw_insert_rate(db_url: str, seconds: float) -> dict[str, float]:
    """The same rows, straight into `records` in 1,000-row transactions, no HTTP."""
    value = orjson.dumps(VALUE).decode()
    cols = '(topic_id, "partition", "offset", timestamp_ms, key, value, headers, producer_id, producer_epoch, sequence, txn_id)'
    rates = {}
    if db_url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(make_url(db_url).database, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        offset, n = 0, 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            rows = [(99999, 0, offset + i, 1, f"k{i}", value, None, None, None, None, None) for i in range(BATCH)]
            conn.execute("BEGIN")
            conn.executemany(f"INSERT INTO records {cols} VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
            conn.execute("COMMIT")
            offset += BATCH
            n += BATCH
        rates["executemany"] = n / (time.perf_counter() - t0)
        conn.execute("DELETE FROM records WHERE topic_id = 99999")
        conn.close()
        return rates
    import psycopg

    dsn = make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        for method in ("executemany", "copy"):
            offset, n = 0, 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                rows = [(99999, 0, offset + i, 1, f"k{i}", value, None, None, None, None, None) for i in range(BATCH)]
                with conn.transaction(), conn.cursor() as cur:
                    if method == "copy":
                        with cur.copy(f"COPY records {cols} FROM STDIN") as cp:
                            for r in rows:
                                cp.write_row(r)
                    else:
                        cur.executemany(f"INSERT INTO records {cols} VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", rows)
                offset += BATCH
                n += BATCH
            rates[method] = n / (time.perf_counter() - t0)
            with conn.transaction():
                conn.execute("DELETE FROM records WHERE topic_id = 99999")
    return rates


# --- one database ---------------------------------------------------------------------------------


def bench_database(kind: str, seconds: float, rounds: int = 1) -> list[Row]:
    rows: list[Row] = []
    cleanup: Callable[[], None] = lambda: None
    if kind == "sqlite":
        tmp = tempfile.mkdtemp(prefix="outbox-bench-")
        db_url = f"sqlite:///{tmp}/bench.db"
    else:
        # Not `name`: the loops below reuse that for row names, and cleanup() reads this late.
        db_name = f"outbox_bench_{uuid.uuid4().hex[:8]}"
        admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{db_name}"'))
        db_url = make_url(ADMIN_URL).set(database=db_name).render_as_string(hide_password=False)
        subprocess.run([sys.executable, "-m", "app.cli", "migrate"], cwd=ROOT, check=True,
                       env={**os.environ, "OUTBOX_DATABASE_URL": db_url}, capture_output=True)

        def cleanup() -> None:
            with admin.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)'))

    service = Service(db_url)
    try:
        url = service.url
        # The four producers take turns, `rounds` times, and each figure is the median of its
        # rounds: the log grows during the run and the machine's load drifts, and a producer
        # measured only after the others would pay for both.
        producers = [
            ("produce plain", "p-plain", "plain", None),
            ("produce idempotent", "p-idempotent", "idempotent", None),
            ("produce transactional (commit / 1,000)", "p-transactional", "transactional", None),
            ("produce transactional (commit / 100 ms)", "p-txn-100ms", "transactional", 100.0),
        ]
        # The database's own insert rate takes its turn in each round too (the service is idle
        # meanwhile), so that it meets the same log size and the same machine as the producers.
        # Each run writes a topic created just before it: records' primary key starts with the
        # topic id, so every run (and the raw insert, topic 99999) appends at the right edge of
        # the index, as a busy topic does, rather than into the middle of one grown by others.
        rates: dict[str, list[float]] = {name: [] for name, *_ in producers}
        for r in range(rounds):
            for name, topic, mode, commit_every_ms in producers:
                create_topic(url, f"{topic}-{r}", 1)
                n = produce(url, f"{topic}-{r}", mode=mode, seconds=seconds, tid=f"bench-{topic}",
                            commit_every_ms=commit_every_ms)
                rates[name].append(n / seconds)
            for method, rate in raw_insert_rate(db_url, seconds).items():
                rates.setdefault(f"raw insert, {method}, no HTTP", []).append(rate)
        for name in rates:
            spread = f"{min(rates[name]):,.0f}–{max(rates[name]):,.0f}"
            rows.append(Row(kind, name, statistics.median(rates[name]),
                            {"rounds": f"{len(rates[name])} ({spread})"} if rounds > 1 else {},
                            rates[name]))

        for isolation in ("read_uncommitted", "read_committed"):
            n, took = read_all(url, f"p-transactional-{rounds - 1}", isolation)
            rows.append(Row(kind, f"fetch {isolation}", n / took, {"records": str(n)}))

        create_topic(url, "latency", 1)
        lat = commit_to_visible(url, "latency", 200)
        q = statistics.quantiles(lat, n=100)
        rows.append(Row(kind, "commit → visible to read_committed", None,
                        {"p50 ms": f"{statistics.median(lat):.2f}", "p99 ms": f"{q[98]:.2f}"}))

        create_topic(url, "requests", 1)
        for name, ms in request_latencies(url, "requests", 100).items():
            rows.append(Row(kind, f"request: {name}", None, {"p50 ms": f"{ms:.2f}"}))

        for producers in (1, 4, 16):
            for partitions in (1, 16):
                topic = f"c-{producers}-{partitions}"
                create_topic(url, topic, partitions)
                n = concurrent(producers, lambda i, t=topic, parts=partitions: produce(
                    url, t, mode="plain", seconds=seconds, partition=i % parts))
                rows.append(Row(kind, f"plain, {producers} producers × {partitions} partitions", n / seconds))
    finally:
        service.stop()
    cleanup()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=4.0, help="duration of each throughput run")
    parser.add_argument("--rounds", type=int, default=5,
                        help="turns of the four single producers; each figure is the median of its rounds")
    args = parser.parse_args(argv)
    kinds = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    print(f"# {os.cpu_count()} cores; batches of {BATCH} records of {len(orjson.dumps(VALUE))} bytes; "
          f"{args.seconds:g} s per run; single producers: median of {args.rounds} interleaved rounds\n")
    for kind in kinds:
        rows = bench_database(kind, args.seconds, args.rounds)
        by = {r.name: r.records_per_s for r in rows}
        print(f"## {kind}\n")
        print("| path | records/s | notes |\n| --- | ---: | --- |")
        for r in rows:
            rate = f"{r.records_per_s:,.0f}" if r.records_per_s else ""
            print(f"| {r.name} | {rate} | {', '.join(f'{k} {v}' for k, v in r.extra.items())} |")
        raw_name = max((k for k, v in by.items() if k.startswith("raw insert") and v), key=lambda k: by[k])
        per_round = {r.name: r.per_round for r in rows}

        def ratio(label: str, a: str, b: str) -> None:
            """The ratio of the medians, and the same ratio within each round (runs next to each
            other), whose spread shows how far the machine's drift moves it."""
            line = f"| {label} | {by[a] / by[b]:.2f} |"
            if len(per_round.get(a, [])) > 1 and len(per_round[a]) == len(per_round.get(b, [])):
                paired = sorted(x / y for x, y in zip(per_round[a], per_round[b]))
                line += f" {paired[0]:.2f} / {statistics.median(paired):.2f} / {paired[-1]:.2f} |"
            else:
                line += " |"
            print(line)

        print("\n| ratio | value | within a round: min / median / max |\n| --- | ---: | ---: |")
        ratio("idempotent / plain", "produce idempotent", "produce plain")
        ratio("transactional (commit / 1,000) / plain", "produce transactional (commit / 1,000)", "produce plain")
        ratio("transactional (commit / 100 ms) / plain", "produce transactional (commit / 100 ms)", "produce plain")
        ratio("read_committed / read_uncommitted fetch", "fetch read_committed", "fetch read_uncommitted")
        ratio("plain produce over HTTP / best raw insert", "produce plain", raw_name)
        print()
        # What the per-request medians allow, whatever the database does: a transaction of
        # one Send pays Begin and Commit on top of its Send; a long one only the Send's extra.
        ms = {r.name.removeprefix("request: "): float(r.extra["p50 ms"]) for r in rows if r.name.startswith("request: ")}
        one = ms["Send, plain"] / (ms["BeginTransaction"] + ms["Send, transactional"] + ms["Commit"])
        print("| bound from the request medians | value |\n| --- | ---: |")
        print(f"| transactional ÷ plain, one Send per transaction: plain Send ÷ (Begin + Send + Commit) | {one:.2f} |")
        print(f"| transactional ÷ plain, long transactions: plain Send ÷ transactional Send | "
              f"{ms['Send, plain'] / ms['Send, transactional']:.2f} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
