"""What waiting readers cost everyone else: Send and /healthz latency beside 0, 500 and 2,000
waiters, long-polling or streaming (SSE), before and after a change.

    .venv/bin/python benchmarks/waiting_load.py --before DIR [--after DIR] [--waiters 0,500,2000]
                                               [--modes long-poll,sse] [--placements idle,woken]
                                               [--seconds 40] [--db postgresql]

For each configuration, one run on a fresh database: one `outbox serve` from the tree (each
tree with its own venv, DIR/.venv/bin/python, when it has one), the waiters in two client
processes of their own (raw HTTP/1.1 over asyncio, the leanest client there is, so that the
clients take as little of the 2 cores as can be), then, in this process, a producer sending
one record a second and a prober asking /healthz every 200 ms, for `--seconds`.

- placement `idle`: the waiters read a topic nobody writes to; every commit is to another one.
- placement `woken`: the waiters read the partition the producer sends to; every Send wakes
  all of them (each long-poll then answers and asks again from its next offset; each stream
  sends an event).

A long-poll waiter asks with max_wait_ms drawn from 20-30 s each time (consumers do not ask in
step); a refusal (429) makes it wait a second. Printed per configuration: Send and /healthz
p50 / p99 / max (ms), the service's CPU (% of one core), the database's transactions per
second (pg_stat_database: every read is one), the waiters' refusals and errors, the service's
resident memory; then before ÷ after of each p99.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ROOT, Service  # noqa: E402 - the benchmark's own modules, not a package
from scratch import scratch_database  # noqa: E402
from waiting import database_transactions, pct  # noqa: E402

SENT, IDLE = "sent", "idle"


# --- the waiters' processes -------------------------------------------------------------------------


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def _long_poll(host: str, port: int, topic: str, stats: dict[str, int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    offset = 0
    while True:
        wait_ms = random.randint(20_000, 30_000)
        writer.write(f"GET /v1/topics/{topic}/partitions/0/records?offset={offset}&max_wait_ms={wait_ms} "
                     f"HTTP/1.1\r\nHost: outbox\r\n\r\n".encode())
        status, body = await _response(reader)
        if status == 200:
            offset = orjson.loads(body)["next_offset"]
            stats["answers"] += 1
        else:
            stats["refused" if status == 429 else "errors"] += 1
            await asyncio.sleep(1.0)


async def _stream(host: str, port: int, topic: str, stats: dict[str, int]) -> None:
    while True:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"GET /v1/topics/{topic}/partitions/0/stream HTTP/1.1\r\nHost: outbox\r\n\r\n".encode())
        status = int((await reader.readline()).split()[1])
        if status != 200:
            stats["refused" if status == 429 else "errors"] += 1
            writer.close()
            await asyncio.sleep(1.0)
            continue
        while line := await reader.readline():
            if line.startswith(b"id: "):
                stats["events"] += 1
        stats["errors"] += 1  # the stream ended: the server went away


async def _waiters(mode: str, url: str, topic: str, n: int) -> None:
    host, port = url.removeprefix("http://").split(":")
    stats = {"answers": 0, "events": 0, "refused": 0, "errors": 0}
    run = _long_poll if mode == "long-poll" else _stream
    tasks = []
    for i in range(n):
        tasks.append(asyncio.ensure_future(run(host, int(port), topic, stats)))
        if i % 100 == 99:
            await asyncio.sleep(0.05)  # not all at once into the listen backlog
    await asyncio.sleep(1.0)
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    print(json.dumps(stats), flush=True)
    os._exit(0)  # the waits need no goodbye


# --- one configuration ------------------------------------------------------------------------------


@dataclass
class Run:
    tree: str
    mode: str
    placement: str
    waiters: int
    send_ms: list[float] = field(default_factory=list)
    healthz_ms: list[float] = field(default_factory=list)
    cpu_pct: float = 0.0
    db_tx_s: float | None = None
    rss_mb: float = 0.0
    waiter_stats: dict[str, int] = field(default_factory=dict)
    send_errors: int = 0


def _timed(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None) -> tuple[int, float]:
    started = time.perf_counter()
    conn.request(method, path, body=body, headers={"content-type": "application/json"} if body else {})
    r = conn.getresponse()
    r.read()
    return r.status, (time.perf_counter() - started) * 1000


def _send_every_second(url: str, seconds: float, out: Run) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    body = orjson.dumps({"batches": [{"topic": SENT, "partition": 0, "records": [{"value": "x"}]}]})
    start = time.monotonic()
    for n in range(int(seconds)):
        time.sleep(max(0.0, start + n - time.monotonic()))
        try:
            status, ms = _timed(conn, "POST", "/v1/records", body)
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            out.send_errors += 1
            continue
        if status != 200:
            out.send_errors += 1
        out.send_ms.append(ms)


def _probe(url: str, stop: threading.Event, out: Run) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    while not stop.wait(0.2):
        try:
            out.healthz_ms.append(_timed(conn, "GET", "/healthz")[1])
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection(host, int(port), timeout=60)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def one_run(tree: Path, label: str, db: str, mode: str, placement: str, waiters: int, seconds: float) -> Run:
    out = Run(label, mode, placement, waiters)
    python = tree / ".venv/bin/python"
    with scratch_database(db, "waitload", migrate_with=(tree,)) as db_url:
        service = Service(db_url, root=tree, python=str(python) if python.exists() else sys.executable,
                          OUTBOX_ACCESS_LOG="false", OUTBOX_MAX_WAITING_REQUESTS="10000",
                          OUTBOX_MAX_WAITING_REQUESTS_PER_PRINCIPAL="10000",
                          OUTBOX_HTTP_MAX_CONNECTIONS="10001")
        children: list[subprocess.Popen[str]] = []
        try:
            for topic in (SENT, IDLE):
                httpx.post(f"{service.url}/v1/topics", json={"name": topic}).raise_for_status()
            topic = IDLE if placement == "idle" else SENT
            for share in (waiters // 2, waiters - waiters // 2):
                if share:
                    children.append(subprocess.Popen(
                        [sys.executable, __file__, "--child", mode, service.url, topic, str(share)],
                        stdout=subprocess.PIPE, text=True))
            for child in children:
                assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            time.sleep(5.0)  # every waiter has asked and waits
            stop = threading.Event()
            prober = threading.Thread(target=_probe, args=(service.url, stop, out))
            cpu0, tx0, t0 = service.cpu_seconds(), database_transactions(db_url), time.perf_counter()
            prober.start()
            _send_every_second(service.url, seconds, out)
            stop.set()
            prober.join()
            cpu1, tx1, t1 = service.cpu_seconds(), database_transactions(db_url), time.perf_counter()
            out.cpu_pct = (cpu1 - cpu0) / (t1 - t0) * 100
            out.db_tx_s = None if tx0 is None or tx1 is None else (tx1 - tx0) / (t1 - t0)
            out.rss_mb = _rss_mb(service.proc.pid)
            for child in children:
                child.send_signal(signal.SIGTERM)
                assert child.stdout is not None
                for k, v in json.loads(child.stdout.readline()).items():
                    out.waiter_stats[k] = out.waiter_stats.get(k, 0) + v
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                child.wait()
            service.stop()
    return out


def _ms(values: list[float]) -> str:
    if not values:
        return "– | – | –"
    return f"{statistics.median(values):.1f} | {pct(values, 0.99):.1f} | {max(values):.1f}"


def print_table(runs: list[Run]) -> None:
    print("\n| tree | kind | placement | waiters | Send p50 | p99 | max | /healthz p50 | p99 | max "
          "| service CPU % | db tx/s | RSS MB | waiters' answers / events, refused, errors |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in runs:
        s = r.waiter_stats
        print(f"| {r.tree} | {r.mode} | {r.placement} | {r.waiters} | {_ms(r.send_ms)} | {_ms(r.healthz_ms)} | "
              f"{r.cpu_pct:.0f} | {'–' if r.db_tx_s is None else f'{r.db_tx_s:.0f}'} | {r.rss_mb:.0f} | "
              f"{s.get('answers', 0)} / {s.get('events', 0)}, {s.get('refused', 0)}, {s.get('errors', 0)}"
              f"{f', {r.send_errors} Sends failed' if r.send_errors else ''} |")


def print_ratios(runs: list[Run]) -> None:
    by = {(r.tree, r.mode, r.placement, r.waiters): r for r in runs}
    print("\n| kind | placement | waiters | Send p99 before ÷ after | /healthz p99 before ÷ after |")
    print("| --- | --- | ---: | ---: | ---: |")
    for (tree, mode, placement, n), before in by.items():
        after = by.get(("after", mode, placement, n))
        if tree != "before" or after is None or not after.send_ms or not before.send_ms:
            continue
        print(f"| {mode} | {placement} | {n} | {pct(before.send_ms, 0.99) / pct(after.send_ms, 0.99):.2f} | "
              f"{pct(before.healthz_ms, 0.99) / pct(after.healthz_ms, 0.99):.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=4, metavar=("MODE", "URL", "TOPIC", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--before", type=Path, help="the tree before the change")
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--waiters", default="0,500,2000")
    parser.add_argument("--modes", default="long-poll,sse")
    parser.add_argument("--placements", default="idle,woken")
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    args = parser.parse_args(argv)
    if args.child:
        mode, url, topic, n = args.child
        asyncio.run(_waiters(mode, url, topic, int(n)))
        return 0
    trees = ([("before", args.before)] if args.before else []) + [("after", args.after)]
    runs = []
    modes, placements = args.modes.split(","), args.placements.split(",")
    for mode in modes:
        for placement in placements:
            for n in (int(x) for x in args.waiters.split(",")):
                if n == 0 and (mode, placement) != (modes[0], placements[0]):
                    continue  # no waiters: one run says it
                for label, tree in trees:
                    r = one_run(tree.resolve(), label, args.db, mode, placement, n, args.seconds)
                    runs.append(r)
                    print_table([r])
                    sys.stdout.flush()
    print_table(runs)
    print_ratios(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
