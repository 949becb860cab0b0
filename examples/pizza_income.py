"""Seed 001's "pizza orders → income" pipeline, exactly once.

Consumes `orders` as a member of a consumer group, keeps the pizza orders, and produces
{"order_id", "income"} to `pizza-income`, committing the consumed offsets in the same
transaction. Killed at any point and restarted, its output holds each pizza order once.

    python -m examples.pizza_income --url http://127.0.0.1:8000 --transactional-id pizza-income-0
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from app.client import AbortableError, Consumer, Producer

INPUT, OUTPUT, GROUP = "orders", "pizza-income", "pizza-income"


def transform(order: dict) -> dict | None:
    if order.get("meal") != "Pizza":
        return None
    return {"order_id": order["order_id"], "income": order["value"]}


def run(url: str, transactional_id: str, *, idle_exit_s: float | None, session_timeout_ms: int,
        transaction_timeout_ms: int, max_records: int = 500) -> int:
    producer = Producer(url, transactional_id, transaction_timeout_ms=transaction_timeout_ms)
    producer.init_transactions()
    consumer = Consumer(url, GROUP, session_timeout_ms=session_timeout_ms, max_records=max_records)
    consumer.subscribe([INPUT])
    processed, idle_since = 0, time.monotonic()
    try:
        while True:
            records = consumer.poll(timeout_s=0.5)
            if not records:
                if idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                    return processed
                continue
            idle_since = time.monotonic()
            producer.begin_transaction()
            try:
                for record in records:
                    income = transform(record.value)
                    if income is not None:
                        producer.send(OUTPUT, income, key=str(income["order_id"]))
                producer.send_offsets_to_transaction(consumer.position_offsets(), consumer.group_metadata())
                producer.commit_transaction()
                processed += len(records)
            except AbortableError as e:
                logging.warning("aborting: %s", e)
                producer.abort_transaction()
                consumer.seek_to_committed()
    finally:
        consumer.close()
        producer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--transactional-id", default="pizza-income-0")
    parser.add_argument("--idle-exit-s", type=float, default=None,
                        help="exit after this long without input (for batch runs and tests)")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--transaction-timeout-ms", type=int, default=60_000)
    parser.add_argument("--max-records", type=int, default=500, help="records per poll (per transaction)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    processed = run(args.url, args.transactional_id, idle_exit_s=args.idle_exit_s,
                    session_timeout_ms=args.session_timeout_ms,
                    transaction_timeout_ms=args.transaction_timeout_ms, max_records=args.max_records)
    print(f"processed {processed} orders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
