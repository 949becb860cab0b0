"""What a retry of one of an idempotent producer's earlier batches costs (not its last one):
check_sequence asks storage for the producer's batches before its last one, a walk of the
partition's batch rows backwards from it (app.storage.sequence_state.earlier_batches, at most
EARLIER_BATCHES_SCANNED rows).

    .venv/bin/python benchmarks/earlier_batch_retry.py --db postgresql --rounds 60 --seed 7

In the service layer (LogService.send, no HTTP), on a scratch database: per gap G (the other
writer's batches of one record between a producer's first batch and its four next ones), a topic
of its own; and one where the producer's two batches have 2 * EARLIER_BATCHES_SCANNED batches
between them (the walk's worst case, which anyone holding a producer id can ask for: an overlap
that matches none of its batches, answered DUPLICATE_SEQUENCE_NUMBER once the walk ends). Each
round times, in an order shuffled afresh from the printed seed: the retry of the last batch (the
reference: the state read back, as before this walk existed), the retry of the fifth batch back
for each gap, and the worst case. Prints each one's median on the wall clock and its ratio to
the reference's median in the same run, with that ratio over each quarter of the rounds; the
same in this thread's CPU time (which other work on the machine stretches less, but which does
not count PostgreSQL's); and the walk's statement alone (earlier_batches in a read transaction,
after each Send), in milliseconds on the wall clock.
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratch import scratch_database  # noqa: E402

from app.composition import Services  # noqa: E402
from app.domain.errors import DuplicateSequenceNumber  # noqa: E402
from app.domain.records import RecordToAppend, SendBatch  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage.engine import Database, build_engine  # noqa: E402
from app.storage.sequence_state import EARLIER_BATCHES_SCANNED, earlier_batches  # noqa: E402


def _records(n: int) -> list[RecordToAppend]:
    return [RecordToAppend(f"k{i}", '{"n": 1}', None, 1) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--gaps", type=int, nargs="+", default=[0, 1_000, EARLIER_BATCHES_SCANNED - 4])
    parser.add_argument("--worst", type=int, default=2 * EARLIER_BATCHES_SCANNED,
                        help="the other writer's batches between the two batches of the worst case")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"db {args.db}, rounds {args.rounds}, seed {args.seed}, EARLIER_BATCHES_SCANNED {EARLIER_BATCHES_SCANNED}, "
          f"load {os.getloadavg()[0]:.1f}")
    with scratch_database(args.db, "earlyretry") as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
        db = Database(build_engine(url, pool_size=2))
        services = Services.build(settings, db, lambda: int(time.time() * 1000))
        log = services.log
        p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)

        def idempotent(topic: str, base_sequence: int, count: int = 1) -> int:
            (r,) = log.send([SendBatch(topic, 0, _records(count), base_sequence)], producer_id=p.producer_id,
                            producer_epoch=p.producer_epoch, transactional_id=None)
            return r.base_offset

        def others(topic: str, n: int) -> None:
            for _ in range(n):
                log.send([SendBatch(topic, 0, _records(1))], producer_id=None, producer_epoch=None,
                         transactional_id=None)

        cases = {}
        last_offsets = {}  # the producer's last batch's base offset, per topic
        for gap in args.gaps:
            topic = f"gap{gap}"
            services.topics.create(topic, 1)
            first = idempotent(topic, 0)
            others(topic, gap)
            last = last_offsets[topic] = [idempotent(topic, s) for s in range(1, 5)][-1]
            cases["last batch (reference)"] = (topic, 4, 1, last)
            cases[f"5th back, {gap} between"] = (topic, 0, 1, first)
        services.topics.create("worst", 1)
        idempotent("worst", 0)
        others("worst", args.worst)
        last_offsets["worst"] = idempotent("worst", 1)
        cases[f"no match, {args.worst} between"] = ("worst", 0, 2, None)

        topic_ids = {t: services.topics.get(t).topic_id for t, *_ in cases.values()}
        times: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        walks: dict[str, list[float]] = {name: [] for name in cases}
        names = list(cases)
        for _ in range(args.rounds):
            rng.shuffle(names)
            for name in names:
                topic, base_sequence, count, expected = cases[name]
                started, started_cpu = time.perf_counter(), time.thread_time()
                try:
                    answered = idempotent(topic, base_sequence, count)
                except DuplicateSequenceNumber:
                    answered = None
                times[name].append(time.perf_counter() - started)
                cpu[name].append(time.thread_time() - started_cpu)
                assert answered == expected, (name, answered, expected)
                with db.read() as conn:
                    started = time.perf_counter()
                    earlier_batches(conn, p.producer_id, topic_ids[topic], 0, p.producer_epoch,
                                    last_offsets[topic], 4)
                    walks[name].append(time.perf_counter() - started)
        db.engine.dispose()

    ref = "last batch (reference)"
    quarter = max(1, args.rounds // 4)
    print(f"{'case':<34} {'wall ms':>8} {'ratio':>6} {'quarters':<23} {'CPU ms':>7} {'ratio':>6} {'walk ms':>8}")
    for name in [ref] + [n for n in cases if n != ref]:
        t, c = times[name], cpu[name]
        quarters = [statistics.median(t[i:i + quarter]) / statistics.median(times[ref][i:i + quarter])
                    for i in range(0, args.rounds - quarter + 1, quarter)]
        print(f"{name:<34} {statistics.median(t) * 1000:>8.2f} {statistics.median(t) / statistics.median(times[ref]):>6.2f} "
              f"{' '.join(f'{q:.2f}' for q in quarters):<23} {statistics.median(c) * 1000:>7.2f} "
              f"{statistics.median(c) / statistics.median(cpu[ref]):>6.2f} {statistics.median(walks[name]) * 1000:>8.2f}")


if __name__ == "__main__":
    main()
