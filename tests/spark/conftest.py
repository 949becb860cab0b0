"""Fixtures for the Spark suite: one SparkSession for the whole test run (local[2], two shuffle
partitions), and the end-to-end suite's `backend` and `launcher` (real `serve` processes on
SQLite and on PostgreSQL), so Spark reads the database a real service writes.

The suite is skipped, with the reason shown, only when pyspark is not installed
(`pip install -e '.[spark]'`); CI installs it. Without Java or a JDBC driver the tests fail
with the message that names the fix.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator

import pytest

# The end-to-end fixtures (and their hook that prints process logs when a test fails).
from tests.e2e.conftest import backend, launcher, pytest_runtest_makereport  # noqa: F401

SPARK_MISSING = importlib.util.find_spec("pyspark") is None
SKIP_REASON = "pyspark is not installed: pip install -e '.[spark]' (CI installs it; see docs/SPARK.md)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: needs pyspark, Java 17+ and the JDBC drivers (tests/spark)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.spark)
            if SPARK_MISSING:
                item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


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
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    print(f"\nSparkSession up in {time.monotonic() - started:.1f} s; JDBC drivers: {resolution.sources}")
    try:
        yield session
    finally:
        session.stop()
