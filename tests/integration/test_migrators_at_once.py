"""Migrators of one PostgreSQL database run one at a time (app.storage.migrate.one_migrator_at_a_time):
two deploys' `outbox migrate`, or an init container per replica, started together."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from app.storage import migrate
from app.storage.turns import Turn
from tests.migration_helpers import at_revision
from tests.outbox_command import outbox

MIGRATORS = 3


def _polling(url: str) -> int:
    """The sessions of the database whose last statement asked for the migrators' lock."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE 'SELECT pg_try_advisory_lock%'")).scalar_one()
    finally:
        engine.dispose()


# SQLite's migrators wait for its write lock instead: tests/e2e/test_sqlite_multiprocess.py.
@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_migrators_started_together_wait_for_the_one_that_migrates_and_all_succeed(empty_url: str) -> None:
    holder = create_engine(empty_url, isolation_level="AUTOCOMMIT")
    with ThreadPoolExecutor(MIGRATORS) as pool:
        with holder.connect() as held:
            # Held here, as by a migrator already at work: none of them may touch the schema.
            held.execute(text("SELECT pg_advisory_lock(:key)"), {"key": int(Turn.MIGRATE)})
            runs = [pool.submit(outbox, empty_url, "migrate") for _ in range(MIGRATORS)]
            deadline = time.monotonic() + 60
            while _polling(empty_url) < MIGRATORS:
                assert time.monotonic() < deadline, [r.result().stderr for r in runs if r.done()]
                time.sleep(0.2)
            assert migrate.current_revision(holder) is None
            held.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": int(Turn.MIGRATE)})
        results = [r.result() for r in runs]
    holder.dispose()
    assert [(r.returncode, r.stderr.count("waiting for it to finish")) for r in results] == [(0, 1)] * MIGRATORS, \
        [r.stderr for r in results]
    engine = create_engine(empty_url)
    assert migrate.current_revision(engine) == migrate.head_revision()
    engine.dispose()
    # One of them made every step; the others found the schema at head.
    made = sorted(r.stdout.count("upgraded ") for r in results)
    assert made == [0] * (MIGRATORS - 1) + [len(migrate.revisions())]


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_a_migrator_that_waited_chooses_its_direction_from_where_the_other_left_the_schema(empty_url: str) -> None:
    # Chosen before the wait, `outbox migrate 0034` from 0033 "upgraded" a database another
    # migrator had brought to head meanwhile: alembic did nothing, and it said it was done.
    at_revision(empty_url, "0033")
    holder = create_engine(empty_url, isolation_level="AUTOCOMMIT")
    with ThreadPoolExecutor(1) as pool, holder.connect() as held:
        held.execute(text("SELECT pg_advisory_lock(:key)"), {"key": int(Turn.MIGRATE)})
        waiting = pool.submit(outbox, empty_url, "migrate", "0034")
        deadline = time.monotonic() + 60
        while _polling(empty_url) < 1:
            assert time.monotonic() < deadline, waiting.result().stderr if waiting.done() else "not polling"
            time.sleep(0.2)
        # The holder's own migration, to head, under the lock it holds.
        config = migrate.alembic_config(empty_url)
        config.attributes["migrators_lock_held"] = True
        command.upgrade(config, "head")
        held.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": int(Turn.MIGRATE)})
        done = waiting.result()
    holder.dispose()
    assert done.returncode == 2, done.stderr  # a downgrade not asked for: a mistake of the command line
    assert (f"the database is at {migrate.head_revision()}, newer than 0034: moving it there is a downgrade"
            in done.stderr), done.stderr


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_alembic_current_does_not_wait_for_a_migration(empty_url: str) -> None:
    config = migrate.alembic_config(empty_url)
    holder = create_engine(empty_url, isolation_level="AUTOCOMMIT")
    with ThreadPoolExecutor(1) as pool, holder.connect() as held:
        held.execute(text("SELECT pg_advisory_lock(:key)"), {"key": int(Turn.MIGRATE)})
        shown = pool.submit(command.current, config)
        try:
            shown.result(timeout=30)
        finally:
            held.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": int(Turn.MIGRATE)})
    holder.dispose()
