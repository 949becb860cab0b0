"""benchmarks/spark_sink.py measures in a scratch PostgreSQL database of its own and drops it
however the run ends, SIGTERM to its whole process group included (the benchmark, its
`outbox serve` and Spark's JVM, once started, all get it): a benchmark stopped by a supervisor
or `kill` leaves no database behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.pool import NullPool

from tests.conftest import ADMIN_URL, require_postgres

ROOT = Path(__file__).resolve().parents[2]


def _sink_databases() -> set[str]:
    engine = create_engine(ADMIN_URL, poolclass=NullPool)
    try:
        with engine.connect() as c:
            return set(c.execute(text("SELECT datname FROM pg_database WHERE datname LIKE 'outbox_spark_sink_%'"))
                       .scalars())
    finally:
        engine.dispose()


def _migrated(database: str) -> bool:
    engine = create_engine(make_url(ADMIN_URL).set(database=database), poolclass=NullPool)
    try:
        with engine.connect() as c:
            c.execute(text("SELECT count(*) FROM topics"))
            return True
    except (OperationalError, ProgrammingError):  # not migrated yet, or dropped
        return False
    finally:
        engine.dispose()


def test_spark_sink_benchmark_stopped_by_sigterm_to_its_process_group_drops_its_database(tmp_path) -> None:  # type: ignore[no-untyped-def]
    require_postgres()
    before = _sink_databases()
    log = tmp_path / "bench.log"
    bench = subprocess.Popen(
        [sys.executable, "benchmarks/spark_sink.py", "--rows", "2000", "--rounds", "1"], cwd=ROOT,
        env={**os.environ, "OUTBOX_BENCH_POSTGRES_URL": ADMIN_URL, "PYSPARK_PYTHON": sys.executable},
        start_new_session=True, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        # Once its database is migrated: the benchmark is starting its service, or Spark. (Not
        # later: waiting for Spark to write would cost this test a Spark start-up.)
        deadline = time.monotonic() + 120
        while not [d for d in _sink_databases() - before if _migrated(d)]:
            assert bench.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.2)
        os.killpg(bench.pid, signal.SIGTERM)
        assert bench.wait(120) == 128 + signal.SIGTERM, log.read_text()[-4000:]
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
    assert _sink_databases() - before == set()
    assert log.read_text().splitlines()[-1] == "stopped by SIGTERM; the scratch database was dropped"
