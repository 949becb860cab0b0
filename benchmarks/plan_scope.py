"""What a Commit's statements cost on the service's PostgreSQL connections, where a statement
that names `records` is never prepared and every other one is (app.storage.engine), against the
same connection with `plan_cache_mode = force_custom_plan`, which plans every statement again
on each execution: the way the service's connections were set before.

    .venv/bin/python benchmarks/plan_scope.py --topics 250 --executions 2000 --rounds 5

A scratch database at the migrations' head with `--topics` topics of 4 partitions (a leaf of
`records` each). On one connection of the service's engine (app.storage.engine.open_database),
three statements a Commit and a read run: the partition row's `SELECT … FOR UPDATE` (every
append and completion takes it), a range of `record_batches`, and a one-partition range of
`records`. Each is run 50 times first (psycopg prepares a statement at its fifth execution),
then `--executions` times, cycling over the partitions, timed; the two ways in turns, in an
order shuffled each round. Prints µs per execution (medians over the rounds) and, per
statement, the service's ÷ the forced way's: below 1 is cheaper.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sqlalchemy import text  # noqa: E402

from app.domain.clock import system_clock  # noqa: E402
from app.domain.topic_config import TopicConfig  # noqa: E402
from app.services.topic_service import TopicService  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage.engine import open_database  # noqa: E402
from scratch import scratch_database  # noqa: E402

STATEMENTS = {
    "partition row FOR UPDATE": 'SELECT next_offset FROM partitions WHERE topic_id = :t AND "partition" = :p FOR UPDATE',
    "record_batches range": ('SELECT base_offset, record_count FROM record_batches WHERE topic_id = :t '
                             'AND "partition" = :p AND base_offset >= :o ORDER BY base_offset LIMIT 10'),
    "records range (one leaf)": ('SELECT "offset" FROM records WHERE topic_id = :t AND "partition" = :p '
                                 'AND "offset" >= :o ORDER BY "offset" LIMIT 10'),
}
WAYS = ("service", "forced")
PARTITIONS = 4


def timed(conn, statement: str, keys: list[tuple[int, int]], executions: int) -> float:  # type: ignore[no-untyped-def]
    """µs per execution, in one transaction (rolled back: the FOR UPDATE locks go with it)."""
    query = text(statement)
    with conn.begin() as txn:
        for t, p in keys[:50]:
            conn.execute(query, {"t": t, "p": p, "o": 0}).all()
        start = time.perf_counter()
        for i in range(executions):
            t, p = keys[i % len(keys)]
            conn.execute(query, {"t": t, "p": p, "o": 0}).all()
        elapsed = time.perf_counter() - start
        txn.rollback()
    return elapsed / executions * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=250, help=f"topics of {PARTITIONS} partitions (a leaf each)")
    parser.add_argument("--executions", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = random.randrange(1_000_000) if args.seed is None else args.seed
    rng = random.Random(seed)
    with scratch_database("postgresql", "plan_scope") as url:
        settings = Settings(database_url=url)
        db = open_database(settings, pool_size=1)
        topics = TopicService(db, settings, system_clock)
        ids = [topics.create(f"t{i}", PARTITIONS, TopicConfig()).topic_id for i in range(args.topics)]
        keys = [(t, p) for t in ids for p in range(PARTITIONS)]
        rng.shuffle(keys)
        print(f"{args.topics * PARTITIONS:,} leaves, {args.executions:,} executions a turn, "
              f"{args.rounds} rounds, seed {seed}")
        times: dict[tuple[str, str], list[float]] = {(s, w): [] for s in STATEMENTS for w in WAYS}
        with db.engine.connect() as conn:
            for _ in range(args.rounds):
                for name, statement in STATEMENTS.items():
                    for way in rng.sample(WAYS, len(WAYS)):
                        conn.exec_driver_sql("SET plan_cache_mode = " + ("force_custom_plan" if way == "forced" else "auto"))
                        conn.commit()
                        times[(name, way)].append(timed(conn, statement, keys, args.executions))
        db.engine.dispose()
    print("| statement | service µs | forced µs | service ÷ forced |")
    print("| --- | ---: | ---: | ---: |")
    for name in STATEMENTS:
        service, forced = (statistics.median(times[(name, w)]) for w in WAYS)
        print(f"| {name} | {service:,.1f} | {forced:,.1f} | {service / forced:.2f} |")


if __name__ == "__main__":
    main()
