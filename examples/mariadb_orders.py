"""A shop whose orders live in MariaDB, publishing each order's event to the outbox exactly
once: a two-phase commit between the two databases with a prepared transaction (KIP-939).

For order n, n = 1, 2, …, --orders:

1. an outbox transaction sends the event `{"order": n, "total": …}` keyed "n" to `orders`;
2. the transaction is prepared: its outcome is durable but undecided, and nothing times it out;
3. one MariaDB transaction inserts the order into `shop_orders` and the prepared transaction's
   txn_id into `outbox_decisions` with the outcome `commit`: the decision, recorded with the
   business change;
4. the outbox transaction is committed.

Killed anywhere and started again, it first takes its transactional id over while keeping a
prepared transaction (init_transactions(keep_prepared_txn=True)), then claims that transaction's
decision in MariaDB: it inserts the txn_id with the outcome `abort`. If the insert finds the
txn_id there, MariaDB committed the order: it commits the outbox transaction; otherwise its
`abort` row is the decision, and it aborts (complete_transaction). Claiming rather than only
looking is what makes a stalled, not dead, earlier instance harmless: its own insert of the
txn_id, later, fails on the primary key, and its order rolls back with it (InnoDB makes the two
inserts wait for each other). A transaction not prepared yet is aborted by the takeover. It
then goes on with the order after the last one MariaDB holds. So every order in MariaDB has its
event exactly once, and no event exists without its order.

    .venv/bin/python -m examples.mariadb_orders --url http://127.0.0.1:8000 --orders 10 \\
        --mariadb mysql://root@127.0.0.1:3306/test

Needs the `orders` topic (`outbox topics create orders --partitions 2`; `--topic` names another)
and PyMySQL (`.venv/bin/pip install -e '.[examples]'`). With authentication on, the principal's
API key: `--api-key KEY` or `OUTBOX_API_KEY`. `--crash-at STEP:N` kills the process with SIGKILL
at STEP of order N (STEP: before-prepare, after-prepare, after-own-commit,
after-outbox-commit): what the crash test (tests/e2e/test_mariadb_orders_example.py) runs at
every step.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from urllib.parse import urlparse

try:
    import pymysql
except ModuleNotFoundError:  # main() says how to install it, in one line
    pymysql = None  # type: ignore[assignment]

from app.client import AuthenticationError, ClientError, PreparedTxnState, Producer, UnknownTopicOrPartitionError
from app.database_url import redacted_url
from examples.api_key import add_api_key_argument, refused_line

TOPIC = "orders"
INSTALL = ".venv/bin/pip install -e '.[examples]'"
STEPS = ("before-prepare", "after-prepare", "after-own-commit", "after-outbox-commit")
TABLES = (
    "CREATE TABLE IF NOT EXISTS shop_orders (id BIGINT PRIMARY KEY, total BIGINT NOT NULL)",
    # The decision of each prepared outbox transaction: `commit`, inserted with its order, or
    # `abort`, claimed by a recovering instance. The primary key lets only one of them in.
    "CREATE TABLE IF NOT EXISTS outbox_decisions (transactional_id VARCHAR(255) NOT NULL,"
    " txn_id BIGINT NOT NULL, outcome VARCHAR(6) NOT NULL, order_id BIGINT,"
    " PRIMARY KEY (transactional_id, txn_id))",
)

logger = logging.getLogger("mariadb_orders")


class Superseded(RuntimeError):
    """Another instance took the transactional id over and decided this one's transaction."""


def connect(url: str) -> pymysql.connections.Connection:
    u = urlparse(url)
    return pymysql.connect(host=u.hostname or "127.0.0.1", port=u.port or 3306, user=u.username or "root",
                           password=u.password or "", database=(u.path or "/test").lstrip("/") or "test",
                           autocommit=False)


class Shop:
    def __init__(self, outbox_url: str, mariadb_url: str, transactional_id: str, crash_at: str | None,
                 topic: str = TOPIC, api_key: str | None = None) -> None:
        self.db = connect(mariadb_url)
        with self.db.cursor() as c:
            for statement in TABLES:
                c.execute(statement)
        self.db.commit()
        self.transactional_id = transactional_id
        self.producer = Producer(outbox_url, transactional_id=transactional_id, api_key=api_key)
        self.crash_at = crash_at
        self.topic = topic

    def recover(self) -> None:
        """Take the transactional id over; end a transaction the last run prepared as MariaDB
        decided it."""
        kept = self.producer.init_transactions(keep_prepared_txn=True)
        if kept is None:
            return
        try:
            with self.db.cursor() as c:
                c.execute("INSERT INTO outbox_decisions (transactional_id, txn_id, outcome) VALUES (%s, %s, 'abort')",
                          (self.transactional_id, kept.txn_id))
            self.db.commit()
            recorded = None  # the abort claimed: no order of it can commit any more
        except pymysql.err.IntegrityError:
            self.db.rollback()
            with self.db.cursor() as c:
                c.execute("SELECT outcome FROM outbox_decisions WHERE transactional_id = %s AND txn_id = %s",
                          (self.transactional_id, kept.txn_id))
                (outcome,) = c.fetchone()
            self.db.rollback()
            recorded = kept if outcome == "commit" else None
        committed = self.producer.complete_transaction(recorded)
        logger.info("prepared transaction %d of the last run %s", kept.txn_id,
                    "committed: MariaDB had its order" if committed else "aborted: MariaDB had no order of it")

    def next_order(self) -> int:
        with self.db.cursor() as c:
            c.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM shop_orders")
            (n,) = c.fetchone()
        self.db.rollback()
        return int(n)

    def place(self, order: int) -> None:
        total = order * 125
        self.producer.begin_transaction()
        self.producer.send(self.topic, {"order": order, "total": total}, key=str(order))
        self._crash("before-prepare", order)
        prepared: PreparedTxnState = self.producer.prepare_transaction()
        self._crash("after-prepare", order)
        self.record(order, total, prepared)
        self._crash("after-own-commit", order)
        self.producer.commit_transaction()
        self._crash("after-outbox-commit", order)
        print(f"order {order} placed", flush=True)

    def record(self, order: int, total: int, prepared: PreparedTxnState) -> None:
        """The order and the decision to commit its outbox transaction, in one MariaDB
        transaction; refused if a recovering instance claimed the decision (abort) first."""
        try:
            with self.db.cursor() as c:
                c.execute("INSERT INTO shop_orders (id, total) VALUES (%s, %s)", (order, total))
                c.execute("INSERT INTO outbox_decisions (transactional_id, txn_id, outcome, order_id)"
                          " VALUES (%s, %s, 'commit', %s)", (self.transactional_id, prepared.txn_id, order))
            self.db.commit()
        except pymysql.err.IntegrityError:
            self.db.rollback()
            raise Superseded(f"order {order}: another instance decided transaction {prepared.txn_id} first") from None

    def _crash(self, step: str, order: int) -> None:
        if self.crash_at == f"{step}:{order}":
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the outbox service")
    parser.add_argument("--mariadb", default="mysql://root@127.0.0.1:3306/test", help="the shop's own database")
    parser.add_argument("--transactional-id", default="mariadb-shop")
    parser.add_argument("--topic", default=TOPIC, help="the topic of the orders' events")
    parser.add_argument("--orders", type=int, default=10, help="place orders up to this number")
    parser.add_argument("--crash-at", metavar="STEP:N", help=f"SIGKILL at STEP ({', '.join(STEPS)}) of order N")
    add_api_key_argument(parser)
    args = parser.parse_args(argv)
    if args.crash_at and args.crash_at.split(":")[0] not in STEPS:
        parser.error(f"--crash-at: STEP is one of {', '.join(STEPS)}")
    if pymysql is None:
        print(f"this example needs PyMySQL, the MariaDB driver: install it with {INSTALL}", file=sys.stderr)
        return 1
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    try:
        shop = Shop(args.url, args.mariadb, args.transactional_id, args.crash_at, args.topic, args.api_key)
    except pymysql.err.OperationalError as e:
        # The URL as given may hold the shop's database password: shown as ***.
        print(f"cannot reach MariaDB at {redacted_url(args.mariadb)}: {e.args[-1]}", file=sys.stderr)
        return 1
    try:
        shop.recover()
        first = shop.next_order()
        if first > args.orders:
            # A run again with the same --orders places nothing: said, so that no output is not
            # taken for a hang or a failure.
            logger.info("MariaDB holds orders up to %d already: nothing to place up to --orders %d",
                        first - 1, args.orders)
        for order in range(first, args.orders + 1):
            shop.place(order)
    except AuthenticationError as e:
        print(f"stopping: {refused_line(e, args.api_key)}", file=sys.stderr)
        return 1
    except UnknownTopicOrPartitionError as e:
        print(f"stopping: {e}; create it with: OUTBOX_URL={args.url} outbox topics create {args.topic} "
              "--partitions 2", file=sys.stderr)
        return 1
    except (Superseded, ClientError) as e:
        # Another instance took over; or the service refused, or did not answer past the
        # client's deadline: a run stopped anywhere is recovered by the next one.
        print(f"stopping: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
