"""An application for the crash tests: places orders 0, 1, 2, … each in one transaction of
its own database with its record appended by app.in_database, printing each id once its
transaction committed. Started again after a kill -9, it retries from the order after the last
one it printed, which may have committed unprinted: its row insert is then a no-op and the
record's message_id keeps the record from being published twice.

    python -m tests.e2e.order_app DATABASE_URL FIRST_ORDER [LAST_ORDER]
"""

from __future__ import annotations

import sqlite3
import sys

import psycopg
from sqlalchemy.engine import make_url

from app.in_database import OutboxRecord, append


def main() -> None:
    url, first = sys.argv[1], int(sys.argv[2])
    last = int(sys.argv[3]) if len(sys.argv) > 3 else 10**9
    if url.startswith("sqlite"):
        conn: object = sqlite3.connect(make_url(url).database, timeout=30)
        insert = "INSERT INTO orders VALUES (?, ?) ON CONFLICT (id) DO NOTHING"
    else:
        conn = psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False))
        insert = "INSERT INTO orders VALUES (%s, %s) ON CONFLICT (id) DO NOTHING"
    for order in range(first, last + 1):
        if isinstance(conn, sqlite3.Connection):
            conn.execute("BEGIN IMMEDIATE")
        conn.execute(insert, (order, order * 10))  # type: ignore[attr-defined]
        append(conn, "orders", order % 2, [OutboxRecord(key=str(order), value={"order": order},
                                                       message_id=f"order-{order}")])
        conn.commit()  # type: ignore[attr-defined]
        print(order, flush=True)


if __name__ == "__main__":
    main()
