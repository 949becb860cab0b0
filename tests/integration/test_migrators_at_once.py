"""Migrators of one PostgreSQL database run one at a time (app.storage.migrate.one_migrator_at_a_time):
two deploys' `outbox migrate`, or an init container per replica, started together."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import create_engine, text

from app.storage import migrate
from app.storage.migrate import MIGRATORS_LOCK
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
            held.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATORS_LOCK})
            runs = [pool.submit(outbox, empty_url, "migrate") for _ in range(MIGRATORS)]
            deadline = time.monotonic() + 60
            while _polling(empty_url) < MIGRATORS:
                assert time.monotonic() < deadline, [r.result().stderr for r in runs if r.done()]
                time.sleep(0.2)
            assert migrate.current_revision(holder) is None
            held.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATORS_LOCK})
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
