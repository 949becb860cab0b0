"""What the test suite pays per test around the test itself, before and after the changes that
took it back (docs/benchmarks.md, "The test suite's time"), in interleaved rounds of one run:

- shutdown: an app's shutdown on PostgreSQL (TestClient's exit, as every test with `client`
  pays), with the log-change listener waiting on its socket 0.5 s at a time (before), and as it
  is (after: it waits until `close` signals it). `--listen-timeout 0.1` for the polled
  listener's last form as the before side (2026-11-30, before the signal);
- check: tests/batch_rows.py's check after a test that stored nothing, on PostgreSQL: a new
  engine per check and the check's four reads (before), the session's engine and the check as
  it is (after; its shortcut);
- provision: a fresh PostgreSQL database for an end-to-end test: created and migrated by
  `python -m app.cli migrate` in a new process (before), a copy of a migrated one (after);
- reset, reset-stored: the PostgreSQL reset before each test (tests/conftest.py,
  `_reset_postgres`) after a test that stored nothing, and after one that created a topic and
  appended a batch of three records through the API: every table truncated (before), only
  those with rows (after).

Each line prints the median of each side and after ÷ before. Needs the PostgreSQL server of
the tests (OUTBOX_TEST_POSTGRES_URL, default the local one).

    .venv/bin/python benchmarks/suite_overheads.py
    .venv/bin/python benchmarks/suite_overheads.py --rounds 5 --only shutdown
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import app.storage.changes as changes  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage import migrate  # noqa: E402
from app.storage.tables import producer_partitions, record_batches, records, transaction_partitions  # noqa: E402
from tests.batch_rows import assert_batch_rows_match  # noqa: E402

ADMIN_URL = os.environ.get("OUTBOX_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
ADMIN = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)


def new_database(template: str | None = None) -> tuple[str, str]:
    name = f"outbox_bench_{uuid.uuid4().hex[:12]}"
    with ADMIN.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    return name, make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def drop(name: str) -> None:
    with ADMIN.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def timed(f: Callable[[], object]) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def polled_listener(timeout_s: float) -> Callable[..., None]:
    """The PostgreSQL listener as it was before it waited for `close`'s signal: it waited on
    its socket `timeout_s` at a time and saw a stop only after the wait."""

    def listen(self: changes.LogChanges, stopping: object) -> None:
        import psycopg

        conninfo = make_url(self.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"LISTEN {changes.CHANNEL}")
            self.listening.set()
            while not self.closing:
                for notify in conn.notifies(timeout=timeout_s):
                    topic_id, _, partition = notify.payload.partition(":")
                    self.changed([(int(topic_id), int(partition))])

    return listen


def shutdown(url: str, listen_timeout_s: float | None) -> float:
    from fastapi.testclient import TestClient

    from app.api.app import create_app

    changes.LogChanges._listen_postgresql = (  # type: ignore[method-assign]
        AS_IT_IS if listen_timeout_s is None else polled_listener(listen_timeout_s))
    client = TestClient(create_app(Settings(database_url=url, run_coordinator=False, auto_migrate=False,
                                            console_lag_interval_ms=0)))
    client.__enter__()
    client.get("/v1/topics")
    time.sleep(0.05)  # the listener in its wait, as after a test's last request
    return timed(lambda: client.__exit__(None, None, None))


AS_IT_IS = changes.LogChanges._listen_postgresql


def check_before(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            inspect(conn).has_table("record_batches")
            for table in (records, record_batches, producer_partitions, transaction_partitions):
                conn.execute(select(table)).all()
    finally:
        engine.dispose()


def migrated_copy_before() -> None:
    name, url = new_database()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    subprocess.run([sys.executable, "-m", "app.cli", "migrate"], cwd=ROOT, env={**env, "OUTBOX_DATABASE_URL": url},
                   check=True, capture_output=True)
    drop(name)


def reset_before(engine) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import _TABLES

    with engine.begin() as conn:
        conn.execute(text("TRUNCATE " + ", ".join(f'"{t}"' for t in _TABLES if t != "counters")
                          + " RESTART IDENTITY CASCADE"))
        conn.execute(text("UPDATE counters SET value = 0"))


def stored_then(reset: Callable[[], None], client) -> float:  # type: ignore[no-untyped-def]
    """What a typical test leaves behind (a topic, its partition, a batch of records), then
    the reset timed."""
    from tests.helpers import batch, create_topic, send

    topic = f"t{uuid.uuid4().hex[:8]}"
    create_topic(client, topic)
    assert send(client, [batch(topic, 0, [1, 2, 3])]).status_code == 200
    return timed(reset)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=8, help="per side and round (provision: a quarter)")
    parser.add_argument("--listen-timeout", type=float, default=0.5,
                        help="shutdown: the polled listener's wait, the before side (s)")
    parser.add_argument("--only", choices=["shutdown", "check", "provision", "reset", "reset-stored"])
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} at start, {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC")
    database, url = new_database()
    migrate.upgrade(url)
    # The copies' template apart: a copy waits for (and then refuses) a template in use.
    template, template_url = new_database()
    migrate.upgrade(template_url)
    session_engine = create_engine(url, pool_size=1, pool_pre_ping=True)
    from fastapi.testclient import TestClient

    from app.api.app import create_app
    from tests.conftest import _reset_postgres

    client = TestClient(create_app(Settings(database_url=url, run_coordinator=False, auto_migrate=False,
                                            console_lag_interval_ms=0)))
    client.__enter__()
    sides: dict[str, tuple[Callable[[], float], Callable[[], float]]] = {
        "shutdown": (lambda: shutdown(url, args.listen_timeout), lambda: shutdown(url, None)),
        "check": (lambda: timed(lambda: check_before(url)),
                  lambda: timed(lambda: assert_batch_rows_match(session_engine))),
        "provision": (lambda: timed(migrated_copy_before), lambda: timed(lambda: drop(new_database(template)[0]))),
        "reset": (lambda: timed(lambda: reset_before(session_engine)),
                  lambda: timed(lambda: _reset_postgres(session_engine))),
        "reset-stored": (lambda: stored_then(lambda: reset_before(session_engine), client),
                         lambda: stored_then(lambda: _reset_postgres(session_engine), client)),
    }
    try:
        for what, (before, after) in sides.items():
            if args.only not in (None, what):
                continue
            times: dict[str, list[float]] = {"before": [], "after": []}
            repeats = max(1, args.repeats // 4) if what == "provision" else args.repeats
            for _ in range(args.rounds):
                times["before"] += [before() for _ in range(repeats)]
                times["after"] += [after() for _ in range(repeats)]
            b, a = statistics.median(times["before"]), statistics.median(times["after"])
            print(f"{what:10} before {b * 1000:8.1f} ms   after {a * 1000:8.1f} ms   after/before {a / b:.3f}   "
                  f"(n={len(times['after'])} a side)")
    finally:
        client.__exit__(None, None, None)
        session_engine.dispose()
        drop(database)
        drop(template)
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
