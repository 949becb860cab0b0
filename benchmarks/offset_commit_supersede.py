"""What a plain offset commit (GroupService.commit: an HTTP commit, Kafka's OffsetCommit) pays
for marking the same group's offsets staged in unfinished transactions as superseded
(offsets.supersede_staged: one UPDATE of transaction_offsets by the group's keys, which the
index ix_transaction_offsets_group finds), against the same commit without it (the mark
replaced by nothing, in this process) in the same run.

    .venv/bin/python benchmarks/offset_commit_supersede.py --partitions 1 --rounds 400
    .venv/bin/python benchmarks/offset_commit_supersede.py --partitions 50 --rounds 200 --database sqlite

On a scratch database: a topic of `--partitions` partitions and `--staged` transactions each
holding an offset of every partition staged for another group (the index is not empty, as on a
busy service), then `--rounds` turns, each committing an offset of every partition of the group
"g" once with the mark and once without, in alternating order (wall clock in this process: the
service's cost and its wait for the database). Prints the medians (ms a call) and their ratio,
with the mark over without.
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


def measure(kind: str, partitions: int, rounds: int, staged: int) -> None:
    with scratch_database(kind, "supersede") as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
        db = Database(build_engine(url, pool_size=2))
        try:
            services = Services.build(settings, db, lambda: NOW_MS)
            services.topics.create("t", partitions)
            for n in range(staged):
                p = services.coordinator.init_producer_id(transactional_id=f"tx{n}", transaction_timeout_ms=900_000)
                services.coordinator.begin(f"tx{n}", p.producer_id, p.producer_epoch)
                services.coordinator.add_offsets(f"tx{n}", p.producer_id, p.producer_epoch, f"other{n}", [
                    OffsetToStage("t", q, 1, None, NO_LEADER_EPOCH, ReadOrder.COMMIT) for q in range(partitions)])
            mark = stored_offsets.supersede_staged

            def timed(with_mark: bool, offset: int) -> float:
                stored_offsets.supersede_staged = mark if with_mark else (lambda conn, rows: None)
                try:
                    start = time.perf_counter()
                    services.groups.commit("g", [OffsetToStage("t", q, offset, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)
                                                 for q in range(partitions)])
                    return (time.perf_counter() - start) * 1000
                finally:
                    stored_offsets.supersede_staged = mark

            timings: dict[bool, list[float]] = {True: [], False: []}
            for i in range(rounds):
                for with_mark in ((True, False) if i % 2 else (False, True)):
                    timings[with_mark].append(timed(with_mark, i))
            marked, plain = statistics.median(timings[True]), statistics.median(timings[False])
            print(f"{kind}: committing {partitions} offsets a call beside {staged} staging transactions, medians of "
                  f"{rounds}: with the mark {marked:.3f} ms, without {plain:.3f} ms, ratio {marked / plain:.3f}")
        finally:
            db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--staged", type=int, default=100)
    args = parser.parse_args()
    measure(args.database, args.partitions, args.rounds, args.staged)


if __name__ == "__main__":
    main()
