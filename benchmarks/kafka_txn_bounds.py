"""A Kafka client's transaction bounds in the service layer: what the Kafka door's
AddPartitionsToTxn and EndTxn call (TransactionCoordinator.add_partitions and end_transaction,
transaction version 1), without the door.

    .venv/bin/python benchmarks/kafka_txn_bounds.py --rounds 300
    .venv/bin/python benchmarks/kafka_txn_bounds.py --tree /tmp/outbox-before   # another checkout's service layer

Each round is one transaction as aiokafka runs it: AddPartitionsToTxn (which begins it), another
AddPartitionsToTxn of the same partition (the transaction Ongoing: a client adding a partition
later in it), a transactional Send of 10 records, and EndTxn (Commit). Prints for each the SQL
statements SQLAlchemy's events see (psycopg's own BEGIN and COMMIT, and a Send's COPY, are not
among them), the median and 90th percentile milliseconds over the rounds but the first 10, and
the median milliseconds between those statements' before_cursor_execute and
after_cursor_execute events (their round trips and the database's work on them; the rest is
Python, the BEGIN and the COMMIT, whose flush of the log is the database's). With --tree the
service layer is that source tree's (the script and this tree's virtualenv are the same), so
that two trees are compared on one machine by running the script once for each, in turns.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARM_UP = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="source tree of the service layer")
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args(argv)
    # The tree's `app` first, whatever the virtualenv's editable install points at.
    sys.path.insert(0, str(args.tree.resolve()))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from sqlalchemy import event

    from scratch import scratch_database

    from app.composition import Services
    from app.domain.records import RecordToAppend, SendBatch
    from app.domain.types import TransactionVersion
    from app.settings import Settings
    from app.storage.engine import Database, build_engine

    v1 = TransactionVersion.V1
    with scratch_database(args.db, "txnbounds", migrate_with=(args.tree,)) as url:
        db = Database(build_engine(url, pool_size=2))
        statements, started, in_statements = [0], [0.0], [0.0]

        def before(*_: object) -> None:
            statements[0] += 1
            started[0] = time.perf_counter()

        def after(*_: object) -> None:
            in_statements[0] += time.perf_counter() - started[0]

        event.listen(db.engine, "before_cursor_execute", before)
        event.listen(db.engine, "after_cursor_execute", after)
        services = Services.build(Settings(database_url=url, run_coordinator=False, auto_migrate=False), db,
                                  lambda: int(time.time() * 1000))
        services.topics.create("bounds", 1)
        p = services.coordinator.init_producer_id(transactional_id="bounds", transaction_timeout_ms=None,
                                                  transaction_version=v1)
        records = [RecordToAppend(f"k{i}", "1", None, 1) for i in range(10)]
        sequence = [0]

        def add_partitions() -> None:
            services.coordinator.add_partitions("bounds", p.producer_id, p.producer_epoch, [("bounds", 0)],
                                                transaction_version=v1)

        def send() -> None:
            services.log.send([SendBatch("bounds", 0, records, sequence[0])], producer_id=p.producer_id,
                              producer_epoch=p.producer_epoch, transactional_id="bounds")
            sequence[0] += len(records)

        def end_txn() -> None:
            services.coordinator.end_transaction("bounds", p.producer_id, p.producer_epoch, commit=True,
                                                 transaction_version=v1)

        ops: list[tuple[str, Callable[[], None]]] = [
            ("AddPartitionsToTxn, begins", add_partitions), ("AddPartitionsToTxn, Ongoing", add_partitions),
            ("Send of 10 records", send), ("EndTxn (Commit)", end_txn)]
        times: dict[str, list[float]] = {name: [] for name, _ in ops}
        statement_times: dict[str, list[float]] = {name: [] for name, _ in ops}
        counts: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, op in ops:
                statements[0], in_statements[0] = 0, 0.0
                t0 = time.perf_counter()
                op()
                times[name].append((time.perf_counter() - t0) * 1000)
                statement_times[name].append(in_statements[0] * 1000)
                counts[name] = statements[0]
        db.dispose()
    print(f"# {args.db}, {args.rounds} rounds, service layer from {args.tree}\n")
    print("| operation | SQL statements | median ms | p90 ms | in the statements, median ms |\n"
          "| --- | ---: | ---: | ---: | ---: |")
    for name, ms in times.items():
        kept = sorted(ms[WARM_UP:])
        print(f"| {name} | {counts[name]} | {statistics.median(kept):.2f} | {kept[int(len(kept) * 0.9)]:.2f} | "
              f"{statistics.median(statement_times[name][WARM_UP:]):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
