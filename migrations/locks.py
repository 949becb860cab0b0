"""How a migration takes the locks of tables the service is using (PostgreSQL): the shared
mechanism, never another migration's statements.

A migration's ALTER of a busy table waits for its lock behind every transaction that holds the
table (a long read), and every statement of the service on that table queues behind the
waiting ALTER, however short: a Send stops for as long as the longest reader. So each try
waits at most WAIT (the service's statements queue behind it that long), gives up all it took
and tries again a little later, for PATIENCE_S at most: a transaction that holds one of the
tables longer is then named in a one-line error, and the upgrade can be run again once it is
done. Taking them all in one statement, each try all or nothing, also keeps the migration from
holding one table while it waits for another that a service's transaction holding that one
waits for."""

from __future__ import annotations

import itertools
import random
import time

import psycopg
import sqlalchemy as sa
from alembic import op

WAIT = "200ms"
PATIENCE_S = 120.0


def take(tables: tuple[str, ...], mode: str, revision: str, *, again: str = "") -> None:
    """`tables` in lock `mode`, in the migration's transaction, as the module says; RuntimeError
    after PATIENCE_S, naming the holders, `again` added to its advice to run the upgrade again."""
    bind = op.get_bind()
    relations = ", ".join(f"'{t}'::regclass" for t in tables)
    deadline = time.monotonic() + PATIENCE_S
    for attempt in itertools.count():
        if time.monotonic() > deadline:
            holders = bind.exec_driver_sql(
                # Concatenated, not format()'s %s: the driver takes every %s for a parameter of
                # its own (the line said "pid $1 ($2, since $3)").
                "SELECT string_agg(DISTINCT 'pid ' || a.pid || ' (' || a.application_name || ', since ' "
                "|| a.xact_start::timestamp(0) || ')', '; ') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                f"WHERE l.relation IN ({relations}) AND l.granted "
                "AND a.pid <> pg_backend_pid()").scalar()
            named = " and ".join([", ".join(tables[:-1]), tables[-1]] if len(tables) > 1 else tables)
            raise RuntimeError(f"migration {revision} could not take {named} in {mode} mode within "
                               f"{PATIENCE_S:.0f} s; held by: {holders or 'nobody now'}; run the upgrade again "
                               f"once they are done{again}")
        bind.exec_driver_sql("SAVEPOINT take_tables")
        bind.exec_driver_sql(f"SET LOCAL lock_timeout = '{WAIT}'")
        try:
            bind.exec_driver_sql(f"LOCK TABLE {', '.join(tables)} IN {mode} MODE")
        except sa.exc.OperationalError as e:
            if not isinstance(e.orig, psycopg.errors.LockNotAvailable):
                raise
            bind.exec_driver_sql("ROLLBACK TO SAVEPOINT take_tables")
            time.sleep(min(0.05 * 2**attempt, 2.0) * random.random())
            continue
        bind.exec_driver_sql("RELEASE SAVEPOINT take_tables")
        bind.exec_driver_sql("SET LOCAL lock_timeout TO DEFAULT")
        return
