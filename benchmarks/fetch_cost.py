"""What a Fetch costs the service per record, next to what a Send costs it (the waiting-readers work's target:
no more than a Send's).

    .venv/bin/python benchmarks/fetch_cost.py --db postgresql --rounds 8
    git worktree add /tmp/outbox-before <commit>
    .venv/bin/python benchmarks/fetch_cost.py --db postgresql --before /tmp/outbox-before

Starts `outbox serve` (and, with --before, a second one from another source tree on the same
database), fills a topic with plain records and one with transactions of 100 records, then
takes turns in an order shuffled each round (seeded, printed): Sends of 1,000 plain records,
and 1,000-record Fetches read_committed and read_uncommitted of each topic, from offset 0
again once a reader reaches the end. Prints records/s and the service's CPU µs per record
(user + system from /proc/<pid>/stat, read before and after each turn: what the service
process spent, whatever the client and database did), and each Fetch's CPU per record ÷ the
Send's of the same side, with its spread over each quarter of the rounds.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import orjson
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from run import BATCH, ROOT, Client, Service, _init_producer, _post, _records  # noqa: E402 - the benchmark's own modules

TXN_RECORDS = 100  # records per transaction in the transactional topic


def fill(url: str, records: int) -> None:
    """Topics `plain` and `txn` (one partition each) with `records` records each, and `sink`
    for the Send turns."""
    with Client(url) as c:
        for name in ("plain", "txn", "sink"):
            _post(c, "/v1/topics", {"name": name, "partitions": 1})
        batch = _records(BATCH)
        for _ in range(records // BATCH):
            _post(c, "/v1/records", {"batches": [{"topic": "plain", "partition": 0, "records": batch}]})
        tid = "fill"
        ident = _init_producer(c, tid)
        seq, small = 0, _records(TXN_RECORDS)
        for _ in range(records // TXN_RECORDS):
            _post(c, f"/v1/transactions/{tid}/begin", ident)
            _post(c, "/v1/records", {**ident, "transactional_id": tid, "batches": [
                {"topic": "txn", "partition": 0, "base_sequence": seq, "records": small}]})
            seq += TXN_RECORDS
            _post(c, f"/v1/transactions/{tid}/commit", ident)


class Reader:
    """Fetches of 1,000 records of one topic and isolation, from where the last turn stopped."""

    def __init__(self, url: str, topic: str, isolation: str) -> None:
        self.client, self.topic, self.isolation, self.offset = Client(url), topic, isolation, 0

    def turn(self, seconds: float) -> int:
        n, deadline = 0, time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            page = self.client.get_json(f"/v1/topics/{self.topic}/partitions/0/records",
                                        {"offset": self.offset, "isolation": self.isolation, "max_records": BATCH})
            n += len(page["records"])
            self.offset = 0 if page["next_offset"] >= page["high_watermark"] else page["next_offset"]
        return n


class Sender:
    def __init__(self, url: str) -> None:
        self.client, self.body = Client(url), orjson.dumps(
            {"batches": [{"topic": "sink", "partition": 0, "records": _records(BATCH)}]})

    def turn(self, seconds: float) -> int:
        n, deadline = 0, time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            status, content = self.client.request("POST", "/v1/records", self.body)
            if status != 200:
                raise RuntimeError(f"Send: {status} {content[:300]!r}")
            n += BATCH
        return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--turn-seconds", type=float, default=0.5)
    parser.add_argument("--records", type=int, default=50_000, help="records in each topic read")
    parser.add_argument("--before", type=Path, help="source tree of a 'before' service, on the same database")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    trees = {"after": ROOT} if args.before is None else {"before": args.before, "after": ROOT}
    # The older tree migrates first, should the newer one add migrations.
    with scratch_database(args.db, "fetch", migrate_with=list(trees.values())) as db_url:
        services: dict[str, Service] = {}
        try:
            for side, root in trees.items():
                # Turns of other paths keep a connection idle for longer than the default 5 s.
                services[side] = Service(db_url, root, OUTBOX_HTTP_KEEP_ALIVE_TIMEOUT_S="600")
            fill(services["after"].url, args.records)
            if args.db == "postgresql":
                with create_engine(db_url, isolation_level="AUTOCOMMIT").connect() as c:
                    c.execute(text("VACUUM ANALYZE"))  # the fill's rows all-visible, as a settled log's are
            paths: dict[tuple[str, str], object] = {}
            for side, service in services.items():
                paths[(side, "Send, plain")] = Sender(service.url)
                for topic in ("plain", "txn"):
                    for isolation in ("read_committed", "read_uncommitted"):
                        paths[(side, f"Fetch {isolation}, {topic}")] = Reader(service.url, topic, isolation)
            for p in paths.values():
                p.turn(0.2)  # warm: connections, caches, the first plans
            rng = random.Random(args.seed)
            counts: dict[tuple[str, str], list[tuple[int, float, float]]] = {k: [] for k in paths}
            for _ in range(args.rounds):
                order = list(paths)
                rng.shuffle(order)
                for key in order:
                    service = services[key[0]]
                    cpu0, t0 = service.cpu_seconds(), time.perf_counter()
                    n = paths[key].turn(args.turn_seconds)  # type: ignore[attr-defined]
                    counts[key].append((n, time.perf_counter() - t0, service.cpu_seconds() - cpu0))
        finally:
            for s in services.values():
                s.stop()

    print(f"# Fetch against Send, service CPU per record: {args.db}, {os.cpu_count()} cores, {args.rounds} rounds "
          f"of {args.turn_seconds} s turns in shuffled order (seed {args.seed}), {args.records:,} records a topic, "
          f"transactions of {TXN_RECORDS}\n")
    print("| side | path | records/s | service CPU µs/record | ÷ Send's CPU/record (quarters) |")
    print("|---|---|---:|---:|---|")

    def per_record(turns: list[tuple[int, float, float]]) -> float:
        return sum(c for _, _, c in turns) / max(1, sum(n for n, _, _ in turns)) * 1e6

    q = max(1, args.rounds // 4)
    for key, turns in counts.items():
        side, name = key
        send = counts[(side, "Send, plain")]
        rate = sum(n for n, _, _ in turns) / sum(t for _, t, _ in turns)
        ratio = per_record(turns) / per_record(send)
        quarters = [per_record(turns[i:i + q]) / per_record(send[i:i + q]) for i in range(0, args.rounds, q)]
        spread = ", ".join(f"{r:.2f}" for r in quarters)
        print(f"| {side} | {name} | {rate:,.0f} | {per_record(turns):.2f} | {ratio:.2f} ({spread}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
