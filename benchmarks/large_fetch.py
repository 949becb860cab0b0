"""What the spool costs a client that reads a large Fetch as fast as it can (the slow-readers
work: a large answer is read to its end into a spool, app/services/spool.py, and sent from it,
rather than read as the client takes it).

    git clone -q <repository> /tmp/outbox-before && git -C /tmp/outbox-before checkout <commit>
    .venv/bin/python benchmarks/large_fetch.py --db postgresql --before /tmp/outbox-before

Starts `outbox serve` from each of the two trees (benchmarks/before_after.py's --before and
--after) on the same database; fills a topic with records of --value-bytes, then takes turns, in an
order shuffled each round (seeded, printed), of GET .../records Fetches of --answer-mib each
(max_bytes set to take them whole, an answer past 1 MiB: streamed), read whole by the client
(http.client, as fast as loopback takes it). Prints each side's median seconds per Fetch, its
MB/s of answer, the service's CPU per Fetch, and after ÷ before of the median, with its spread
over each quarter of the rounds.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from before_after import services, tree_arguments  # noqa: E402 - the benchmark's own modules
from run import Client, _post  # noqa: E402
from scratch import scratch_database  # noqa: E402


def fill(url: str, records: int, value_bytes: int) -> None:
    with Client(url, timeout=300) as c:
        _post(c, "/v1/topics", {"name": "big", "partitions": 1, "config": {"max_message_bytes": 2 * value_bytes}})
        per = max(1, (8 << 20) // value_bytes)  # Sends of about 8 MiB
        for first in range(0, records, per):
            _post(c, "/v1/records", {"batches": [{"topic": "big", "partition": 0, "records": [
                {"value": f"{n:08d}" + "x" * (value_bytes - 10)} for n in range(first, min(first + per, records))]}]})


def fetch(c: Client, records: int) -> int:
    status, body = c.request("GET", f"/v1/topics/big/partitions/0/records?max_records={records}&max_bytes={48 << 20}")
    if status != 200:
        raise RuntimeError(f"Fetch: {status} {body[:300]!r}")
    return len(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--answer-mib", type=int, default=32, help="MiB of records in each Fetch")
    parser.add_argument("--value-bytes", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    tree_arguments(parser)
    args = parser.parse_args(argv)

    records = (args.answer_mib << 20) // args.value_bytes
    with (scratch_database(args.db, "large_fetch", migrate_with=[args.before, args.after]) as db_url,
          services(db_url, args.before, args.after,
                   lambda side: {"OUTBOX_HTTP_KEEP_ALIVE_TIMEOUT_S": "600"}) as started):
        fill(started["after"].url, records, args.value_bytes)
        clients = {side: Client(s.url, timeout=300) for side, s in started.items()}
        size = 0
        for c in clients.values():
            size = fetch(c, records)  # warm: connections, caches, the first plans
        rng = random.Random(args.seed)
        turns: dict[str, list[tuple[float, float]]] = {side: [] for side in started}
        for _ in range(args.rounds):
            order = list(started)
            rng.shuffle(order)
            for side in order:
                cpu0, t0 = started[side].cpu_seconds(), time.perf_counter()
                fetch(clients[side], records)
                turns[side].append((time.perf_counter() - t0, started[side].cpu_seconds() - cpu0))

    print(f"# A large Fetch read whole as fast as the client can: {args.db}, {os.cpu_count()} cores, "
          f"{args.rounds} rounds in shuffled order (seed {args.seed}), {records} records of {args.value_bytes:,} "
          f"bytes, answers of {size / 1e6:.1f} MB\n")
    print("| side | median s/Fetch | MB/s | service CPU s/Fetch |")
    print("|---|---:|---:|---:|")
    for side, ts in turns.items():
        median = statistics.median(t for t, _ in ts)
        print(f"| {side} | {median:.3f} | {size / 1e6 / median:,.0f} | {statistics.median(c for _, c in ts):.3f} |")
    q = -(-args.rounds // 4)

    def ratio(a: int, b: int, i: int) -> float:
        return (statistics.median(turn[i] for turn in turns["after"][a:b])
                / statistics.median(turn[i] for turn in turns["before"][a:b]))

    for i, name in enumerate(("median s/Fetch", "median service CPU s/Fetch")):
        spread = ", ".join(f"{ratio(a, a + q, i):.2f}" for a in range(0, args.rounds, q))
        print(f"\nafter ÷ before, {name}: {ratio(0, args.rounds, i):.2f} (quarters: {spread})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
