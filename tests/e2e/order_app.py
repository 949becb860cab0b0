"""An application for the crash tests: places orders 0, 1, 2, … each in one transaction of
its own database with its record appended by app.in_database, printing each id once its
transaction committed. Started again after a kill -9, it retries from the order after the last
one it printed, which may have committed unprinted: its row insert is then a no-op and the
record's message_id keeps the record from being published twice.

    python -m tests.e2e.order_app DATABASE_URL FIRST_ORDER [LAST_ORDER]
        [--topic orders] [--partitions 2] [--table orders] [--app NAME]
        [--rollback-every N] [--pause S] [--dawdle S]

Order n's record goes to partition n % partitions, keyed "n", with the value {"order": n}
(and "app": NAME with --app), and message_id "order-n". With --rollback-every N, every order
n with n % N == N - 1 (`rolls_back`) inserts its row and appends its record as the others
do, and then rolls back, printing "rolled back n". --pause sleeps up to S seconds between
orders, --dawdle up to S seconds between the append and the commit (or the rollback).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import time

import psycopg
from sqlalchemy.engine import make_url

from app.in_database import OutboxRecord, append


def rolls_back(order: int, every: int) -> bool:
    """Whether order `order` is one the application rolls back, with --rollback-every `every`
    (tests/e2e/faults.py checks the run with this rule)."""
    return every > 0 and order % every == every - 1


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.e2e.order_app")
    ap.add_argument("url")
    ap.add_argument("first", type=int)
    ap.add_argument("last", type=int, nargs="?", default=10**9)
    ap.add_argument("--topic", default="orders")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--table", default="orders")
    ap.add_argument("--app", default=None, help="a name put in each record's value")
    ap.add_argument("--rollback-every", type=int, default=0)
    ap.add_argument("--pause", type=float, default=0.0)
    ap.add_argument("--dawdle", type=float, default=0.0)
    args = ap.parse_args()
    rng = random.Random(args.first)
    if args.url.startswith("sqlite"):
        conn: object = sqlite3.connect(make_url(args.url).database, timeout=30)
        insert = f"INSERT INTO {args.table} VALUES (?, ?) ON CONFLICT (id) DO NOTHING"
    else:
        conn = psycopg.connect(make_url(args.url).set(drivername="postgresql").render_as_string(hide_password=False))
        insert = f"INSERT INTO {args.table} VALUES (%s, %s) ON CONFLICT (id) DO NOTHING"
    for order in range(args.first, args.last + 1):
        if isinstance(conn, sqlite3.Connection):
            conn.execute("BEGIN IMMEDIATE")
        conn.execute(insert, (order, order * 10))  # type: ignore[attr-defined]
        value = {"order": order} if args.app is None else {"order": order, "app": args.app}
        append(conn, args.topic, order % args.partitions,
               [OutboxRecord(key=str(order), value=value, message_id=f"order-{order}")])
        if args.dawdle:
            time.sleep(rng.uniform(0, args.dawdle))
        if rolls_back(order, args.rollback_every):
            conn.rollback()  # type: ignore[attr-defined]
            print(f"rolled back {order}", flush=True)
        else:
            conn.commit()  # type: ignore[attr-defined]
            print(order, flush=True)
        if args.pause:
            time.sleep(rng.uniform(0, args.pause))


if __name__ == "__main__":
    main()
