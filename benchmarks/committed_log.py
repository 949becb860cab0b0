"""A realistic partition log for the Spark benchmarks and query plans, written over HTTP.

Starts `outbox serve` on the given database (migrating it first) and fills topic `orders`
through the public API with the project's client: per partition, plain (idempotent,
non-transactional) batches interleaved with the batches of two transactional producers whose
transactions overlap; 90% of the transactions commit, 10% abort, and the last one of each
producer is left open. So the log mixes plain records, committed, aborted and open
transactions' records, and COMMIT and ABORT markers, as a busy topic would.

    python benchmarks/committed_log.py DATABASE_URL [--records-per-partition N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.client import Producer  # noqa: E402

TOPIC = "orders"
PARTITIONS = 4
PLAIN_BATCH = 25
TXN_BATCH = 25
TXN_RECORDS = 50  # two Sends per transaction, interleaved with plain batches and the other producer
TXN_PRODUCERS_PER_PARTITION = 2
COMMIT_RATIO = 0.9
MEALS = ("Pizza", "Pizza", "Burger", "Salad", "Pasta")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(database_url: str) -> Iterator[str]:
    """`outbox migrate` then `outbox serve` on a free port; yields its URL, stops it after."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")},
           "OUTBOX_DATABASE_URL": database_url, "OUTBOX_LOG_LEVEL": "warning"}
    subprocess.run([sys.executable, "-m", "app.cli", "migrate"], cwd=ROOT, env=env, check=True)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"outbox serve did not start (exit {proc.poll()})")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def order(i: int, rng: random.Random) -> dict:
    return {"order_id": i, "meal": rng.choice(MEALS), "value": round(rng.uniform(5, 30), 2),
            "customer": f"c-{i % 100_000:06d}", "note": "extra basil"}


def fill(url: str, records_per_partition: int, *, partitions: int = PARTITIONS, seed: int = 42) -> dict:
    """Write the log; returns counts of what was written."""
    rng = random.Random(seed)
    r = httpx.post(f"{url}/v1/topics", json={"name": TOPIC, "partitions": partitions}, timeout=30)
    r.raise_for_status()
    plain = Producer(url, batch_records=PLAIN_BATCH * partitions)
    txn_producers = {}
    for p in range(partitions):
        for k in range(TXN_PRODUCERS_PER_PARTITION):
            tp = Producer(url, f"bench-{p}-{k}", transaction_timeout_ms=900_000)
            tp.init_transactions()
            txn_producers[(p, k)] = [tp, 0]  # producer, records in its open transaction
    counter = 0
    counts = {"plain": 0, "committed": 0, "aborted": 0, "open": 0, "transactions": 0}
    written = [0] * partitions
    t0 = time.monotonic()
    while min(written) < records_per_partition:
        for p in range(partitions):
            if written[p] >= records_per_partition:
                continue
            for _ in range(PLAIN_BATCH):
                counter += 1
                plain.send(TOPIC, order(counter, rng), key=f"order-{counter}", partition=p)
            written[p] += PLAIN_BATCH
            counts["plain"] += PLAIN_BATCH
        plain.flush()
        for p in range(partitions):
            if written[p] >= records_per_partition:
                continue
            slot = txn_producers[(p, rng.randrange(TXN_PRODUCERS_PER_PARTITION))]
            tp, in_txn = slot
            if in_txn == 0:
                tp.begin_transaction()
            for _ in range(TXN_BATCH):
                counter += 1
                tp.send(TOPIC, order(counter, rng), key=f"order-{counter}", partition=p)
            tp.flush()
            slot[1] += TXN_BATCH
            written[p] += TXN_BATCH
            if slot[1] >= TXN_RECORDS and written[p] < records_per_partition:
                counts["transactions"] += 1
                if rng.random() < COMMIT_RATIO:
                    tp.commit_transaction()
                    counts["committed"] += slot[1]
                else:
                    tp.abort_transaction()
                    counts["aborted"] += slot[1]
                slot[1] = 0
    for _producer, in_txn in txn_producers.values():
        counts["open"] += in_txn  # left open on purpose: a read_committed reader skips them
    counts["seconds"] = round(time.monotonic() - t0, 1)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database_url")
    parser.add_argument("--records-per-partition", type=int, default=50_000)
    args = parser.parse_args(argv)
    with serve(args.database_url) as url:
        print(fill(url, args.records_per_partition))
    return 0


if __name__ == "__main__":
    sys.exit(main())
