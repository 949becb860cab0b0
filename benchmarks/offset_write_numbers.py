"""What a plain offset commit (GroupService.commit: an HTTP commit, Kafka's OffsetCommit) pays
for its write number (offsets.next_writes: a nextval of the sequence offset_writes on
PostgreSQL, an UPDATE of the counter row on SQLite), which lets an offset committed after a
transaction's staging stay when that transaction commits (migration 0037), against the same
commit numbered without asking the database (every number 0, in this process) in the same run.

    .venv/bin/python benchmarks/offset_write_numbers.py --partitions 1 --rounds 400
    .venv/bin/python benchmarks/offset_write_numbers.py --partitions 50 --rounds 200 --database sqlite

On a scratch database: a topic of `--partitions` partitions, then `--rounds` turns, each
committing an offset of every partition of the group "g" once numbered and once not, in
alternating order (wall clock in this process: the service's cost and its wait for the
database). Prints the medians (ms a call) and their ratio, numbered over not.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratch import scratch_database  # noqa: E402

from app.composition import Services  # noqa: E402
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage import offsets as stored_offsets  # noqa: E402
from app.storage.engine import Database, build_engine  # noqa: E402

NOW_MS = 1_700_000_000_000


def measure(kind: str, partitions: int, rounds: int) -> None:
    with scratch_database(kind, "offsetwrites") as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
        db = Database(build_engine(url, pool_size=2))
        try:
            services = Services.build(settings, db, lambda: NOW_MS)
            services.topics.create("t", partitions)
            numbered = stored_offsets.next_writes

            def timed(with_numbers: bool, offset: int) -> float:
                stored_offsets.next_writes = numbered if with_numbers else (lambda conn, count: [0] * count)
                try:
                    start = time.perf_counter()
                    services.group_offsets.commit("g", [OffsetToStage("t", q, offset, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)
                                                 for q in range(partitions)])
                    return (time.perf_counter() - start) * 1000
                finally:
                    stored_offsets.next_writes = numbered

            timings: dict[bool, list[float]] = {True: [], False: []}
            for i in range(rounds):
                for with_numbers in ((True, False) if i % 2 else (False, True)):
                    timings[with_numbers].append(timed(with_numbers, i))
            yes, no = statistics.median(timings[True]), statistics.median(timings[False])
            print(f"{kind}: committing {partitions} offsets a call, medians of {rounds}: numbered {yes:.3f} ms, "
                  f"not {no:.3f} ms, ratio {yes / no:.3f}")
        finally:
            db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    measure(args.database, args.partitions, args.rounds)


if __name__ == "__main__":
    main()
