"""The Kafka door's request-wide bounds: a hostile Produce's decompressing, a Fetch naming one
partition many times (docs/benchmarks.md, "The Kafka door's bounds, second part").

    .venv/bin/python benchmarks/kafka_bounds.py                               # SQLite, this tree
    .venv/bin/python benchmarks/kafka_bounds.py --db postgresql --runs 2
    .venv/bin/python benchmarks/kafka_bounds.py --before /tmp/kbounds-before  # and another tree, in turns

Starts one `outbox serve` with its Kafka listener per tree (OUTBOX_KAFKA_LISTENER, and
OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES at each request's limit) on a scratch database, and asks
it, from this process over a socket, with kio's writers (tests/kafka/conftest.py):

- a hostile Produce v9 to a bytes topic: each of `--partitions` partitions one zstd batch of
  one record whose value is the limit less 4 KiB (a few kB compressed), for limits 16 MiB (64
  partitions) and 100 MiB (16 partitions). It prints each partition's error code, the
  service's CPU (/proc/<pid>/stat) around the request and the highest rise of its resident set
  (/proc/<pid>/status VmRSS, sampled every 2 ms in a thread) over what it was before;
- a read_committed Fetch v12 of partition 0 of a topic of 10 one-record batches, naming it
  once and 2,000 times, in the order one, 2,000, one, 2,000 on one connection (the first ask
  of the connection left out), each ask's wall time and the partitions answered.

The figures in docs/benchmarks.md of 2026-12-01, 18:40 UTC were measured by a throwaway test
in the test process (the listener and its client in one process), not by this script: its
CPU is the service's alone, so its numbers are lower by the client's share, and comparable
between trees only when both are run by it. With --before DIR (another source tree, e.g. `git
archive main | tar -x -C DIR`), both trees' services run on one database, every request asked
of each in turn, before first.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from run import ROOT, Service, _free_port, _proc_cpu  # noqa: E402 - the benchmark's own modules

sys.path.insert(0, str(ROOT))
from app.kafka.protocol import request_class  # noqa: E402
from tests.kafka.conftest import ask  # noqa: E402
from tests.kafka.test_wire import _fetch, _produce_partitions, _records  # noqa: E402
from tests.kafka_batches import ZSTD, compressed  # noqa: E402

MIB = 1 << 20
HOSTILE = [(16 * MIB, 64), (100 * MIB, 16)]  # (the limit, partitions): a batch each, of the limit less 4 KiB
NAMED = 2_000  # a Fetch's entries naming one partition
SAMPLE_S = 0.002


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _measured(pid: int, ask_it: Any) -> tuple[Any, float, float, int]:
    """(the answer, service CPU s, wall s, highest rise of its resident set in bytes)."""
    before, highest, done = _rss_bytes(pid), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            highest[0] = max(highest[0], _rss_bytes(pid))
            time.sleep(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu, wall = _proc_cpu(pid), time.perf_counter()
    try:
        answer = ask_it()
    finally:
        wall, cpu = time.perf_counter() - wall, _proc_cpu(pid) - cpu
        done.set()
        sampler.join()
    return answer, cpu, wall, max(0, highest[0] - before)


def _bytes_topic(service: Service, name: str, partitions: int) -> None:
    httpx.post(f"{service.url}/v1/topics", json={"name": name, "partitions": partitions,
                                                 "config": {"value_format": "bytes"}}).raise_for_status()


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=120)


def hostile_produce(service: Service, bootstrap: str, limit: int, partitions: int, run: int) -> str:
    topic = f"hostile-{limit}-{partitions}-{run}-{time.monotonic_ns()}"
    _bytes_topic(service, topic, partitions)
    batch = compressed(ZSTD, b"a" * (limit - 4096))
    body = _produce_partitions(topic, [(p, batch) for p in range(partitions)])
    with _connect(bootstrap) as s:
        answer, cpu, wall, rss = _measured(service.proc.pid, lambda: ask(s, 0, 9, body))
    codes: dict[str, int] = {}
    for p in answer.responses[0].partition_responses:
        codes[p.error_code.name] = codes.get(p.error_code.name, 0) + 1
    return (f"{partitions} partitions, limit {limit // MIB} MiB, {len(batch):,} B a batch: CPU {cpu:.3f} s, "
            f"wall {wall:.3f} s, RSS +{rss / MIB:.0f} MiB; {codes}")


def duplicate_fetch(service: Service, bootstrap: str) -> list[str]:
    topic = f"fetched-{time.monotonic_ns()}"
    _bytes_topic(service, topic, 1)
    with _connect(bootstrap) as s:
        for _ in range(10):
            ask(s, 0, 9, _produce_partitions(topic, [(0, _records([b"v"]))]))
        once = _fetch(topic, 0, 0)
        (entry,) = once.topics[0].partitions
        named = dataclasses.replace(once, topics=(dataclasses.replace(once.topics[0], partitions=(entry,) * NAMED),))
        ask(s, 1, 12, once)  # the connection's first: left out
        lines = []
        for name, body in (("one entry", once), (f"{NAMED:,} entries", named)) * 2:
            answer, cpu, wall, _ = _measured(service.proc.pid, lambda body=body: ask(s, 1, 12, body))
            answered = sum(len(t.partitions) for t in answer.responses)
            lines.append(f"Fetch, {name}: wall {wall:.3f} s, CPU {cpu:.3f} s, {answered} partitions answered")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--before", type=Path, default=None, help="another source tree, asked in turns with this one")
    args = parser.parse_args(argv)
    trees = {"after": ROOT} if args.before is None else {"before": args.before, "after": ROOT}
    assert request_class(0, 9) is not None and request_class(1, 12) is not None
    with scratch_database(args.db, "kbounds", migrate_with=tuple(trees.values())) as db_url:
        for limit, partitions in HOSTILE:
            for run in range(args.runs):
                for side, tree in trees.items():
                    kafka_port = _free_port()
                    service = Service(db_url, tree, OUTBOX_KAFKA_LISTENER=f"127.0.0.1:{kafka_port}",
                                      OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES=str(limit))
                    try:
                        print(f"{side}, run {run + 1}: "
                              f"{hostile_produce(service, f'127.0.0.1:{kafka_port}', limit, partitions, run)}",
                              flush=True)
                    finally:
                        service.stop()
        for side, tree in trees.items():
            kafka_port = _free_port()
            service = Service(db_url, tree, OUTBOX_KAFKA_LISTENER=f"127.0.0.1:{kafka_port}")
            try:
                for line in duplicate_fetch(service, f"127.0.0.1:{kafka_port}"):
                    print(f"{side}: {line}", flush=True)
            finally:
                service.stop()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
