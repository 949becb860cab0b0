"""What a transaction's staging of offsets (AddOffsets / TxnOffsetCommit,
TransactionCoordinator.add_offsets) pays for holding the committed offsets it stages new ones
for (offsets.hold_committed: one SELECT ... FOR KEY SHARE of their keys, on PostgreSQL, taken
when OUTBOX_OFFSETS_RETENTION_MINUTES is set), against the same staging without it (the hold
replaced by nothing, in this process, as with the setting unset) in the same run.

    .venv/bin/python benchmarks/stage_offsets_hold.py --partitions 1 --rounds 400
    .venv/bin/python benchmarks/stage_offsets_hold.py --partitions 50 --rounds 200

On a scratch PostgreSQL database: a topic of `--partitions` partitions, the group "g" with an
offset committed on each, one transaction begun; then `--rounds` turns, each staging an offset
of every partition once with the hold and once without, in alternating order (wall clock in
this process: the service's cost and its wait for the database). Prints the medians (ms a
call) and their ratio, with-hold over without.
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


def measure(partitions: int, rounds: int) -> None:
    with scratch_database("postgresql", "stageoffsets") as url:
        # The retention set: the staging takes the hold only then (unset, it stages as "without").
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False,
                            offsets_retention_minutes=10_080)
        db = Database(build_engine(url, pool_size=2))
        try:
            services = Services.build(settings, db, lambda: NOW_MS)
            services.topics.create("t", partitions)
            services.group_offsets.commit("g", [OffsetToStage("t", p, 1, None, NO_LEADER_EPOCH, ReadOrder.COMMIT) for p in range(partitions)])
            p = services.coordinator.init_producer_id(transactional_id="tx", transaction_timeout_ms=900_000)
            services.coordinator.begin("tx", p.producer_id, p.producer_epoch)
            hold = stored_offsets.hold_committed

            def stage(offset: int) -> None:
                services.coordinator.add_offsets("tx", p.producer_id, p.producer_epoch, "g",
                                                 [OffsetToStage("t", q, offset, None, NO_LEADER_EPOCH, ReadOrder.COMMIT) for q in range(partitions)])

            def timed(with_hold: bool, offset: int) -> float:
                stored_offsets.hold_committed = hold if with_hold else (lambda conn, keys: None)
                try:
                    start = time.perf_counter()
                    stage(offset)
                    return (time.perf_counter() - start) * 1000
                finally:
                    stored_offsets.hold_committed = hold

            timings: dict[bool, list[float]] = {True: [], False: []}
            for i in range(rounds):
                for with_hold in ((True, False) if i % 2 else (False, True)):
                    timings[with_hold].append(timed(with_hold, i))
            held, plain = statistics.median(timings[True]), statistics.median(timings[False])
            print(f"postgresql: staging {partitions} offsets a call, medians of {rounds}: "
                  f"with the hold {held:.3f} ms, without {plain:.3f} ms, ratio {held / plain:.3f}")
        finally:
            db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    measure(args.partitions, args.rounds)


if __name__ == "__main__":
    main()
