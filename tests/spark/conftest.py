"""Fixtures for the Spark suite: one SparkSession for the whole test run (local[2], two shuffle
partitions), and the end-to-end suite's `backend` and `launcher` (real `serve` processes on
SQLite and on PostgreSQL), so Spark reads the database a real service writes.

Without pyspark (`pip install -e '.[spark]'`), Java 17+ or the JDBC driver jars (Debian's
libpostgresql-jdbc-java and libxerial-sqlite-jdbc-java), the suite is skipped with the
message that names the fix, or failed where nothing may be skipped (tests/conftest.py,
`unavailable`); `bash .ci/run` installs all three.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# The end-to-end fixtures (and their hook that prints process logs when a test fails).
from tests.conftest import unavailable
from tests.e2e.conftest import backend, launcher, pytest_runtest_makereport  # noqa: F401


def _missing() -> str | None:
    """What the Spark tests lack, as the fix to apply, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed: pip install -e '.[spark]' (see docs/SPARK.md)"
    from pyspark import __version__
    from spark_jobs.errors import SparkJobError
    from spark_jobs.jars import check_java, required_java_major, resolve_jdbc_jars

    try:
        check_java(required_java_major(__version__))
        resolve_jdbc_jars(["postgresql", "sqlite"], maven_reachable=False)
    except SparkJobError as e:
        return str(e)
    return None


MISSING = _missing()

# The JVM options of every Spark driver the suite starts (this session's, and the jobs' it runs
# as processes, through job_env): the JIT's first tier only. A test's Spark runs small queries
# for seconds to minutes, where the optimizing tier's compiler threads cost more CPU than its
# code saves: the JVM's CPU time from start through a few queries was about 40 % lower
# (docs/benchmarks.md, "The test suite's time, branch cispark"), and on a shared 2-core machine
# that CPU is the tests' wall time.
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


def job_env(**extra: str) -> dict[str, str]:
    """The environment of a Spark job the test starts as `python -m` (or a script that builds
    its session with PySpark): this one, its driver JVM started with DRIVER_JAVA_OPTIONS
    (PySpark passes PYSPARK_SUBMIT_ARGS to the spark-submit that starts it)."""
    return {**os.environ,
            "PYSPARK_SUBMIT_ARGS": f"--driver-java-options={DRIVER_JAVA_OPTIONS} pyspark-shell", **extra}


@pytest.fixture(autouse=True)
def _spark_requirements() -> None:
    if MISSING is not None:
        unavailable(MISSING)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The one SparkSession of the run, with both JDBC drivers."""
    from spark_jobs.session import build_session

    started = time.monotonic()
    session, resolution = build_session(
        "outbox-tests",
        databases=["postgresql", "sqlite"],
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.driver.memory": "1g",
            "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS,
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    print(f"\nSparkSession up in {time.monotonic() - started:.1f} s; JDBC drivers: {resolution.sources}")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def url(launcher):  # type: ignore[no-untyped-def]
    """A real `serve` on the `backend` database (SQLite or PostgreSQL)."""
    return launcher.server().url


@pytest.fixture
def client(url):  # type: ignore[no-untyped-def]
    import httpx

    with httpx.Client(base_url=url, timeout=30) as c:
        yield c


@pytest.fixture
def migrated_sqlite(sqlite_template: Path, tmp_path: Path) -> Path:
    """A migrated SQLite outbox database of the test's own that no service uses: a copy of the
    run's template (tests/conftest.py), where an `outbox migrate` process cost a Python start."""
    path = tmp_path / "migrated.db"
    shutil.copy(sqlite_template, path)
    return path
