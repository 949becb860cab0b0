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
import http.client
import os
import random
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
from typing import Self
from urllib.parse import urlencode

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
    turns: list[tuple[int, float]] = field(default_factory=list)  # (records, seconds) of each turn


# --- a service under test ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """`outbox serve` on `url`, from the source tree `root` (another checkout of the project
    for a before/after comparison: benchmarks/ab.py)."""

    def __init__(self, url: str, root: Path = ROOT, **settings: str) -> None:
        self.port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
        env.update({"OUTBOX_DATABASE_URL": url, "OUTBOX_LOG_LEVEL": "warning", **settings})
        # The tree's own `app` package first, whatever the venv's editable install points at.
        env["PYTHONPATH"] = str(root)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port)],
            cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the service process has used so far, from /proc."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class Client:
    """One keep-alive HTTP/1.1 connection to the service: the load generator's side of every run.

    The standard library's http.client by default (--client), as the leanest client this
    process can be: on 2 shared cores the client's CPU time comes off the service's, and
    httpx spends about 1 ms of it per request here (0.44 ms for http.client, both with the
    body's orjson.dumps; docs/benchmarks.md, session 6), a cost that a producer written in
    another language would not pay. `--client httpx` measures through httpx instead."""

    kind = "http.client"

    def __init__(self, url: str, timeout: float = 60, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = headers or {}  # e.g. Authorization, on every request
        if self.kind == "httpx":
            self._httpx: httpx.Client | None = httpx.Client(base_url=url, timeout=timeout)
        else:
            self._httpx = None
            host, port = url.removeprefix("http://").rsplit(":", 1)
            self._conn = http.client.HTTPConnection(host, int(port), timeout=timeout)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = {**self.headers, "content-type": "application/json"} if body is not None else self.headers
        if self._httpx is not None:
            r = self._httpx.request(method, path, content=body, headers=headers)
            return r.status_code, r.content
        self._conn.request(method, path, body=body, headers=headers)
        response = self._conn.getresponse()
        return response.status, response.read()

    def get_json(self, path: str, params: dict | None = None) -> dict:
        status, content = self.request("GET", path + ("?" + urlencode(params) if params else ""))
        if status != 200:
            raise RuntimeError(f"{path}: {status} {content[:300]!r}")
        return orjson.loads(content)

    def close(self) -> None:
        if self._httpx is not None:
            self._httpx.close()
        else:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _post(client: Client, path: str, body: dict | bytes) -> dict:
    status, content = client.request("POST", path, body if isinstance(body, bytes) else orjson.dumps(body))
    if status != 200 and status != 201:
        raise RuntimeError(f"{path}: {status} {content[:300]!r}")
    return orjson.loads(content)


def _init_producer(client: Client, tid: str | None) -> dict:
    """InitProducerId (transactional when `tid` is given): the producer_id and producer_epoch
    every later call of that producer carries."""
    p = _post(client, "/v1/producers", {} if tid is None else {"transactional_id": tid})
    return {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}


def _records(n: int) -> list[dict]:
    return [{"key": f"k{i}", "value": VALUE} for i in range(n)]


def _records_keyed_by_uuid(n: int) -> list[dict]:
    """Records as many producers write them: UUID keys, a timestamp in nanoseconds in the
    value. UUIDs look like long exponents to the Send's search for numbers that overflow a
    float (app.api.send_body), which then parses the body once more: this producer shows
    what that costs."""
    rng = random.Random(7)
    return [{"key": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
             "value": {**VALUE, "ts": 1_764_000_000_000_000_000 + rng.getrandbits(40)}} for _ in range(n)]


# --- producers ----------------------------------------------------------------------------------


class Producer:
    """A single producer: plain, idempotent or transactional (a Commit after every Send, or
    after every `commit_every_ms`). It keeps its connection and its producer_id and epoch from
    turn to turn, as a long-lived producer does; each turn writes one partition of a topic of
    its own, whose sequences start at 0."""

    def __init__(self, url: str, mode: str, tid: str | None = None,
                 commit_every_ms: float | None = None, records: list[dict] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        self.client = Client(url, headers=headers)
        self.mode, self.tid, self.commit_every_ms = mode, tid, commit_every_ms
        self.ident: dict = {}
        if mode != "plain":
            self.ident = _init_producer(self.client, tid if mode == "transactional" else None)
        self.records = _records(BATCH) if records is None else records

    def turn(self, topic: str, seconds: float, partition: int = 0) -> tuple[int, float]:
        """Produce for about `seconds`, whole transactions only; returns (records written,
        seconds it took), the time of its last transaction included."""
        c, ident, tid = self.client, self.ident, self.tid
        written, seq = 0, 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            if self.mode == "transactional":
                _post(c, f"/v1/transactions/{tid}/begin", ident)
            txn_started = time.perf_counter()
            while True:
                body: dict = {"batches": [{"topic": topic, "partition": partition, "records": self.records}]}
                if self.mode != "plain":
                    body.update(ident)
                    body["batches"][0]["base_sequence"] = seq
                    seq += BATCH
                if self.mode == "transactional":
                    body["transactional_id"] = tid
                _post(c, "/v1/records", body)
                written += BATCH
                if self.commit_every_ms is None or (time.perf_counter() - txn_started) * 1000 >= self.commit_every_ms:
                    break
            if self.mode == "transactional":
                _post(c, f"/v1/transactions/{tid}/commit", ident)
        return written, time.perf_counter() - t0

    def close(self) -> None:
        self.client.close()


def produce(url: str, topic: str, *, mode: str, seconds: float, partition: int = 0) -> int:
    """A new producer for one turn of `seconds`; returns records written."""
    producer = Producer(url, mode)
    try:
        return producer.turn(topic, seconds, partition)[0]
    finally:
        producer.close()


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
    with Client(url) as c:
        _post(c, "/v1/topics", {"name": name, "partitions": partitions})


# --- reads and latency ----------------------------------------------------------------------------


def read_all(url: str, topic: str, isolation: str) -> tuple[int, float]:
    n, offset = 0, 0
    t0 = time.perf_counter()
    with Client(url) as c:
        while True:
            page = c.get_json(f"/v1/topics/{topic}/partitions/0/records",
                              {"offset": offset, "isolation": isolation, "max_records": 5000})
            n += len(page["records"])
            if page["next_offset"] >= page["high_watermark"]:
                break
            offset = page["next_offset"]
    return n, time.perf_counter() - t0


def commit_to_visible(url: str, topic: str, rounds: int) -> list[float]:
    """ms from Commit answered to the records returned by a read_committed fetch."""
    tid = f"lat-{uuid.uuid4().hex[:8]}"
    out = []
    with Client(url) as c:
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
                page = c.get_json(f"/v1/topics/{topic}/partitions/0/records",
                                  {"offset": position, "max_records": 100})
                position = page["next_offset"]
                if page["records"]:
                    break
            out.append((time.perf_counter() - t0) * 1000)
    return out


def request_latencies(url: str, topic: str, rounds: int) -> dict[str, float]:
    """Median ms of each request of a two-Send transaction, next to a plain Send and a request
    that does no work, taking turns: what a transaction costs on top of its records. The first
    Send of a transaction adds the partition to it; a later one, the kind that fills a long
    transaction, finds it there."""
    tid = f"req-{uuid.uuid4().hex[:8]}"
    names = ("GET /healthz", "Send, plain", "BeginTransaction", "Send, transactional, first",
             "Send, transactional, later", "Commit")
    times: dict[str, list[float]] = {k: [] for k in names}
    records = _records(BATCH)
    seq = 0
    with Client(url) as c:
        ident = _init_producer(c, tid)

        def send_txn() -> None:
            nonlocal seq
            _post(c, "/v1/records", {**ident, "transactional_id": tid, "batches": [
                {"topic": topic, "partition": 0, "base_sequence": seq, "records": records}]})
            seq += BATCH

        calls: list[tuple[str, Callable[[], object]]] = [
            ("GET /healthz", lambda: c.request("GET", "/healthz")),
            ("Send, plain", lambda: _post(c, "/v1/records", {"batches": [
                {"topic": topic, "partition": 0, "records": records}]})),
            ("BeginTransaction", lambda: _post(c, f"/v1/transactions/{tid}/begin", ident)),
            ("Send, transactional, first", send_txn),
            ("Send, transactional, later", send_txn),
            ("Commit", lambda: _post(c, f"/v1/transactions/{tid}/commit", ident)),
        ]
        for _ in range(rounds):
            for name, call in calls:
                t0 = time.perf_counter()
                call()
                times[name].append((time.perf_counter() - t0) * 1000)
    return {name: statistics.median(v) for name, v in times.items()}


def request_bounds(ms: dict[str, float], commit_every_ms: float = 100.0) -> list[tuple[str, float]]:
    """What the per-request medians predict for transactional ÷ plain, whatever the database
    does between requests: per transaction, Begin and Commit and the first Send's extra over a
    later one are paid once, and every Send pays a later Send's extra over a plain one."""
    plain, first, later = ms["Send, plain"], ms["Send, transactional, first"], ms["Send, transactional, later"]
    per_txn = ms["BeginTransaction"] + ms["Commit"] + first - later
    sends = max(1.0, commit_every_ms / later)  # Sends in a transaction committed every commit_every_ms
    return [
        ("one Send per transaction: plain Send ÷ (Begin + first Send + Commit)",
         plain / (ms["BeginTransaction"] + first + ms["Commit"])),
        (f"commit / {commit_every_ms:g} ms ({sends:.1f} Sends): plain Send ÷ (later Send + (Begin + Commit + first − later) ÷ Sends)",
         plain / (later + per_txn / sends)),
        ("endless transactions: plain Send ÷ later Send", plain / later),
    ]


# --- the database's own limit -------------------------------------------------------------------


class RawInserter:
    """The database's own limit: the same rows as a plain Send, inserted straight into
    `records` by the driver in 1,000-row transactions, no HTTP, no service (idle meanwhile).
    It takes turns like a producer, into a topic created through the service for the turn, so
    that its rows land where a producer's would (records' primary key starts with topic_id);
    nothing reads them, so the partition's log end is left alone."""

    COLUMNS = '(topic_id, "partition", "offset", timestamp_ms, key, value, headers, producer_id, producer_epoch, sequence, txn_id)'

    def __init__(self, db_url: str) -> None:
        self.value = orjson.dumps(VALUE).decode()
        self.sqlite = db_url.startswith("sqlite")
        if self.sqlite:
            import sqlite3

            self.conn = sqlite3.connect(make_url(db_url).database, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")  # the service's default
            self.methods: tuple[str, ...] = ("executemany",)
        else:
            import psycopg

            self.conn = psycopg.connect(make_url(db_url).set(drivername="postgresql")
                                        .render_as_string(hide_password=False), autocommit=True)
            self.methods = ("executemany", "copy")

    def topic_id(self, topic: str) -> int:
        mark = "?" if self.sqlite else "%s"
        return self.conn.execute(f"SELECT topic_id FROM topics WHERE name = {mark}", (topic,)).fetchone()[0]

    def turn(self, method: str, topic_id: int, seconds: float) -> tuple[int, float]:
        conn, offset = self.conn, 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            rows = [(topic_id, 0, offset + i, 1, f"k{i}", self.value, None, None, None, None, None) for i in range(BATCH)]
            if self.sqlite:
                conn.execute("BEGIN")
                conn.executemany(f"INSERT INTO records {self.COLUMNS} VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
                conn.execute("COMMIT")
            else:
                with conn.transaction(), conn.cursor() as cur:
                    if method == "copy":
                        with cur.copy(f"COPY records {self.COLUMNS} FROM STDIN") as cp:
                            for row in rows:
                                cp.write_row(row)
                    else:
                        cur.executemany(f"INSERT INTO records {self.COLUMNS} VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", rows)
            offset += BATCH
        return offset, time.perf_counter() - t0

    def close(self) -> None:
        self.conn.close()


# --- one database ---------------------------------------------------------------------------------


def bench_database(kind: str, seconds: float, rounds: int, turn_seconds: float) -> list[Row]:
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
        # The single producers and the database's own insert take short turns, one after the
        # other, `rounds` times, and each figure is the total of its turns: records ÷ seconds.
        # The machine's speed drifts by tens of percent over seconds here (docs/benchmarks.md),
        # so a path measured in one long run of its own would be compared with its neighbours
        # under a different machine; in turns of half a second, every path meets the same
        # drift. Each turn writes a topic created just before it: records' primary key starts
        # with the topic id, so every turn appends at the right edge of the index, as a busy
        # topic does, rather than into the middle of one that other turns have grown since.
        paths: dict[str, tuple[str, Callable[[str], tuple[int, float]]]] = {}
        producers = [
            ("produce plain", "p-plain", Producer(url, "plain")),
            ("produce plain, UUID keys and ns timestamps", "p-plain-uuid",
             Producer(url, "plain", records=_records_keyed_by_uuid(BATCH))),
            ("produce idempotent", "p-idempotent", Producer(url, "idempotent")),
            ("produce transactional (commit / 1,000)", "p-txn-1000",
             Producer(url, "transactional", "bench-txn-1000")),
            ("produce transactional (commit / 100 ms)", "p-txn-100ms",
             Producer(url, "transactional", "bench-txn-100ms", commit_every_ms=100.0)),
        ]
        for name, slug, producer in producers:
            paths[name] = (slug, lambda topic, p=producer: p.turn(topic, turn_seconds))
        raw = RawInserter(db_url)
        for method in raw.methods:
            paths[f"raw insert, {method}, no HTTP"] = (
                f"raw-{method}", lambda topic, m=method: raw.turn(m, raw.topic_id(topic), turn_seconds))
        turns: dict[str, list[tuple[int, float]]] = {name: [] for name in paths}
        for r in range(rounds):
            for name, (slug, turn) in paths.items():
                create_topic(url, f"{slug}-{r}", 1)
                turns[name].append(turn(f"{slug}-{r}"))
        for _, _, producer in producers:
            producer.close()
        raw.close()
        for name, done in turns.items():
            per_turn = [n / took for n, took in done]
            rows.append(Row(kind, name, sum(n for n, _ in done) / sum(took for _, took in done),
                            {"turns": f"{len(done)} ({min(per_turn):,.0f}–{max(per_turn):,.0f})"},
                            done))

        # read_committed against read_uncommitted fetch of the same records: transactions of
        # one Send, as the commit / 1,000 producer writes them.
        create_topic(url, "fetch", 1)
        produce_txn = Producer(url, "transactional", "bench-fetch")
        produce_txn.turn("fetch", seconds)
        produce_txn.close()
        for isolation in ("read_uncommitted", "read_committed"):
            n, took = read_all(url, "fetch", isolation)
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


def ratio_line(label: str, value: float, a: list[tuple[int, float]], b: list[tuple[int, float]]) -> str:
    """A table row: the ratio of the totals, and the same ratio over each quarter of the rounds
    (from the turns of `a` and `b`), whose spread is how far the machine's drift still moves it."""
    line = f"| {label} | {value:.2f} |"
    if len(a) < 4 or len(a) != len(b):
        return line + " |"
    q = len(a) // 4

    def rate(turns: list[tuple[int, float]]) -> float:
        return sum(n for n, _ in turns) / sum(took for _, took in turns)

    quarters = sorted(rate(a[i:i + q]) / rate(b[i:i + q]) for i in range(0, 4 * q, q))
    return line + f" {quarters[0]:.2f}–{quarters[-1]:.2f} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=20,
                        help="turns of each single producer and of the raw insert, taken in rotation")
    parser.add_argument("--turn-seconds", type=float, default=0.5, help="duration of each such turn")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="duration of each concurrent run (1/4/16 producers)")
    parser.add_argument("--client", choices=["http.client", "httpx"], default="http.client",
                        help="the load generator's HTTP client (see Client)")
    args = parser.parse_args(argv)
    Client.kind = args.client
    kinds = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    print(f"# {os.cpu_count()} cores; batches of {BATCH} records of {len(orjson.dumps(VALUE))} bytes; "
          f"single producers and raw insert: {args.rounds} turns of {args.turn_seconds:g} s each, in rotation; "
          f"concurrent runs {args.seconds:g} s; client {args.client}\n")
    for kind in kinds:
        rows = bench_database(kind, args.seconds, args.rounds, args.turn_seconds)
        by = {r.name: r.records_per_s for r in rows}
        print(f"## {kind}\n")
        print("| path | records/s | notes |\n| --- | ---: | --- |")
        for r in rows:
            rate = f"{r.records_per_s:,.0f}" if r.records_per_s else ""
            print(f"| {r.name} | {rate} | {', '.join(f'{k} {v}' for k, v in r.extra.items())} |")
        raw_name = max((k for k, v in by.items() if k.startswith("raw insert") and v), key=lambda k: by[k])
        turns = {r.name: r.turns for r in rows}

        print("\n| ratio | value | in each quarter of the rounds |\n| --- | ---: | ---: |")
        for label, a, b in (
            ("idempotent / plain", "produce idempotent", "produce plain"),
            ("transactional (commit / 1,000) / plain", "produce transactional (commit / 1,000)", "produce plain"),
            ("transactional (commit / 100 ms) / plain", "produce transactional (commit / 100 ms)", "produce plain"),
            ("read_committed / read_uncommitted fetch", "fetch read_committed", "fetch read_uncommitted"),
            ("plain produce over HTTP / best raw insert", "produce plain", raw_name),
            ("plain, UUID keys and ns timestamps / plain", "produce plain, UUID keys and ns timestamps",
             "produce plain"),
        ):
            print(ratio_line(label, by[a] / by[b], turns.get(a, []), turns.get(b, [])))
        print()
        ms = {r.name.removeprefix("request: "): float(r.extra["p50 ms"]) for r in rows if r.name.startswith("request: ")}
        print("| transactional ÷ plain, predicted from the request medians | value |\n| --- | ---: |")
        for label, value in request_bounds(ms):
            print(f"| {label} | {value:.2f} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
