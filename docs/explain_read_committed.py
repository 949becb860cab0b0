"""Reproduce the EXPLAIN ANALYZE plans of docs/ARCHITECTURE.md ("Commit order").

Fills a scratch PostgreSQL database with a realistic log through the service layer (the real
Send, BeginTransaction and Commit/Abort code, no HTTP), then runs EXPLAIN (ANALYZE, BUFFERS)
on exactly the statements app.storage.read.fetch issues for a read_committed fetch, captured
from SQLAlchemy as they are sent to the driver. From the repository root:

    psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE outbox_explain'
    OUTBOX_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/outbox_explain .venv/bin/outbox migrate
    .venv/bin/python docs/explain_read_committed.py postgresql+psycopg://postgres@127.0.0.1:5432/outbox_explain
    psql -h 127.0.0.1 -U postgres -c 'DROP DATABASE outbox_explain'

Add --explain-only to skip the fill on a database filled before (filling takes minutes).

The log: one topic, 4 partitions, 50,000 data records per partition (200,000 in all): half
plain (batches of 5), half in transactions of 10 records (two Sends of 5, interleaved with
plain batches and with the other open transaction of the partition); 90% of transactions
commit, 10% abort, and a few are left open at the end.
"""

from __future__ import annotations

import random
import sys
import time

from sqlalchemy import event, text

from app.domain.clock import system_clock
from app.domain.records import RecordToAppend
from app.domain.types import IsolationLevel
from app.services.log_service import LogService, SendBatch
from app.services.topic_service import TopicService
from app.services.transaction_coordinator import TransactionCoordinator
from app.settings import Settings
from app.storage import read
from app.storage.engine import Database, build_engine

PARTITIONS = 4
DATA_PER_PARTITION = 50_000
BATCH = 5
TXN_RECORDS = 10
TXNS_PER_PARTITION = 2  # transactional ids writing to each partition, so transactions interleave


def value(i: int) -> str:
    return '{"order_id": %d, "pizza": "margherita", "price_cents": 950, "customer": "c-%06d", "note": "extra basil"}' % (i, i % 100000)


def fill(url: str) -> None:
    settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
    db = Database(build_engine(url, pool_size=2))
    clock = system_clock
    topics_svc = TopicService(db, settings, clock)
    log_svc = LogService(db, settings, clock)
    coord = TransactionCoordinator(db, settings, clock)
    topics_svc.create("pizza-orders", PARTITIONS)
    rng = random.Random(42)
    producers = {}
    for p in range(PARTITIONS):
        for k in range(TXNS_PER_PARTITION):
            tid = f"shop-{p}-{k}"
            r = coord.init_producer_id(transactional_id=tid, transaction_timeout_ms=900_000)
            producers[tid] = {"pid": r.producer_id, "epoch": r.producer_epoch, "seq": 0, "sent": 0,
                              "txn_id": None, "partition": p}
    counter = 0

    def records(n: int) -> list[RecordToAppend]:
        nonlocal counter
        out = []
        for _ in range(n):
            counter += 1
            out.append(RecordToAppend(key=f"order-{counter}", value=value(counter), headers=None,
                                      timestamp_ms=clock()))
        return out

    written = {p: 0 for p in range(PARTITIONS)}
    t0 = time.monotonic()
    while min(written.values()) < DATA_PER_PARTITION:
        # plain batches to every partition, one request
        batches = [SendBatch("pizza-orders", p, records(BATCH)) for p in range(PARTITIONS)
                   if written[p] < DATA_PER_PARTITION]
        log_svc.send(batches, producer_id=None, producer_epoch=None, transactional_id=None)
        for b in batches:
            written[b.partition] += BATCH
        # then one transactional Send of 5 from one of each partition's producers
        for p in range(PARTITIONS):
            if written[p] >= DATA_PER_PARTITION:
                continue
            tid = f"shop-{p}-{rng.randrange(TXNS_PER_PARTITION)}"
            st = producers[tid]
            if st["txn_id"] is None:
                view = coord.begin(tid, st["pid"], st["epoch"])
                st["txn_id"], st["sent"] = view.meta.txn_id, 0
            log_svc.send([SendBatch("pizza-orders", p, records(BATCH), base_sequence=st["seq"])],
                         producer_id=st["pid"], producer_epoch=st["epoch"], transactional_id=tid)
            st["seq"] += BATCH
            st["sent"] += BATCH
            written[p] += BATCH
            if st["sent"] >= TXN_RECORDS and written[p] < DATA_PER_PARTITION:
                commit = rng.random() < 0.9
                coord.end_transaction(tid, st["pid"], st["epoch"], commit=commit, txn_id=st["txn_id"])
                st["txn_id"] = None
    print(f"filled in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    db.dispose()


def explain(url: str, partition: int, offset: int, max_records: int) -> None:
    engine = build_engine(url, pool_size=1)
    captured: list[tuple[str, object]] = []

    @event.listens_for(engine, "before_cursor_execute")
    def capture(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        captured.append((statement, parameters))

    with engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        conn.commit()
        topic_id = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'pizza-orders'")).scalar_one()
        for row in conn.execute(text(
            "SELECT partition, next_offset, "
            "(SELECT count(*) FROM records r WHERE r.topic_id = p.topic_id AND r.partition = p.partition AND control_type = 'COMMIT') AS commits, "
            "(SELECT count(*) FROM records r WHERE r.topic_id = p.topic_id AND r.partition = p.partition AND control_type = 'ABORT') AS aborts "
            "FROM partitions p ORDER BY partition"
        )):
            print("partition", tuple(row))
        print("records rows:", conn.execute(text("SELECT count(*) FROM records")).scalar_one())
        print("open transactions:", conn.execute(text("SELECT count(*) FROM transaction_partitions")).scalar_one())
        for _ in range(3):  # the last of three runs, caches warm
            captured.clear()
            t0 = time.perf_counter()
            result = read.fetch(conn, topic_id=topic_id, partition=partition, offset=offset,
                               max_records=max_records, isolation=IsolationLevel.READ_COMMITTED)
            elapsed_ms = (time.perf_counter() - t0) * 1000
            conn.rollback()
        print(f"fetch(partition={partition}, offset={offset}, max_records={max_records}): "
              f"{len(result.records)} records, next_offset {result.next_offset}, {elapsed_ms:.1f} ms in Python")
        statements = list(captured)
        for statement, params in statements:
            print("\n-- statement --")
            print(statement)
            print("-- parameters --")
            print(params)
            for _ in range(3):  # warm the cache; print the last run
                plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, params).all()
            print("-- plan --")
            for (line,) in plan:
                print(line)
            conn.rollback()
    engine.dispose()


if __name__ == "__main__":
    url = sys.argv[1]
    if len(sys.argv) < 3 or sys.argv[2] != "--explain-only":
        fill(url)
    explain(url, partition=1, offset=25_000, max_records=500)
    explain(url, partition=1, offset=0, max_records=10_000)
