"""The pizza job with spark-submit on a standalone cluster on localhost: a master and a worker
started by `python -m spark_jobs.cluster start` (PySpark's own spark-class), the job's reads
run by the worker's executor, in its Python workers, through the `outbox` data source; no JDBC
jar. On SQLite and PostgreSQL, one cluster for both (it takes ~10-15 s to start)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from spark_jobs import cluster
from spark_jobs.pizza_income import INPUT
from tests.spark.conftest import DRIVER_JAVA_OPTIONS
from tests.spark.test_pizza_income_job import (
    ROOT,
    Orders,
    _create_topics,
    _group_offsets,
    _log_ends,
    _outputs,
    _run_job,
    spark_submit,
)

pytestmark = pytest.mark.cluster


def _cluster_cli(*args: str) -> str:
    # The master's and the worker's JVMs with the suite's JIT options, as its drivers
    # (tests/spark/conftest.py): spark-class adds SPARK_DAEMON_JAVA_OPTS to a daemon's.
    done = subprocess.run([sys.executable, "-m", "spark_jobs.cluster", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=cluster.START_TIMEOUT_S + 30,
                          env={**os.environ, "SPARK_DAEMON_JAVA_OPTS": DRIVER_JAVA_OPTIONS})
    assert done.returncode == 0, f"cluster {args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.Cluster]:
    """A cluster started with the documented command, for this module's tests; stopped with
    the documented command after them, which must leave neither daemon running nor the
    master's web UI answering, and nothing recorded."""
    directory = tmp_path_factory.mktemp("cluster")
    _cluster_cli("start", "--dir", str(directory))
    started = cluster.load(directory)
    assert started is not None
    try:
        yield started
    finally:
        stopped = _cluster_cli("stop", "--dir", str(directory))
    assert stopped == f"stopped worker {started.worker_pid}, master {started.master_pid}\n"
    assert not cluster.is_running(started.worker_pid, cluster.WORKER_CLASS)
    assert not cluster.is_running(started.master_pid, cluster.MASTER_CLASS)
    assert cluster.master_state(started.web_ui) is None
    assert cluster.load(directory) is None


def test_the_job_submitted_to_a_standalone_cluster_outputs_each_income_once_and_commits_the_offsets(  # type: ignore[no-untyped-def]
        standalone, backend, launcher, tmp_path) -> None:
    url = launcher.server().url
    _create_topics(url)
    orders = Orders(url)
    orders.plain(3)  # orders 1-6
    orders.open("shop-a", 2)  # orders 7-10
    orders.commit("shop-a")
    orders.open("shop-b", 1)  # orders 11-12, never counted
    orders.abort("shop-b")
    ends = _log_ends(url, INPUT)

    code, result = _run_job(
        [spark_submit(), "--master", standalone.master_url, "--conf", "spark.ui.enabled=false",
         "--conf", "spark.sql.shuffle.partitions=2", "--driver-java-options", DRIVER_JAVA_OPTIONS,
         "--conf", f"spark.executor.extraJavaOptions={DRIVER_JAVA_OPTIONS}", str(ROOT / "spark_jobs" / "pizza_income.py"),
         "--url", url, "--database-url", backend.url, "--positions-per-split", "3"],
        tmp_path, "cluster", SPARK_LOCAL_IP="127.0.0.1")

    assert code == 0 and result is not None and result.committed
    # The application ran on this master, and its executor, on the worker, ran the tasks.
    [app_id] = re.findall(r"Connected to Spark cluster with app ID (app-\S+)", (tmp_path / "job-cluster.log").read_text())
    apps = httpx.get(f"{standalone.web_ui}/json/").json()["completedapps"]
    assert [(a["name"], a["state"]) for a in apps if a["id"] == app_id] == [("pizza-income", "FINISHED")]
    executor_logs = list((Path(standalone.directory) / "work" / app_id).glob("*/stderr"))
    assert len(executor_logs) == 1 and "Finished task" in executor_logs[0].read_text()

    income, totals = _outputs(url)
    pizza = orders.pizza()  # orders 1-10 but 3, 6 and 9 (salads)
    assert sorted(income, key=lambda r: r["order_id"]) == [
        {"order_id": i, "income": v} for i, v in sorted(pizza.items())]
    batch = f"{INPUT}:0=0-{ends[0]},1=0-{ends[1]}"
    assert totals == [{
        "batch": batch, "topic": INPUT,
        "ranges": [{"partition": p, "start": 0, "end": ends[p]} for p in (0, 1)],
        "orders": 10, "pizza_orders": 7, "income": round(sum(pizza.values()), 2), "ignored_records": 0,
    }]
    assert result.batch_id == batch
    assert _group_offsets(url) == ends == result.end_offsets()
    orders.close()


def test_the_cluster_refuses_to_start_twice_from_one_directory(tmp_path: Path) -> None:
    """A second `start` would leave the first cluster running with nothing to stop it by. (A
    stand-in for the master: a process whose command line names the master's class.)"""
    directory = tmp_path / "cluster"
    directory.mkdir()
    master = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", cluster.MASTER_CLASS])
    try:
        (directory / cluster.STATE_FILE).write_text(json.dumps({
            "directory": str(directory), "master_url": "spark://127.0.0.1:7077", "web_ui": "http://127.0.0.1:8080",
            "master_pid": master.pid, "worker_pid": master.pid, "cores": 2, "memory": "1g"}))
        done = subprocess.run([sys.executable, "-m", "spark_jobs.cluster", "start", "--dir", str(directory)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    finally:
        master.kill()
        master.wait()
    assert (done.returncode, done.stdout, done.stderr) == (2, "", (
        f"error: a cluster started from {directory} is running (spark://127.0.0.1:7077): stop it first: "
        f"python -m spark_jobs.cluster stop --dir {directory}\n"))


def test_the_cluster_without_java_is_one_error_line(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    done = subprocess.run([sys.executable, "-m", "spark_jobs.cluster", "start", "--dir", str(directory)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "JAVA_HOME": str(tmp_path / "nojava")})
    assert (done.returncode, done.stdout, done.stderr) == (2, "", (
        f"error: Java not found (JAVA_HOME={tmp_path}/nojava has no bin/java): install a Java 17+ runtime "
        "(Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) and put it on PATH or point JAVA_HOME at it\n"))
    assert cluster.load(directory) is None
