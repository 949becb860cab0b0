"""What the high watermark (storage.topics.high_watermark) costs a read on PostgreSQL: per Fetch,
the service's and the database's CPU, with many Ongoing ordinary transactions holding the
partition and with none; and the bounds statement alone, with and without its high watermark.

    git worktree add --detach /tmp/hwm-before main
    .venv/bin/python benchmarks/hwm_cost.py --before /tmp/hwm-before --rounds 8

Starts `outbox serve` from this tree (and, with --before, one from the other tree, each on its own
scratch database migrated by its own tree, so that each reads with its own indexes), and fills,
on each, three topics of one partition with 10,000 plain records each: `quiet`
(nothing open), `busy` (then `--open` transactions of producers of durability "send", each
Ongoing with one record there) and `held` (the same, and one Ongoing transaction of a
producer of durability "commit" after them, which holds the high watermark back), and with
--open-commit that many Ongoing transactions of other "commit" producers in a fourth topic,
`elsewhere` (the case a read from their side pays for). Then takes
turns, in an order shuffled each round (seeded, printed), of 0.5 s of read_uncommitted Fetches
of one record at the partition's high watermark minus one (the tailing reader, whose request is
mostly the bounds statement), per side and topic, reading the service's CPU (/proc/<pid>/stat)
and the scratch database's backends' before and after each turn.

The database part alone, on each side's database: the bounds statement as this tree writes it
(topics.bounds_stmt) on the after side, as it was before migration 0026 (`_main_high_watermark`, a frozen copy) on the
before side, and on both the same without its high watermark column, executed in turns on one
connection each; and EXPLAIN ANALYZE of each on each topic.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from sqlalchemy import and_, bindparam, case, create_engine, func, select, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from run import ROOT, Client, CpuMeter, Service, _init_producer, _post, _records  # noqa: E402

TOPICS = ("quiet", "busy", "held")
FILL = 10_000


def fill(url: str, open_count: int, open_commit: int) -> None:
    with Client(url) as c:
        for name in (*TOPICS, "elsewhere"):
            _post(c, "/v1/topics", {"name": name, "partitions": 1})
        for name in TOPICS:
            for _ in range(FILL // 1_000):
                _post(c, "/v1/records", {"batches": [{"topic": name, "partition": 0, "records": _records(1_000)}]})

        def open_one(tid: str, topic: str, durability: str) -> None:
            ident = _init_producer(c, tid, transaction_version=2, durability=durability)
            _post(c, "/v1/records", {**ident, "transactional_id": tid, "batches": [
                {"topic": topic, "partition": 0, "base_sequence": 0, "records": _records(1)}]})

        for name in ("busy", "held"):
            for i in range(open_count):
                open_one(f"{name}-{i}", name, "send")
        open_one("held-commit", "held", "commit")
        for i in range(open_commit):
            open_one(f"elsewhere-{i}", "elsewhere", "commit")


class Tail:
    """read_uncommitted Fetches of one record, from the high watermark minus one."""

    def __init__(self, url: str, topic: str) -> None:
        self.client, self.topic = Client(url), topic
        page = self.client.get_json(f"/v1/topics/{topic}/partitions/0/records",
                                    {"offset": 0, "isolation": "read_uncommitted", "max_records": 1})
        self.offset = page["high_watermark"] - 1

    def turn(self, seconds: float) -> int:
        n, deadline = 0, time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            page = self.client.get_json(f"/v1/topics/{self.topic}/partitions/0/records",
                                        {"offset": self.offset, "isolation": "read_uncommitted", "max_records": 1})
            if len(page["records"]) != 1:
                raise RuntimeError(f"expected one record at {self.offset}: {page}")
            n += 1
        return n


def _main_high_watermark() -> Any:
    """The high watermark's statement as app/storage/topics.py wrote it before migration 0026
    (the join of transaction_partitions and transactions, compared with the log end in a CASE):
    a frozen copy, the baseline this benchmark measures against, not a second definition; the
    service reads only topics.high_watermark."""
    from app.domain.types import Durability, TransactionState
    from app.storage.tables import partitions, transaction_partitions, transactions

    tp, txn = transaction_partitions.c, transactions.c
    first_not_durable = (
        select(func.min(tp.first_offset))
        .select_from(transaction_partitions.join(
            transactions, and_(txn.transactional_id == tp.transactional_id, txn.txn_id == tp.txn_id)))
        .where(tp.topic_id == partitions.c.topic_id, tp.partition == partitions.c.partition,
               txn.state == TransactionState.ONGOING.value, txn.durability == Durability.COMMIT.value)
        .scalar_subquery()
    )
    return case((first_not_durable < partitions.c.next_offset, first_not_durable),
                else_=partitions.c.next_offset).label("high_watermark")


def _statements(side: str) -> dict[str, Any]:
    from app.storage import topics as t
    from app.storage.tables import partitions

    where = (partitions.c.topic_id == bindparam("topic_id"), partitions.c.partition == bindparam("partition"))
    bounds = (partitions.c.next_offset, partitions.c.log_start_offset, t.LAST_STABLE_OFFSET)
    with_hwm = t.bounds_stmt("postgresql") if side == "after" else select(*bounds, _main_high_watermark()).where(*where)
    return {f"{side}: bounds with high watermark": with_hwm, f"{side}: bounds without": select(*bounds).where(*where)}


def statements(db_urls: dict[str, str], rounds: int, seed: int) -> None:
    """Each side's bounds statement with and without its high watermark column, in turns; EXPLAIN ANALYZE."""
    engines = {side: create_engine(url) for side, url in db_urls.items()}
    stmts = {label: (side, stmt) for side in db_urls for label, stmt in _statements(side).items()}
    with ExitStack() as stack:
        conns = {side: stack.enter_context(e.connect()) for side, e in engines.items()}
        ids = {(side, name): conn.execute(text("SELECT topic_id FROM topics WHERE name = :n"),
                                          {"n": name}).scalar_one()
               for side, conn in conns.items() for name in TOPICS}
        for label, (side, stmt) in stmts.items():
            conn = conns[side]
            compiled = stmt.compile(dialect=conn.dialect)
            for name in TOPICS:
                plan = conn.exec_driver_sql(
                    f"EXPLAIN (ANALYZE, COSTS OFF) {compiled}",
                    {**compiled.params, "topic_id": ids[(side, name)], "partition": 0}).scalars().all()
                print(f"\n### EXPLAIN ANALYZE, {label}, topic {name}\n\n    " + "\n    ".join(plan))
        rng = random.Random(seed)
        times: dict[tuple[str, str], list[tuple[int, float]]] = {}
        keys = [(name, label) for name in TOPICS for label in stmts]
        for _ in range(rounds):
            rng.shuffle(keys)
            for name, label in keys:
                side, stmt = stmts[label]
                n, t0, deadline = 0, time.perf_counter(), time.perf_counter() + 0.3
                while time.perf_counter() < deadline:
                    conns[side].execute(stmt, {"topic_id": ids[(side, name)], "partition": 0}).one()
                    n += 1
                times.setdefault((name, label), []).append((n, time.perf_counter() - t0))
            for conn in conns.values():
                conn.rollback()
    for e in engines.values():
        e.dispose()
    print("\n| topic | statement | µs per execution (round trip included) |\n|---|---|---:|")
    for (name, label), turns in sorted(times.items()):
        print(f"| {name} | {label} | {sum(s for _, s in turns) / sum(n for n, _ in turns) * 1e6:.0f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--turn-seconds", type=float, default=0.5)
    parser.add_argument("--open", type=int, default=1_000, help="Ongoing ordinary transactions in busy and held")
    parser.add_argument("--open-commit", type=int, default=0,
                        help='Ongoing transactions of other durability "commit" producers, in topic elsewhere')
    parser.add_argument("--before", type=Path, help="source tree of a 'before' service, on a database of its own")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    trees = {"after": ROOT} if args.before is None else {"before": args.before, "after": ROOT}
    with ExitStack() as stack:
        db_urls = {side: stack.enter_context(scratch_database("postgresql", f"hwm_{side}", migrate_with=[root]))
                   for side, root in trees.items()}
        services: dict[str, Service] = {}
        meters: dict[str, CpuMeter] = {}
        try:
            for side, root in trees.items():
                services[side] = Service(db_urls[side], root, OUTBOX_HTTP_KEEP_ALIVE_TIMEOUT_S="600",
                                         OUTBOX_DEFAULT_TRANSACTION_TIMEOUT_MS="900000")
                meters[side] = CpuMeter(services[side], db_urls[side])
                fill(services[side].url, args.open, args.open_commit)
            for url in db_urls.values():
                with create_engine(url, isolation_level="AUTOCOMMIT").connect() as c:
                    c.execute(text("VACUUM ANALYZE"))
            tails = {(side, topic): Tail(s.url, topic) for side, s in services.items() for topic in TOPICS}
            for tail in tails.values():
                tail.turn(0.2)  # warm: connections, caches, the first plans
            rng = random.Random(args.seed)
            turns: dict[tuple[str, str], list[tuple[int, float, float, float]]] = {k: [] for k in tails}
            for _ in range(args.rounds):
                order = list(tails)
                rng.shuffle(order)
                for key in order:
                    t0 = time.perf_counter()
                    n, cpu = meters[key[0]].measure(lambda: tails[key].turn(args.turn_seconds))
                    turns[key].append((n, time.perf_counter() - t0, cpu.service, cpu.database or 0.0))
            load = os.getloadavg()
            print(f"# The high watermark's cost on reads: PostgreSQL, {os.cpu_count()} cores, load average "
                  f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end, {args.rounds} rounds of "
                  f"{args.turn_seconds} s turns in shuffled order (seed {args.seed}), {args.open} Ongoing "
                  f"ordinary transactions in busy and held, {args.open_commit} of other \"commit\" producers "
                  f"elsewhere\n")
            print("| side | topic | Fetches/s | service CPU µs/Fetch | database CPU µs/Fetch | "
                  "database ÷ before's (quarters) |\n|---|---|---:|---:|---:|---|")
            q = max(1, args.rounds // 4)

            def per(ts: list[tuple[int, float, float, float]], i: int) -> float:
                return sum(x[i] for x in ts) / max(1, sum(x[0] for x in ts)) * 1e6

            for (side, topic), ts in sorted(turns.items(), key=lambda kv: (kv[0][1], kv[0][0])):
                ratio = ""
                if "before" in trees:
                    b = turns[("before", topic)]
                    quarters = [per(ts[i:i + q], 3) / per(b[i:i + q], 3) for i in range(0, args.rounds, q)]
                    ratio = f"{per(ts, 3) / per(b, 3):.2f} ({', '.join(f'{r:.2f}' for r in quarters)})"
                rate = sum(x[0] for x in ts) / sum(x[1] for x in ts)
                print(f"| {side} | {topic} | {rate:,.0f} | {per(ts, 2):.0f} | {per(ts, 3):.0f} | {ratio} |")
        finally:
            for m in meters.values():
                m.close()
            for s in services.values():
                s.stop()
        statements(db_urls, args.rounds, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
