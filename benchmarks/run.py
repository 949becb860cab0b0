"""Throughput and latency of the service next to what the database itself can insert, and next to
the PostgreSQL queues users would pick instead.

    .venv/bin/python benchmarks/run.py                 # SQLite and PostgreSQL
    .venv/bin/python benchmarks/run.py --db postgresql --rounds 8 --pgmq-sql /path/to/pgmq.sql

Starts a real `outbox serve` process per database (a fresh SQLite file; a fresh PostgreSQL
database on OUTBOX_BENCH_POSTGRES_URL, default the local server) and drives it over HTTP
from this process. Client, service and database share the machine, as they do here (2 cores):
the figures are for comparing paths with each other in one run, not absolute capacity.
Every figure is measured in the run that prints it; nothing is hard-coded.

What each row measures, and what it leaves out, is said where it is measured (the waiting-readers work: a
benchmark that cannot flatter):

- every path of the rotation (producers, fetches, the database's own insert, the peers) takes
  `--rounds` turns in an order shuffled afresh each round, from a seed that is printed;
- the reference, the database's own insert, sends rows encoded before its clock starts;
- the peers, on PostgreSQL: pgqueuer (installed from PyPI, the `bench` extra) and PGMQ (its
  plain SQL install file, given with `--pgmq-sql`; not part of this repository), each driven
  as its best client would (Pgmq, PgQueuer say how), and beside them, unless `--no-old-peers`,
  driven as before (Python lists adapted by psycopg): the driver's share of the old figures.
  A peer's client CPU per record is checked against its database's, with a warning where the
  driver's is not small beside it;
- the target against PGMQ, printed with its parts: a plain Send's CPU per record in client,
  service and database together against send_batch's, and one client's throughput against it;
- CPU per record is read per process: the service's (from /proc/<pid>/stat), this client's
  (time.process_time) and, on PostgreSQL, the database backends' serving the scratch database
  (from /proc/<backend pid>/stat; PostgreSQL's own background processes are left out).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Self, TypeVar
from urllib.parse import urlencode

import httpx
import orjson
from sqlalchemy.engine import make_url

from scratch import scratch_database  # beside this file

ROOT = Path(__file__).resolve().parents[1]
BATCH = 1_000
VALUE = {"order_id": 123456, "meal": "Pizza", "value": 12.5, "customer": "c-000042", "note": "extra cheese"}
POLL_PAUSE_S = 0.05  # the Python client's pause between empty polls before it long-polled (benchmarks/waiting.py)
CLK_TCK = os.sysconf("SC_CLK_TCK")


Turn = tuple[int, float]  # (records, seconds) of one turn
T = TypeVar("T")


@dataclass
class Cpu:
    """CPU seconds used during some turns, per process: the service, this client, the database
    backends of the scratch database (None where there are none to read: SQLite runs in the
    service's process, or in this one for the raw insert)."""

    service: float = 0.0
    client: float = 0.0
    database: float | None = None

    def add(self, other: Cpu) -> None:
        self.service += other.service
        self.client += other.client
        if other.database is not None:
            self.database = (self.database or 0.0) + other.database


@dataclass
class Row:
    db: str
    name: str
    records_per_s: float | None = None
    extra: dict[str, str] = field(default_factory=dict)
    turns: list[Turn] = field(default_factory=list)
    cpu: Cpu | None = None
    records: int = 0
    service_cpu: bool = True  # whether the service's CPU belongs to this path (not a peer's)
    cpu_turns: list[Cpu] = field(default_factory=list)  # each turn's, in the order of `turns`
    peer: bool = False  # a queue users would pick instead, driven from this process


# --- a service under test ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_cpu(pid: int) -> float:
    """CPU time (user + system) process `pid` has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Service:
    """`outbox serve` on `url`, from the source tree `root` (another checkout of the project
    for a before/after comparison: benchmarks/ab.py)."""

    def __init__(self, url: str, root: Path = ROOT, python: str = sys.executable, **settings: str) -> None:
        """`python`: the interpreter to run it with (another tree's own venv)."""
        self.port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
        env.update({"OUTBOX_DATABASE_URL": url, "OUTBOX_LOG_LEVEL": "warning", **settings})
        # The tree's own `app` package first (cwd too: `-m` puts it first on sys.path), whatever
        # the venv's editable install points at.
        env["PYTHONPATH"] = str(root)
        self._start([python, "-m", "app.cli", "serve", "--port", str(self.port)], root, env)

    def _start(self, command: list[str], cwd: Path, env: dict[str, str]) -> None:
        """Run `command`, a server on self.port, and wait until its /healthz answers 200."""
        self.proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                # /healthz, not /readyz: an older tree's service (ab.py's "before") runs on the
                # newer tree's schema, which its /readyz calls not migrated.
                if httpx.get(f"{self.url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("service did not start")
            time.sleep(0.1)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the service process has used so far, from /proc."""
        return _proc_cpu(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
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

    # The service closes a keep-alive connection left idle for OUTBOX_HTTP_KEEP_ALIVE_TIMEOUT_S
    # (uvicorn's 5 s by default). A producer waits while every other path takes its turn, so
    # with turns of more than ~0.8 s its next request went out on a connection the service had
    # closed and the run died (RemoteDisconnected). A connection idle for longer than this is
    # reopened before the request, as a long-lived producer's client would: one TCP connect on
    # loopback per turn, a fraction of a millisecond in a turn of half a second or more.
    IDLE_REOPEN_S = 3.0

    def __init__(self, url: str, timeout: float = 60, headers: dict[str, str] | None = None) -> None:
        self.url, self.timeout = url, timeout
        self.headers = headers or {}  # e.g. Authorization, on every request
        self._used = time.monotonic()
        self._httpx: httpx.Client | None = None
        if self.kind == "httpx":
            self._httpx = httpx.Client(base_url=url, timeout=timeout)
        else:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            self._conn = http.client.HTTPConnection(host, int(port), timeout=timeout)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = {**self.headers, "content-type": "application/json"} if body is not None else self.headers
        reopen = time.monotonic() - self._used > self.IDLE_REOPEN_S
        try:
            if self._httpx is not None:
                if reopen:
                    self._httpx.close()
                    self._httpx = httpx.Client(base_url=self.url, timeout=self.timeout)
                r = self._httpx.request(method, path, content=body, headers=headers)
                return r.status_code, r.content
            if reopen:
                self._conn.close()  # http.client connects again on the next request
            self._conn.request(method, path, body=body, headers=headers)
            response = self._conn.getresponse()
            return response.status, response.read()
        finally:
            self._used = time.monotonic()  # from the answer: a long poll's wait is not idleness

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


def _init_producer(client: Client, tid: str | None, transaction_version: int = 1,
                   durability: str | None = None) -> dict:
    """InitProducerId (transactional when `tid` is given, speaking `transaction_version`, with
    `durability` when given): the producer_id and producer_epoch every later call of that
    producer carries (under version 2, until its next Commit answers the next epoch)."""
    body = {} if tid is None else {"transactional_id": tid, "transaction_version": transaction_version}
    if durability is not None:
        body["durability"] = durability
    p = _post(client, "/v1/producers", body)
    return {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}


def _ident_after(answer: dict) -> dict:
    """The producer_id and epoch a Commit or Abort answered: the next ones under version 2."""
    return {"producer_id": answer["producer_id"], "producer_epoch": answer["producer_epoch"]}


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
    after every `commit_every_ms`), speaking transaction protocol `transaction_version` (1:
    BeginTransaction before each transaction; 2: none, and each Commit answers the next epoch,
    whose sequences start at 0). It keeps its connection and its producer_id and epoch from
    turn to turn, as a long-lived producer does; each turn writes one partition of a topic of
    its own, whose sequences start at 0."""

    def __init__(self, url: str, mode: str, tid: str | None = None,
                 commit_every_ms: float | None = None, records: list[dict] | None = None,
                 headers: dict[str, str] | None = None, transaction_version: int = 1,
                 commit_carries_last_send: bool = False, durability: str | None = None) -> None:
        self.client = Client(url, headers=headers)
        self.mode, self.tid, self.commit_every_ms = mode, tid, commit_every_ms
        self.transaction_version = transaction_version
        # Version 2: each transaction's last batch is sent in its Commit's body.
        self.commit_carries_last_send = commit_carries_last_send
        # "commit": Sends answered before they are durable; each Commit carries the records
        # acknowledged in its transaction (acknowledged_records), as app.client.producer does.
        self.durability = durability
        self.ident: dict = {}
        if mode != "plain":
            self.ident = _init_producer(self.client, tid if mode == "transactional" else None, transaction_version,
                                        durability)
        self.records = _records(BATCH) if records is None else records

    def turn(self, topic: str, seconds: float, partition: int = 0,
             finished: list[float] | None = None) -> Turn:
        """Produce for about `seconds`, whole transactions only; returns (records written,
        seconds it took), the time of its last transaction included. `finished`, if given,
        gets the perf_counter() at which each Send's answer came."""
        c, tid = self.client, self.tid
        written, seq = 0, 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            ident = self.ident
            if self.mode == "transactional" and self.transaction_version == 1:
                _post(c, f"/v1/transactions/{tid}/begin", ident)
            txn_started = time.perf_counter()
            acknowledged = 0
            while True:
                body: dict = {"batches": [{"topic": topic, "partition": partition, "records": self.records}]}
                if self.mode != "plain":
                    body.update(ident)
                    body["batches"][0]["base_sequence"] = seq
                    seq += BATCH
                due = self.commit_every_ms is None or (time.perf_counter() - txn_started) * 1000 >= self.commit_every_ms
                if self.mode == "transactional" and self.commit_carries_last_send and due:
                    # The transaction's last batch goes with its Commit: one request, one write.
                    if self.durability == "commit":
                        body["acknowledged_records"] = acknowledged + BATCH
                    self.ident, seq = _ident_after(_post(c, f"/v1/transactions/{tid}/commit", body)), 0
                    written += BATCH
                    break
                if self.mode == "transactional":
                    body["transactional_id"] = tid
                _post(c, "/v1/records", body)
                written += BATCH
                acknowledged += BATCH
                if finished is not None:
                    finished.append(time.perf_counter())
                if self.commit_carries_last_send:
                    continue  # committed with the next batch, once due
                if due or (time.perf_counter() - txn_started) * 1000 >= self.commit_every_ms:  # type: ignore[operator]
                    break
            if self.mode == "transactional" and not self.commit_carries_last_send:
                ended = _post(c, f"/v1/transactions/{tid}/commit",
                              {**ident, "acknowledged_records": acknowledged} if self.durability == "commit" else ident)
                if self.transaction_version == 2:
                    self.ident, seq = _ident_after(ended), 0
        return written, time.perf_counter() - t0

    def close(self) -> None:
        self.client.close()


@dataclass
class ConcurrentRun:
    records: int  # every record written, the last Sends' included
    span: float  # seconds from the common start to the last Send's answer
    in_window: int  # records of Sends answered within the nominal `seconds`
    seconds: float  # the nominal duration


def concurrent_plain(url: str, topic: str, producers: int, partitions: int, seconds: float) -> ConcurrentRun:
    """`producers` plain producers on `partitions` partitions for `seconds`, started together.

    Before the waiting-readers work this divided every record written by the nominal `seconds`, though each
    producer's last Send (started before the deadline) is answered after it: at 16 producers
    whose Sends queue up behind each other, that is up to 16 Sends' worth of records in a few
    seconds. The rate is now every record ÷ the real span, from the common start to the last
    answer; the Sends answered within the nominal window are counted too, for the notes."""
    # Made before the start; http.client connects at the first Send (a loopback connect).
    clients = [Producer(url, "plain") for _ in range(producers)]
    finished: list[list[float]] = [[] for _ in range(producers)]
    written = [0] * producers
    failed: list[BaseException] = []
    start = threading.Barrier(producers + 1)

    def run(i: int) -> None:
        start.wait()
        try:
            written[i] = clients[i].turn(topic, seconds, i % partitions, finished[i])[0]
        except BaseException as e:  # noqa: BLE001 - raised below: a lost producer is no figure
            failed.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
    try:
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
    finally:
        for c in clients:
            c.close()
    if failed:
        raise RuntimeError(f"{len(failed)} of {producers} producers failed") from failed[0]
    ends = [t for f in finished for t in f]
    return ConcurrentRun(sum(written), max(ends) - t0, BATCH * sum(1 for t in ends if t <= t0 + seconds), seconds)


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


class Reader:
    """A consumer of one partition that takes turns like a producer: it fetches pages of 5,000
    for `seconds`, starting over from offset 0 at the end of the log, so every turn reads the
    same records however many turns there are."""

    def __init__(self, url: str, topic: str, isolation: str) -> None:
        self.client = Client(url)
        self.path = f"/v1/topics/{topic}/partitions/0/records"
        self.isolation, self.offset = isolation, 0

    def turn(self, seconds: float) -> Turn:
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            page = self.client.get_json(self.path, {"offset": self.offset, "isolation": self.isolation,
                                                    "max_records": 5000})
            n += len(page["records"])
            self.offset = 0 if page["next_offset"] >= page["high_watermark"] else page["next_offset"]
        return n, time.perf_counter() - t0

    def close(self) -> None:
        self.client.close()


def commit_then_get(url: str, topic: str, rounds: int) -> list[float]:
    """The row before the waiting-readers work: ms from a Commit answered to the records returned by the next
    read_committed fetch, sent by the same client after it. The commit is done before the
    clock starts, so this is one GET's time: it cannot show a visibility lag."""
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


def commit_to_visible(url: str, topic: str, samples: int, mode: str,
                      transaction_version: int = 1) -> tuple[list[float], list[float]]:
    """(ms from just before a Commit is sent to its records in a read_committed consumer's hands,
    ms each Commit took), for a consumer in another thread that long-polls (`mode` "long-poll",
    max_wait_ms 5000) or polls with the old client's pause after an empty answer ("poll").

    A transactional producer sends 10 records, waits, then commits, every 20-40 ms, so the
    consumer is waiting when the commit comes: what is measured is how soon a commit becomes
    visible to a consumer already there, the Commit's own time included, as an application
    sees it. Each transaction's records carry its number, so a page maps back to its commit."""
    tid = f"lat-{mode}-{uuid.uuid4().hex[:8]}"
    committing: dict[int, float] = {}
    commit_ms: list[float] = []
    got: list[float] = []
    failed: list[BaseException] = []

    def consume() -> None:
        position = 0
        try:
            with Client(url) as c:
                while len(got) < samples:
                    params: dict = {"offset": position, "max_records": 1000, "isolation": "read_committed"}
                    if mode == "long-poll":
                        params["max_wait_ms"] = 5000
                    page = c.get_json(f"/v1/topics/{topic}/partitions/0/records", params)
                    now = time.perf_counter()
                    for n in sorted({r["value"]["txn"] for r in page["records"]}):
                        got.append((now - committing[n]) * 1000)
                    position = page["next_offset"]
                    if not page["records"] and mode == "poll":
                        time.sleep(POLL_PAUSE_S)
        except BaseException as e:  # noqa: BLE001 - reported by the producer's side
            failed.append(e)

    consumer = threading.Thread(target=consume, daemon=True)  # a failed producer must not leave it polling
    consumer.start()
    rng = random.Random(11)
    with Client(url) as c:
        ident = _init_producer(c, tid, transaction_version)
        seq = 0
        for n in range(samples):
            if failed:
                break
            if transaction_version == 1:
                _post(c, f"/v1/transactions/{tid}/begin", ident)
            _post(c, "/v1/records", {**ident, "transactional_id": tid, "batches": [
                {"topic": topic, "partition": 0, "base_sequence": seq,
                 "records": [{"key": f"k{i}", "value": {"txn": n, **VALUE}} for i in range(10)]}]})
            seq += 10
            time.sleep(rng.uniform(0.02, 0.04))  # the consumer is waiting again by now
            committing[n] = time.perf_counter()
            ended = _post(c, f"/v1/transactions/{tid}/commit", ident)
            commit_ms.append((time.perf_counter() - committing[n]) * 1000)
            if transaction_version == 2:
                ident, seq = _ident_after(ended), 0
    consumer.join(30)
    if failed:
        raise RuntimeError("the consumer failed") from failed[0]
    return got, commit_ms


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


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


def _psycopg_url(db_url: str) -> str:
    return make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)


def _copy_text(field: object) -> str:
    """One field in COPY's text format."""
    if field is None:
        return "\\N"
    return str(field).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


class RawInserter:
    """The database's own limit: the same rows as a plain Send, inserted straight into
    `records` by the driver in 1,000-row transactions, no HTTP, no service (idle meanwhile).
    It takes turns like a producer, into a topic created through the service for the turn, so
    that its rows land where a producer's would (records' primary key starts with topic_id);
    nothing reads them, so the partition's log end is left alone.

    The rows are made before the clock starts: tuples for executemany, and for COPY the bytes
    of COPY's text format, written in one piece per batch. Until the waiting-readers work the rows were built
    in Python inside the timed loop, and COPY wrote them row by row (write_row), which cost
    the reference about 15 %: the service's ratio to it read that much high. The old way is
    still here as the method "copy, rows built in the loop" (SQLite: "executemany, …"), to
    show the difference in one run.
    """

    COLUMNS = '(topic_id, "partition", "offset", timestamp_ms, key, value, headers)'
    OLD = ", rows built in the loop"  # after the method's name: the way before the waiting-readers work

    def __init__(self, db_url: str) -> None:
        self.value = orjson.dumps(VALUE).decode()
        self.sqlite = db_url.startswith("sqlite")
        # Batch b's rows, without the topic (the first column, which changes every turn), made
        # once and reused by every turn, whose topic starts at offset 0.
        self._rows: list[list[tuple]] = []
        self._copy: list[bytes] = []
        if self.sqlite:
            import sqlite3

            self.conn = sqlite3.connect(make_url(db_url).database, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")  # the service's default
            self.methods: tuple[str, ...] = ("executemany",)
        else:
            import psycopg

            self.conn = psycopg.connect(_psycopg_url(db_url), autocommit=True)
            self.methods = ("executemany", "copy")  # the last, the best: benchmarks/ab.py's reference

    def topic_id(self, topic: str) -> int:
        mark = "?" if self.sqlite else "%s"
        return self.conn.execute(f"SELECT topic_id FROM topics WHERE name = {mark}", (topic,)).fetchone()[0]

    def _grow(self, batches: int) -> None:
        while len(self._rows) < batches:
            base = len(self._rows) * BATCH
            rows = [(0, base + i, 1, f"k{i}", self.value, None) for i in range(BATCH)]
            self._rows.append(rows)
            # "\t" + the rest of the line: the topic goes in front of each line, per turn.
            self._copy.append("".join("\t" + "\t".join(map(_copy_text, row)) + "\n" for row in rows).encode())

    def _prepared(self, method: str, topic_id: int, start: int, count: int) -> list:
        """Batches start … start + count - 1 of a turn into `topic_id`, ready to send."""
        self._grow(start + count)
        if method == "copy":
            tid = str(topic_id).encode()
            # bytes.replace runs in C: a batch costs microseconds here, outside the clock.
            return [tid + b[:-1].replace(b"\n", b"\n" + tid) + b"\n" for b in self._copy[start:start + count]]
        return [[(topic_id, *row) for row in rows] for rows in self._rows[start:start + count]]

    def turn(self, method: str, topic_id: int, seconds: float) -> Turn:
        """Insert batches for `seconds` of insert time; returns (records, seconds inserting)."""
        return self.prepare(method, topic_id, seconds)()

    def prepare(self, method: str, topic_id: int, seconds: float) -> Callable[[], Turn]:
        """A turn's batches, made now, as many as the last turn of this method used and half as
        many again, and the turn that inserts them: its clock runs only around each batch's
        transaction, and if it runs out of batches, more are made with the clock stopped."""
        if method.endswith(self.OLD):
            return lambda: self._turn_building_rows(topic_id, seconds)
        batches = self._prepared(method, topic_id, 0, getattr(self, f"_expected_{method}", 50))
        return lambda: self._insert(method, topic_id, seconds, batches)

    def _insert(self, method: str, topic_id: int, seconds: float, batches: list) -> Turn:
        conn, elapsed, done = self.conn, 0.0, 0
        insert = f"INSERT INTO records {self.COLUMNS} VALUES ({', '.join(['?' if self.sqlite else '%s'] * 7)})"
        while elapsed < seconds:
            if done == len(batches):
                batches += self._prepared(method, topic_id, done, max(10, done // 2))
            batch = batches[done]
            t0 = time.perf_counter()
            if self.sqlite:
                conn.execute("BEGIN")
                conn.executemany(insert, batch)
                conn.execute("COMMIT")
            else:
                with conn.transaction(), conn.cursor() as cur:
                    if method == "copy":
                        with cur.copy(f"COPY records {self.COLUMNS} FROM STDIN") as cp:
                            cp.write(batch)
                    else:
                        cur.executemany(insert, batch)
            elapsed += time.perf_counter() - t0
            done += 1
        setattr(self, f"_expected_{method}", done + done // 2)
        return done * BATCH, elapsed

    def _turn_building_rows(self, topic_id: int, seconds: float) -> Turn:
        """The best method as run.py ran it before the waiting-readers work, rows built on the clock: SQLite's
        executemany, PostgreSQL's COPY writing them one by one."""
        conn, offset = self.conn, 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            rows = [(topic_id, 0, offset + i, 1, f"k{i}", self.value, None) for i in range(BATCH)]
            if self.sqlite:
                conn.execute("BEGIN")
                conn.executemany(f"INSERT INTO records {self.COLUMNS} VALUES (?,?,?,?,?,?,?)", rows)
                conn.execute("COMMIT")
                offset += BATCH
                continue
            with conn.transaction(), conn.cursor() as cur:
                with cur.copy(f"COPY records {self.COLUMNS} FROM STDIN") as cp:
                    for row in rows:
                        cp.write_row(row)
            offset += BATCH
        return offset, time.perf_counter() - t0

    def close(self) -> None:
        self.conn.close()


# --- peers: what users would pick instead (PostgreSQL only) ---------------------------------------


class Pgmq:
    """PGMQ installed from its plain SQL file into the scratch database (schema `pgmq`), one
    queue, driven by psycopg from this process: `pgmq.send_batch` of the same 1,000 values a
    Send carries, and a consumer's loop: `pgmq.read` of 1,000 at a time (a visibility timeout
    of an hour), then `pgmq.delete` of those ids, as a consumer that is done with them does.
    Without the delete, read messages would stay in the queue ahead of the unread ones (read
    takes the lowest ids whose visibility time has passed) for every later read to step over:
    that would measure the benchmark, not PGMQ.

    Driven as its best Python client would, so that the row measures PGMQ and not psycopg:

    - send_batch gets the batch as one parameter, the `jsonb[]` array's text built once here
      (cast `::text::jsonb[]`): a Python list of 1,000 strings is adapted by psycopg element by
      element, which cost this process about 14 µs a message in a trial here, more than
      PostgreSQL spent on it;
    - read's messages are parsed by orjson (psycopg's `set_json_loads`), as the service's
      consumer parses its pages, instead of the standard library's json, per message;
    - delete gets its ids as one `{1,2,…}` literal joined from the ids read (0.4 µs a message
      here, against 1.1-1.2 for the list of ints psycopg adapts), and answers with their count.

    `adapted=True` drives both turns the way run.py did before (the Python list, json.loads,
    the ids as a list): the driver's share, measured in the same run."""

    QUEUE = "bench"

    def __init__(self, db_url: str, sql_file: Path) -> None:
        import psycopg
        from psycopg.types.json import set_json_loads

        self.conn = psycopg.connect(_psycopg_url(db_url), autocommit=True)
        self.conn.execute(sql_file.read_text())
        self.conn.execute("SELECT pgmq.create(%s)", (self.QUEUE,))
        message = orjson.dumps(VALUE).decode()
        self.messages = [message] * BATCH  # the same list every batch (adapted=True)
        # An array literal's element: double-quoted, with `"` and `\` escaped.
        element = '"' + message.replace("\\", "\\\\").replace('"', '\\"') + '"'
        self.array = "{" + ",".join([element] * BATCH) + "}"
        self.reader = self.conn.cursor()
        set_json_loads(orjson.loads, self.reader)

    def send_turn(self, seconds: float, adapted: bool = False) -> Turn:
        conn, n = self.conn, 0
        sql, batch = (("SELECT pgmq.send_batch(%s, %s::jsonb[])", self.messages) if adapted
                      else ("SELECT pgmq.send_batch(%s, %s::text::jsonb[])", self.array))
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            conn.execute(sql, (self.QUEUE, batch)).fetchall()
            n += BATCH
        return n, time.perf_counter() - t0

    def read_turn(self, seconds: float, adapted: bool = False) -> Turn:
        """Reads and deletes until `seconds` have passed or the queue has nothing left."""
        conn, n = self.conn, 0
        read = "SELECT msg_id, message FROM pgmq.read(%s, %s, %s)"
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            rows = (conn if adapted else self.reader).execute(read, (self.QUEUE, 3600, BATCH)).fetchall()
            if not rows:
                break
            if adapted:
                conn.execute("SELECT pgmq.delete(%s, %s::bigint[])", (self.QUEUE, [r[0] for r in rows])).fetchall()
            else:
                ids = "{" + ",".join([str(r[0]) for r in rows]) + "}"
                deleted = conn.execute("SELECT count(*) FROM pgmq.delete(%s, %s::text::bigint[])",
                                       (self.QUEUE, ids)).fetchone()[0]
                if deleted != len(rows):
                    raise RuntimeError(f"pgmq.delete deleted {deleted} of {len(rows)} messages read")
            n += len(rows)
        return n, time.perf_counter() - t0

    def close(self) -> None:
        self.conn.close()


class PgQueuer:
    """pgqueuer (PyPI) installed into the scratch database, driven through its own Queries API
    in this process, as an application enqueuing jobs and a worker claiming them would:
    `enqueue` of 1,000 jobs whose payload is the same value a Send carries, and a worker's
    loop: `dequeue` of batches of 1,000 (claimed, status 'picked'), then `log_jobs` of them as
    successful (a DELETE from the queue and a row in its log), as pgqueuer's QueueManager does
    for each job done. Claimed jobs left in the queue would slow every later dequeue, as
    PGMQ's read messages do (see Pgmq).

    Driven as its best client would: over asyncpg, the driver pgqueuer's own documentation
    starts with, which encodes the enqueue's six arrays in binary in compiled code (psycopg
    adapts them element by element in Python: about 11-14 µs of this process a job against
    4-6 over asyncpg, in a trial here), and with the batch API's every list (entrypoints,
    payloads, priorities, delays, dedupe keys, headers) made once, outside the clock.
    `psycopg=True` drives the same calls over psycopg with the three lists run.py gave before:
    the driver's share, measured in the same run."""

    ENTRYPOINT = "bench"

    def __init__(self, db_url: str) -> None:
        import asyncpg
        import psycopg
        from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
        from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
        from pgqueuer.adapters.persistence.queries import Queries
        from pgqueuer.ports.repository import EntrypointExecutionParameter

        self.loop = asyncio.new_event_loop()
        url = _psycopg_url(db_url)
        self.conn = self.loop.run_until_complete(asyncpg.connect(url))
        self.psycopg_conn = self.loop.run_until_complete(psycopg.AsyncConnection.connect(url, autocommit=True))
        self.queries = Queries(AsyncpgDriver(self.conn))
        self.psycopg_queries = Queries(PsycopgDriver(self.psycopg_conn))
        self.loop.run_until_complete(self.queries.install())
        payload = orjson.dumps(VALUE)
        # Made once: entrypoints, payloads, priorities (the way before), then delays, dedupe
        # keys and headers, which enqueue would otherwise fill in itself for every batch.
        self.before = ([self.ENTRYPOINT] * BATCH, [payload] * BATCH, [0] * BATCH)
        self.batch = (*self.before, [timedelta(0)] * BATCH, [None] * BATCH, [None] * BATCH)
        self.entrypoints = {self.ENTRYPOINT: EntrypointExecutionParameter(concurrency_limit=0)}
        self.manager = uuid.uuid4()

    def enqueue_turn(self, seconds: float, psycopg: bool = False) -> Turn:
        queries, batch = (self.psycopg_queries, self.before) if psycopg else (self.queries, self.batch)

        async def run() -> Turn:
            n = 0
            t0 = time.perf_counter()
            deadline = t0 + seconds
            while time.perf_counter() < deadline:
                await queries.enqueue(*batch)
                n += BATCH
            return n, time.perf_counter() - t0

        return self.loop.run_until_complete(run())

    def dequeue_turn(self, seconds: float, psycopg: bool = False) -> Turn:
        """Claims until `seconds` have passed or nothing is left to claim."""
        queries = self.psycopg_queries if psycopg else self.queries

        async def run() -> Turn:
            n = 0
            t0 = time.perf_counter()
            deadline = t0 + seconds
            while time.perf_counter() < deadline:
                jobs = await queries.dequeue(BATCH, self.entrypoints, self.manager, None, timedelta(hours=1))
                if not jobs:
                    break
                await queries.log_jobs([(job, "successful", None) for job in jobs])
                n += len(jobs)
            return n, time.perf_counter() - t0

        return self.loop.run_until_complete(run())

    def close(self) -> None:
        self.loop.run_until_complete(self.psycopg_conn.close())
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


# Each peer path's name, driven the way run.py drove it before its driver was measured apart
# (see Pgmq and PgQueuer): the rows that show how much of the old figures was the driver's.
PEER_BEFORE = {
    "pgmq send_batch": "pgmq send_batch, a Python list psycopg adapts (before)",
    "pgmq read + delete": "pgmq read + delete, json.loads and a list of ids (before)",
    "pgqueuer enqueue": "pgqueuer enqueue over psycopg (before)",
    "pgqueuer dequeue + log_jobs": "pgqueuer dequeue + log_jobs over psycopg (before)",
}


# --- CPU per process ------------------------------------------------------------------------------


class CpuMeter:
    """Reads, between turns, the CPU time of each process a path runs in: the service (from
    /proc/<pid>/stat), this process (time.process_time(): the load generator, the raw insert's
    driver, the peers' clients) and, on PostgreSQL, every backend connected to the scratch
    database (pg_stat_activity, then /proc/<pid>/stat; this meter's own connection excepted).
    PostgreSQL's background processes (WAL writer, checkpointer, autovacuum) are not counted:
    they work for every path alike. On SQLite the database is a library inside the service
    (or, for the raw insert, inside this process), so its CPU is in those columns."""

    def __init__(self, service: Service, db_url: str) -> None:
        self.service = service
        self.conn = None
        if not db_url.startswith("sqlite"):
            import psycopg

            self.conn = psycopg.connect(_psycopg_url(db_url), autocommit=True)

    def _backends(self) -> dict[int, float] | None:
        if self.conn is None:
            return None
        out = {}
        for (pid,) in self.conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                        "AND pid <> pg_backend_pid()").fetchall():
            try:
                out[pid] = _proc_cpu(pid)
            except (FileNotFoundError, ProcessLookupError):
                pass  # ended since
        return out

    def measure(self, work: Callable[[], T]) -> tuple[T, Cpu]:
        b0, s0, c0 = self._backends(), self.service.cpu_seconds(), time.process_time()
        done = work()
        c1, s1, b1 = time.process_time(), self.service.cpu_seconds(), self._backends()
        database = None
        if b0 is not None and b1 is not None:
            # A backend that started during the turn counts from zero; one that ended is lost
            # (the service's pool keeps its connections, the peers use one each).
            database = sum(cpu - b0.get(pid, 0.0) for pid, cpu in b1.items())
        return done, Cpu(s1 - s0, c1 - c0, database)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


# --- one database ---------------------------------------------------------------------------------


def _letters(n: int) -> str:
    return "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"[:n]


def bench_database(kind: str, args: argparse.Namespace, rng: random.Random, notes: list[str]) -> list[Row]:
    seconds, rounds, turn_seconds = args.seconds, args.rounds, args.turn_seconds
    rows: list[Row] = []
    closers: list[Callable[[], None]] = []  # run in reverse, whatever fails
    service = None
    try:
        scratch = ExitStack()
        closers.append(scratch.close)
        db_url = scratch.enter_context(scratch_database(kind, "bench"))

        service = Service(db_url)
        url = service.url
        meter = CpuMeter(service, db_url)
        closers.append(meter.close)

        # Every path below takes short turns, `rounds` times, in an order shuffled afresh each
        # round, and each figure is the total of its turns: records ÷ seconds. The machine's
        # speed drifts by tens of percent over seconds here (docs/benchmarks.md), so a path
        # measured in one long run of its own would be compared with its neighbours under a
        # different machine; in turns of half a second, every path meets the same drift. Until
        # the waiting-readers work the order was the same every round, so a path always followed the same
        # neighbour (and whatever that neighbour left to the database: dirty pages, a
        # checkpoint, autovacuum); the shuffle spreads that over every path. Each producing
        # turn writes a topic created just before it: records' primary key starts with the
        # topic id, so every turn appends at the right edge of the index, as a busy topic
        # does, rather than into the middle of one that other turns have grown since.
        # A path is set up for round r (its topic created, its rows made) by paths[name](r),
        # which returns the turn itself: only that is timed and metered, so creating a topic
        # costs no path its CPU.
        paths: dict[str, Callable[[int], Callable[[], Turn]]] = {}
        service_paths: set[str] = set()

        def producing(name: str, slug: str, producer: Producer) -> None:
            closers.append(producer.close)

            def turn(r: int) -> Callable[[], Turn]:
                create_topic(url, f"{slug}-{r}", 1)
                return lambda: producer.turn(f"{slug}-{r}", turn_seconds)

            paths[name] = turn
            service_paths.add(name)

        producing("produce plain", "p-plain", Producer(url, "plain"))
        producing("produce plain, UUID keys and ns timestamps", "p-plain-uuid",
                  Producer(url, "plain", records=_records_keyed_by_uuid(BATCH)))
        producing("produce idempotent", "p-idempotent", Producer(url, "idempotent"))
        producing("produce transactional (commit / 1,000)", "p-txn-1000",
                  Producer(url, "transactional", "bench-txn-1000"))
        producing("produce transactional (commit / 100 ms)", "p-txn-100ms",
                  Producer(url, "transactional", "bench-txn-100ms", commit_every_ms=100.0))
        producing("produce transactional v2 (commit / 1,000)", "p-txn2-1000",
                  Producer(url, "transactional", "bench-txn2-1000", transaction_version=2))
        producing("produce transactional v2 (commit / 100 ms)", "p-txn2-100ms",
                  Producer(url, "transactional", "bench-txn2-100ms", commit_every_ms=100.0, transaction_version=2))
        # Durability "commit": the Sends answered before they are durable, made durable by the
        # Commit (docs/GUARANTEES.md#durability-commit); the rows above keep durable Sends.
        producing("produce transactional v2, durability commit (commit / 100 ms)", "p-txn2c-100ms",
                  Producer(url, "transactional", "bench-txn2c-100ms", commit_every_ms=100.0, transaction_version=2,
                           durability="commit"))
        producing("produce transactional v2, durability commit (commit / 1,000)", "p-txn2c-1000",
                  Producer(url, "transactional", "bench-txn2c-1000", transaction_version=2, durability="commit"))
        producing("produce transactional v2, last Send in the Commit (commit / 1,000)", "p-txn2f-1000",
                  Producer(url, "transactional", "bench-txn2f-1000", transaction_version=2,
                           commit_carries_last_send=True))
        producing("produce transactional v2, last Send in the Commit (commit / 100 ms)", "p-txn2f-100ms",
                  Producer(url, "transactional", "bench-txn2f-100ms", commit_every_ms=100.0, transaction_version=2,
                           commit_carries_last_send=True))
        producing("produce transactional v2, last Send in the Commit, durability commit (commit / 100 ms)",
                  "p-txn2fc-100ms",
                  Producer(url, "transactional", "bench-txn2fc-100ms", commit_every_ms=100.0, transaction_version=2,
                           commit_carries_last_send=True, durability="commit"))

        # Fetches of records written before the rounds: plain ones, and transactional ones (a
        # commit per Send, as the commit / 1,000 producer writes them), each read_committed and
        # read_uncommitted. Until the waiting-readers work read_uncommitted always went first, over rows
        # PostgreSQL had not yet marked committed (hint bits: the first reader of a row looks
        # its transaction up and writes the mark), so it paid for both and read_committed ÷
        # read_uncommitted read high. One untimed read of each topic now marks every row, and
        # the order is shuffled with the rest.
        for records_kind, mode in (("plain", "plain"), ("transactional", "transactional")):
            topic = f"fetch-{records_kind}"
            create_topic(url, topic, 1)
            filler = Producer(url, mode, f"bench-fetch-{records_kind}" if mode == "transactional" else None)
            filler.turn(topic, seconds)
            filler.close()
            # The read that marks every row, outside the rotation; then read_committed once, so
            # that the old row's way (one read each, read_uncommitted first) is printed beside.
            first = read_all(url, topic, "read_uncommitted")
            then = read_all(url, topic, "read_committed")
            notes.append(f"{kind}, {records_kind} records fetched once each as before the waiting-readers work (read_uncommitted "
                         f"first, on rows not yet marked): read_uncommitted {first[0] / first[1]:,.0f}/s, then "
                         f"read_committed {then[0] / then[1]:,.0f}/s, ratio {then[0] / then[1] / (first[0] / first[1]):.2f}")
            for isolation in ("read_committed", "read_uncommitted"):
                reader = Reader(url, topic, isolation)
                closers.append(reader.close)
                name = f"fetch {records_kind} records, {isolation}"
                paths[name] = lambda r, rd=reader: lambda: rd.turn(turn_seconds)
                service_paths.add(name)

        raw = RawInserter(db_url)
        closers.append(raw.close)
        methods = list(raw.methods) + ([raw.methods[-1] + RawInserter.OLD] if args.old_reference else [])
        for method in methods:
            def raw_turn(r: int, m: str = method) -> Callable[[], Turn]:
                topic = f"raw-{m.replace(' ', '-').replace(',', '')}-{r}"
                create_topic(url, topic, 1)
                return raw.prepare(m, raw.topic_id(topic), turn_seconds)

            paths[f"raw insert, {method}, no HTTP"] = raw_turn

        # The peers' queues update and delete rows, and this server runs with autovacuum off
        # (docs/benchmarks.md, the machine): their tables are vacuumed before each round,
        # outside the clock, as autovacuum would on a server with its default settings. The
        # service's `records` only grows, and is left alone.
        vacuum: list[str] = []
        if kind == "postgresql":
            try:
                import asyncpg  # noqa: F401 - the optional extra `bench`: pgqueuer[asyncpg]
                import pgqueuer  # noqa: F401
            except ImportError:
                notes.append("pgqueuer: not measured (not installed: pip install -e '.[bench]')")
            else:
                pgq = PgQueuer(db_url)
                closers.append(pgq.close)
                left = args.peer_prefill
                while left > 0:  # untimed: something for the dequeue turns to claim
                    left -= pgq.enqueue_turn(0.5)[0]
                vacuum.extend(["pgqueuer", "pgqueuer_log", "pgqueuer_statistics"])
                paths["pgqueuer enqueue"] = lambda r: lambda: pgq.enqueue_turn(turn_seconds)
                paths["pgqueuer dequeue + log_jobs"] = lambda r: lambda: pgq.dequeue_turn(turn_seconds)
                if args.old_peers:
                    paths[PEER_BEFORE["pgqueuer enqueue"]] = lambda r: lambda: pgq.enqueue_turn(turn_seconds, True)
                    paths[PEER_BEFORE["pgqueuer dequeue + log_jobs"]] = (
                        lambda r: lambda: pgq.dequeue_turn(turn_seconds, True))
            if args.pgmq_sql is not None:
                mq = Pgmq(db_url, args.pgmq_sql)
                closers.append(mq.close)
                left = args.peer_prefill
                while left > 0:
                    left -= mq.send_turn(0.5)[0]
                vacuum.append(f"pgmq.q_{Pgmq.QUEUE}")
                paths["pgmq send_batch"] = lambda r: lambda: mq.send_turn(turn_seconds)
                paths["pgmq read + delete"] = lambda r: lambda: mq.read_turn(turn_seconds)
                if args.old_peers:
                    paths[PEER_BEFORE["pgmq send_batch"]] = lambda r: lambda: mq.send_turn(turn_seconds, True)
                    paths[PEER_BEFORE["pgmq read + delete"]] = lambda r: lambda: mq.read_turn(turn_seconds, True)
            else:
                notes.append("PGMQ: not measured (no --pgmq-sql)")
        else:
            notes.append("pgqueuer, PGMQ: not measured on SQLite (both are PostgreSQL queues)")

        names = list(paths)
        turns: dict[str, list[Turn]] = {name: [] for name in names}
        cpu: dict[str, list[Cpu]] = {name: [] for name in names}
        orders = []
        for r in range(rounds):
            if vacuum and meter.conn is not None:
                meter.conn.execute(f"VACUUM {', '.join(vacuum)}")
            order = rng.sample(names, len(names))
            orders.append("".join(_letters(len(names))[names.index(n)] for n in order))
            for name in order:
                done, used = meter.measure(paths[name](r))
                turns[name].append(done)
                cpu[name].append(used)
        if vacuum:
            notes.append(f"vacuumed before each round, outside the clock (autovacuum is off here): {', '.join(vacuum)}")
        notes.append(f"{kind} rotation, one letter a path: "
                     + ", ".join(f"{_letters(len(names))[i]} {n}" for i, n in enumerate(names)))
        notes.append(f"{kind} orders, one round each: {' '.join(orders)}")
        for name in names:
            done = turns[name]
            per_turn = [n / took for n, took in done if took > 0]
            total = sum(n for n, _ in done)
            used = Cpu()
            for c in cpu[name]:
                used.add(c)
            rows.append(Row(kind, name, total / sum(took for _, took in done),
                            {"turns": f"{len(done)} ({min(per_turn):,.0f}–{max(per_turn):,.0f})"},
                            done, used, total, name in service_paths, cpu[name],
                            name.startswith(("pgqueuer", "pgmq"))))

        # How soon a commit is in a waiting consumer's hands: a long-polling consumer against
        # one polling with the old client's pause, in alternating blocks so both meet the same
        # drift. Before the waiting-readers work this row was commit_then_get: one GET after an inline commit.
        samples = args.latency_samples
        blocks = 4
        # The long-polling consumer's row also runs a version 2 producer, whose Commit bumps
        # the epoch: the Commit's own latency on both protocol versions.
        lat: dict[str, tuple[list[float], list[float]]] = {"long-poll": ([], []), "poll": ([], []),
                                                           "long-poll, v2": ([], [])}
        for b in range(blocks):
            order = ("long-poll", "poll", "long-poll, v2") if b % 2 == 0 else ("long-poll, v2", "poll", "long-poll")
            for mode in order:
                topic = f"latency-{mode.replace(', ', '-')}-{b}"
                create_topic(url, topic, 1)
                got, commits = commit_to_visible(url, topic, samples // blocks, mode.removesuffix(", v2"),
                                                 2 if mode.endswith("v2") else 1)
                lat[mode][0].extend(got)
                lat[mode][1].extend(commits)
        for mode, (got, commits) in lat.items():
            label = ("long-polling consumer (max_wait_ms 5000)" if mode == "long-poll"
                     else "long-polling consumer, transaction version 2" if mode == "long-poll, v2"
                     else f"polling consumer ({POLL_PAUSE_S * 1000:.0f} ms pause)")
            rows.append(Row(kind, f"commit → in a {label}'s hands", None, {
                "p50 ms": f"{statistics.median(got):.2f}", "p99 ms": f"{pct(got, 0.99):.2f}",
                "max ms": f"{max(got):.2f}", "the Commit itself, p50 ms": f"{statistics.median(commits):.2f}",
                "the Commit itself, p99 ms": f"{pct(commits, 0.99):.2f}",
                "samples": str(len(got))}))
        create_topic(url, "latency-old", 1)
        old = commit_then_get(url, "latency-old", 200)
        rows.append(Row(kind, "commit answered → next GET (the row before the waiting-readers work)", None,
                        {"p50 ms": f"{statistics.median(old):.2f}", "p99 ms": f"{pct(old, 0.99):.2f}"}))

        create_topic(url, "requests", 1)
        for name, ms in request_latencies(url, "requests", 100).items():
            rows.append(Row(kind, f"request: {name}", None, {"p50 ms": f"{ms:.2f}"}))

        for producers in (1, 4, 16):
            for partitions in (1, 16):
                topic = f"c-{producers}-{partitions}"
                create_topic(url, topic, partitions)
                run, used = meter.measure(lambda: concurrent_plain(url, topic, producers, partitions, seconds))
                rows.append(Row(kind, f"plain, {producers} producers × {partitions} partitions", run.records / run.span, {
                    "span s": f"{run.span:.2f}",
                    "answered in the window ÷ nominal s": f"{run.in_window / run.seconds:,.0f}",
                    "all ÷ nominal s (before the waiting-readers work)": f"{run.records / run.seconds:,.0f}",
                }, cpu=used, records=run.records))
    finally:
        if service is not None:
            service.stop()
        for close in reversed(closers):
            try:
                close()
            except Exception as e:  # noqa: BLE001 - the others still run; said, not hidden
                print(f"# cleanup: {close!r} failed: {e!r}", file=sys.stderr)
    return rows


def ratio_line(label: str, value: float, a: list[Turn], b: list[Turn]) -> str:
    """A table row: the ratio of the totals, and the same ratio over each quarter of the rounds
    (from the turns of `a` and `b`), whose spread is how far the machine's drift still moves it."""
    line = f"| {label} | {value:.2f} |"
    if len(a) < 4 or len(a) != len(b):
        return line + " |"
    q = len(a) // 4

    def rate(turns: list[Turn]) -> float:
        return sum(n for n, _ in turns) / sum(took for _, took in turns)

    quarters = sorted(rate(a[i:i + q]) / rate(b[i:i + q]) for i in range(0, 4 * q, q))
    return line + f" {quarters[0]:.2f}–{quarters[-1]:.2f} |"


def _us(seconds: float | None, records: int) -> str:
    return "" if seconds is None or not records else f"{seconds / records * 1e6:.1f}"


# A peer's client CPU per record above this share of its database's: the row may measure the
# driver in this process (its adapting, encoding, parsing) more than the peer itself.
DRIVER_SHARE = 0.5


def _cpu_part(row: Row, c: Cpu, part: str) -> float:
    """Seconds of `c` in one part ("client", "service", "database" or "total"), where the
    service's counts only for the service's own paths (it idles through a peer's turn)."""
    parts = {"client": c.client, "service": c.service if row.service_cpu else 0.0, "database": c.database or 0.0}
    return sum(parts.values()) if part == "total" else parts[part]


def _quarters(a: Row, b: Row, value: Callable[[Row, list[Turn], list[Cpu]], float]) -> str:
    """`value(a) ÷ value(b)` over each quarter of the rounds, as ratio_line splits them."""
    if len(a.turns) < 4 or len(a.turns) != len(b.turns) or len(a.cpu_turns) != len(a.turns) \
            or len(b.cpu_turns) != len(b.turns):
        return ""
    q = len(a.turns) // 4
    ratios = []
    for i in range(0, 4 * q, q):
        bottom = value(b, b.turns[i:i + q], b.cpu_turns[i:i + q])
        if not bottom:
            return ""
        ratios.append(value(a, a.turns[i:i + q], a.cpu_turns[i:i + q]) / bottom)
    ratios.sort()
    return f"{ratios[0]:.2f}–{ratios[-1]:.2f}"


def print_driver_check(rows: list[Row]) -> None:
    """Each peer path's client CPU per record beside its database's, with a warning where the
    client's is not small beside it: there the driver, not the peer, may set the rate."""
    peers = [r for r in rows if r.peer and r.cpu is not None and r.records and r.cpu.database]
    if not peers:
        return
    print("| driver check: a peer's client CPU per record beside its database's | client µs | database µs "
          "| client ÷ database | |\n| --- | ---: | ---: | ---: | --- |")
    warnings = []
    for r in peers:
        share = r.cpu.client / r.cpu.database
        flagged = share > DRIVER_SHARE
        print(f"| {r.name} | {_us(r.cpu.client, r.records)} | {_us(r.cpu.database, r.records)} | {share:.2f} | "
              f"{'**WARNING: the client is not small beside the database**' if flagged else 'ok'} |")
        if flagged:
            warnings.append(f"WARNING: {r.name}: this process spent {share:.2f} of the database's CPU per record "
                            f"(> {DRIVER_SHARE}): the row measures its client (driver, library) in this process "
                            "as much as the peer")
    print()
    for w in warnings:
        print(f"- {w}")
    if warnings:
        print()


def print_target(rows: list[Row]) -> None:
    """The service's plain Send against PGMQ's send_batch: CPU per record in each process and in
    all three (client + service + database), and one client's throughput. The target: a plain
    Send's total CPU per record no more than send_batch's, and its throughput at least
    send_batch's."""
    by = {r.name: r for r in rows}
    plain, pgmq = by.get("produce plain"), by.get("pgmq send_batch")
    if plain is None or pgmq is None or not plain.cpu or not pgmq.cpu or plain.cpu.database is None:
        return

    def per_record(part: str) -> Callable[[Row, list[Turn], list[Cpu]], float]:
        def value(row: Row, turns: list[Turn], cpus: list[Cpu]) -> float:
            return sum(_cpu_part(row, c, part) for c in cpus) / sum(n for n, _ in turns) * 1e6
        return value

    def rate(row: Row, turns: list[Turn], cpus: list[Cpu]) -> float:
        return sum(n for n, _ in turns) / sum(took for _, took in turns)

    print("| plain Send against PGMQ send_batch | plain Send | pgmq send_batch | plain ÷ PGMQ "
          "| in each quarter of the rounds | target | met |\n| --- | ---: | ---: | ---: | ---: | --- | --- |")
    for part in ("client", "service", "database", "total"):
        a, b = (per_record(part)(r, r.turns, r.cpu_turns) for r in (plain, pgmq))
        label = "client + service + database" if part == "total" else part
        target = ("≤ 1", "yes" if a <= b else "no") if part == "total" else ("", "")
        # PGMQ has no process of its own between client and database: its service part is none.
        print(f"| CPU µs / record, {label} | {a:.1f} | {f'{b:.1f}' if part != 'service' else 'none'} | "
              f"{f'{a / b:.2f}' if b else ''} | "
              f"{_quarters(plain, pgmq, per_record(part)) if b else ''} | {target[0]} | {target[1]} |")
    ratio = plain.records_per_s / pgmq.records_per_s
    print(f"| records/s, one client | {plain.records_per_s:,.0f} | {pgmq.records_per_s:,.0f} | {ratio:.2f} | "
          f"{_quarters(plain, pgmq, rate)} | ≥ 1 | {'yes' if ratio >= 1 else 'no'} |")
    print()


def print_database(kind: str, rows: list[Row], reference: str) -> None:
    by = {r.name: r for r in rows}
    ref = by[reference].records_per_s
    print(f"## {kind}\n")
    print(f"Reference: {reference}. CPU µs per record, per process (see CpuMeter): the service's; this client's "
          "(load generator, or the raw insert's and the peers' driver); the database backends' "
          "(PostgreSQL only).\n")
    print("| path | records/s | ÷ reference | CPU µs / record: service | client | database | notes |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        if r.records_per_s is None:
            continue
        c = r.cpu
        print(f"| {r.name} | {r.records_per_s:,.0f} | {r.records_per_s / ref:.2f} | "
              f"{_us(c.service if c and r.service_cpu else None, r.records)} | {_us(c.client if c else None, r.records)} | "
              f"{_us(c.database if c else None, r.records)} | {', '.join(f'{k} {v}' for k, v in r.extra.items())} |")
    print("\n| latency | figures |\n| --- | --- |")
    for r in rows:
        if r.records_per_s is None:
            print(f"| {r.name} | {', '.join(f'{k} {v}' for k, v in r.extra.items())} |")
    turns = {r.name: r.turns for r in rows}
    print("\n| ratio | value | in each quarter of the rounds |\n| --- | ---: | ---: |")
    pairs = [
        ("idempotent / plain", "produce idempotent", "produce plain"),
        ("transactional (commit / 1,000) / plain", "produce transactional (commit / 1,000)", "produce plain"),
        ("transactional (commit / 100 ms) / plain", "produce transactional (commit / 100 ms)", "produce plain"),
        ("transactional v2 (commit / 1,000) / plain", "produce transactional v2 (commit / 1,000)", "produce plain"),
        ("transactional v2 (commit / 100 ms) / plain", "produce transactional v2 (commit / 100 ms)",
         "produce plain"),
        ("transactional v2, durability commit (commit / 1,000) / plain",
         "produce transactional v2, durability commit (commit / 1,000)", "produce plain"),
        ("transactional v2, last Send in the Commit (commit / 1,000) / plain",
         "produce transactional v2, last Send in the Commit (commit / 1,000)", "produce plain"),
        ("transactional v2, last Send in the Commit (commit / 100 ms) / plain",
         "produce transactional v2, last Send in the Commit (commit / 100 ms)", "produce plain"),
        ("transactional v2, durability commit (commit / 100 ms) / plain",
         "produce transactional v2, durability commit (commit / 100 ms)", "produce plain"),
        ("transactional v2, last Send in the Commit, durability commit (commit / 100 ms) / plain",
         "produce transactional v2, last Send in the Commit, durability commit (commit / 100 ms)", "produce plain"),
        ("transactional v2 (commit / 100 ms): durability commit / durable Sends",
         "produce transactional v2, durability commit (commit / 100 ms)",
         "produce transactional v2 (commit / 100 ms)"),
        ("plain, UUID keys and ns timestamps / plain", "produce plain, UUID keys and ns timestamps", "produce plain"),
        ("plain records: read_committed / read_uncommitted fetch", "fetch plain records, read_committed",
         "fetch plain records, read_uncommitted"),
        ("transactional records: read_committed / read_uncommitted fetch",
         "fetch transactional records, read_committed", "fetch transactional records, read_uncommitted"),
        (f"plain produce over HTTP / {reference}", "produce plain", reference),
        (f"raw insert, rows built in the loop (before the waiting-readers work) / {reference}",
         reference.removesuffix(", no HTTP") + f"{RawInserter.OLD}, no HTTP", reference),
        ("plain produce over HTTP / pgqueuer enqueue", "produce plain", "pgqueuer enqueue"),
        ("plain produce over HTTP / pgmq send_batch", "produce plain", "pgmq send_batch"),
        ("fetch plain records, read_committed / pgqueuer dequeue + log_jobs", "fetch plain records, read_committed",
         "pgqueuer dequeue + log_jobs"),
        ("fetch plain records, read_committed / pgmq read + delete", "fetch plain records, read_committed",
         "pgmq read + delete"),
        *((f"{peer} / the same driven as before", peer, before) for peer, before in PEER_BEFORE.items()),
        ("plain produce over HTTP / pgmq send_batch driven as before", "produce plain",
         PEER_BEFORE["pgmq send_batch"]),
    ]
    for label, a, b in pairs:
        if a in by and b in by:
            print(ratio_line(label, by[a].records_per_s / by[b].records_per_s, turns[a], turns[b]))
    print()
    print_driver_check(rows)
    print_target(rows)
    ms = {r.name.removeprefix("request: "): float(r.extra["p50 ms"]) for r in rows if r.name.startswith("request: ")}
    print("| transactional ÷ plain, predicted from the request medians | value |\n| --- | ---: |")
    for label, value in request_bounds(ms):
        print(f"| {label} | {value:.2f} |")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=20,
                        help="turns of each path of the rotation, in an order shuffled each round")
    parser.add_argument("--turn-seconds", type=float, default=0.5, help="duration of each such turn")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="duration of each concurrent run (1/4/16 producers), and of the writes the fetches read")
    parser.add_argument("--client", choices=["http.client", "httpx"], default="http.client",
                        help="the load generator's HTTP client (see Client)")
    parser.add_argument("--seed", type=int, default=None, help="of the rotation's shuffle (printed; random if not given)")
    parser.add_argument("--pgmq-sql", type=Path, default=None,
                        help="PGMQ's plain SQL install file (pgmq-extension/sql/pgmq.sql), installed into the "
                             "scratch database for the PGMQ turns; not measured without it")
    parser.add_argument("--peer-prefill", type=int, default=100_000,
                        help="messages each peer queue holds before the rounds, for its read turns to claim")
    parser.add_argument("--latency-samples", type=int, default=200,
                        help="commits per consumer kind for commit → in hand")
    parser.add_argument("--no-old-peers", dest="old_peers", action="store_false",
                        help="leave out the peers driven as before (PGMQ's arrays as Python lists psycopg adapts, "
                             "pgqueuer over psycopg): the driver's share of their figures")
    parser.add_argument("--no-old-reference", dest="old_reference", action="store_false",
                        help="leave out the raw COPY with rows built in the timed loop (the reference before the waiting-readers work)")
    args = parser.parse_args(argv)
    if args.pgmq_sql is not None and not args.pgmq_sql.is_file():
        parser.error(f"--pgmq-sql {args.pgmq_sql}: no such file")  # before any database is made
    Client.kind = args.client
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    kinds = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    print(f"# {os.cpu_count()} cores; batches of {BATCH} records of {len(orjson.dumps(VALUE))} bytes; "
          f"every path of the rotation: {args.rounds} turns of {args.turn_seconds:g} s each, in an order shuffled "
          f"each round (--seed {seed}); concurrent runs {args.seconds:g} s; client {args.client}\n")
    for kind in kinds:
        notes: list[str] = []
        rows = bench_database(kind, args, rng, notes)
        by = {r.name: r.records_per_s for r in rows}
        reference = max((k for k, v in by.items() if k.startswith("raw insert") and v
                         and RawInserter.OLD not in k), key=lambda k: by[k])
        print_database(kind, rows, reference)
        for note in notes:
            print(f"- {note}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
