"""Consumers that wait against consumers that poll (the waiting-readers work): how soon a committed record is in
a consumer's hands, and what idle consumers cost the service and the database.

    .venv/bin/python benchmarks/waiting.py [--db sqlite|postgresql|both] [--samples 300] [--idle 500]

On a fresh database per run, a real `outbox serve`:

- **commit → in hand**: a producer sends one record every 20-40 ms (one Send each, timed from
  the moment the request is sent: the commit is inside it); one consumer reads the partition
  with a long-poll Fetch (max_wait_ms 5000), or as the client did before, polling with a 50 ms
  pause after an empty answer, taking turns. p50 / p99 / max in ms, the Send's own time beside,
  and p50 / p99 from the Send's answer (the commit is done by then): the visibility lag.
- **idle consumers**: `--idle` consumers of a topic nobody writes to, for 10 s: long-polling
  (max_wait_ms 30000) against polling once a second. The service's CPU (from /proc/<pid>/stat,
  in % of one core) and, on PostgreSQL, the database's transactions per second
  (pg_stat_database: every fetch is one read transaction).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import POLL_PAUSE_S, Service  # noqa: E402 - the benchmark's own modules, not a package
from scratch import scratch_database  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def latency(url: str, topic: str, samples: int, mode: str) -> tuple[list[float], list[float], list[float]]:
    """(ms from Send sent to the record in the consumer's hands, ms each Send took, ms from the
    Send's answer to the record in hand). The commit happens inside the Send, so the first
    bounds the visibility lag from above and the third, less the answer's way back, from
    below; the third is negative when the consumer had the record before the producer had
    its answer."""
    sent_at: dict[int, float] = {}
    answered_at: dict[int, float] = {}
    in_hand_at: dict[int, float] = {}
    send_ms: list[float] = []
    got: list[float] = []
    done = threading.Event()

    def produce() -> None:
        with httpx.Client(base_url=url, timeout=30) as c:
            for n in range(samples):
                time.sleep(random.uniform(0.02, 0.04))
                sent_at[n] = time.perf_counter()
                c.post("/v1/records", json={"batches": [{"topic": topic, "partition": 0,
                                                          "records": [{"value": n}]}]}).raise_for_status()
                answered_at[n] = time.perf_counter()
                send_ms.append((answered_at[n] - sent_at[n]) * 1000)
        done.set()

    producer = threading.Thread(target=produce)
    producer.start()
    position = 0
    with httpx.Client(base_url=url, timeout=30) as c:
        while len(got) < samples:
            params = {"offset": position, "max_records": 1000}
            if mode == "long-poll":
                params["max_wait_ms"] = 5000
            page = c.get(f"/v1/topics/{topic}/partitions/0/records", params=params).json()
            now = time.perf_counter()
            for r in page["records"]:
                got.append((now - sent_at[r["value"]]) * 1000)
                in_hand_at[r["value"]] = now
            position = page["next_offset"]
            if not page["records"] and mode == "poll":
                time.sleep(POLL_PAUSE_S)
    producer.join()
    return got, send_ms, [(in_hand_at[n] - answered_at[n]) * 1000 for n in sorted(in_hand_at)]


def database_transactions(db_url: str) -> int | None:
    if not db_url.startswith("postgresql"):
        return None
    engine = create_engine(db_url)
    with engine.connect() as conn:
        n = conn.execute(text("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                              "WHERE datname = current_database()")).scalar_one()
    engine.dispose()
    return int(n)


def idle(service: Service, db_url: str, topic: str, consumers: int, mode: str, seconds: float = 10.0) -> tuple[float, float | None]:
    """(service CPU in % of one core, database transactions per second) over `seconds` of
    `consumers` idle consumers."""

    async def consume(http: httpx.AsyncClient, stop: asyncio.Event) -> None:
        while not stop.is_set():
            params = {"offset": 0}
            if mode == "long-poll":
                params["max_wait_ms"] = 30_000
            try:
                await http.get(f"/v1/topics/{topic}/partitions/0/records", params=params)
            except httpx.HTTPError:
                pass
            if mode == "poll":
                try:
                    await asyncio.wait_for(stop.wait(), 1.0)
                except TimeoutError:
                    pass

    async def run() -> tuple[float, float | None]:
        limits = httpx.Limits(max_connections=consumers + 10, max_keepalive_connections=consumers + 10)
        async with httpx.AsyncClient(base_url=service.url, timeout=60, limits=limits) as http:
            stop = asyncio.Event()
            tasks = [asyncio.create_task(consume(http, stop)) for _ in range(consumers)]
            await asyncio.sleep(3.0)  # all connected and waiting
            cpu0, tx0, t0 = service.cpu_seconds(), database_transactions(db_url), time.perf_counter()
            await asyncio.sleep(seconds)
            cpu1, tx1, t1 = service.cpu_seconds(), database_transactions(db_url), time.perf_counter()
            stop.set()
            # Long polls end at their max wait; do not wait for them.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        elapsed = t1 - t0
        return (cpu1 - cpu0) / elapsed * 100, None if tx0 is None else (tx1 - tx0) / elapsed  # type: ignore[operator]

    return asyncio.run(run())


def bench(kind: str, samples: int, consumers: int) -> None:
    with scratch_database(kind, "wait") as db_url:
        service = None
        try:
            # The idle consumers all wait, from one address (one principal): bounds that hold them
            # all, and connections beyond them for the Sends and the probes.
            service = Service(db_url, OUTBOX_LOG_LEVEL="warning", OUTBOX_ACCESS_LOG="false",
                              OUTBOX_MAX_WAITING_REQUESTS=str(consumers + 10),
                              OUTBOX_MAX_WAITING_REQUESTS_PER_PRINCIPAL=str(consumers + 10),
                              OUTBOX_HTTP_MAX_CONNECTIONS=str(max(1000, consumers + 100)))
            results = {}
            for mode in ("long-poll", "poll", "long-poll", "poll"):  # taking turns
                topic = f"lat-{mode}-{uuid.uuid4().hex[:6]}"
                httpx.post(f"{service.url}/v1/topics", json={"name": topic}).raise_for_status()
                got, send, after = latency(service.url, topic, samples // 2, mode)
                prev = results.setdefault(mode, ([], [], []))
                prev[0].extend(got)
                prev[1].extend(send)
                prev[2].extend(after)
            print(f"\n## {kind}: commit → in hand ({samples} records each, ms)\n")
            print("| consumer | from the Send sent: p50 | p99 | max | the Send itself, p50 | p99 "
                  "| from the Send's answer: p50 | p99 |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for mode, (got, send, after) in results.items():
                label = "long-poll Fetch (max_wait_ms 5000)" if mode == "long-poll" else f"polling, {POLL_PAUSE_S * 1000:.0f} ms pause"
                print(f"| {label} | {statistics.median(got):.1f} | {pct(got, 0.99):.1f} | {max(got):.1f} | "
                      f"{statistics.median(send):.1f} | {pct(send, 0.99):.1f} | {statistics.median(after):.1f} | "
                      f"{pct(after, 0.99):.1f} |")
            topic = f"idle-{uuid.uuid4().hex[:6]}"
            httpx.post(f"{service.url}/v1/topics", json={"name": topic}).raise_for_status()
            print(f"\n## {kind}: {consumers} idle consumers, 10 s\n")
            print("| consumers | service CPU, % of one core | database transactions / s |\n| --- | ---: | ---: |")
            print(f"| none | {idle(service, db_url, topic, 0, 'poll')[0]:.1f} | |")
            for mode, label in (("long-poll", "long-polling (max_wait_ms 30000)"), ("poll", "polling once a second")):
                cpu, tx = idle(service, db_url, topic, consumers, mode)
                print(f"| {label} | {cpu:.1f} | {'–' if tx is None else f'{tx:.0f}'} |")
        finally:
            if service is not None:
                service.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--idle", type=int, default=500)
    args = parser.parse_args(argv)
    for kind in (["sqlite", "postgresql"] if args.db == "both" else [args.db]):
        bench(kind, args.samples, args.idle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
