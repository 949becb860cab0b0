"""The exactly-once Spark job: killed before and after its commit, rerun, each output once, the
group's offsets exactly at the snapshotted end. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from spark_jobs import pizza_income
from spark_jobs.pizza_income import GROUP, INPUT, OUTPUT, TOTALS, BatchResult
from spark_jobs.common.positions import PositionRange
from tests.conftest import ADMIN_URL, require_postgres
from tests.spark.conftest import DRIVER_JAVA_OPTIONS, job_env
from tests.spark.orders import Orders
from tests.e2e.api import ok, read_all, unfinished_transactions
from tests.log_start import move_log_start

ROOT = Path(__file__).resolve().parents[2]
JOB_TIMEOUT_S = 180
# A few positions per Spark task, so that each partition's range is read by several tasks.
PER_SPLIT = 3


class Crash(BaseException):
    """Stands for kill -9 in-process: the job stops where it is, sends nothing more, and
    leaves its transaction as it is (BaseException: nothing in the job catches it)."""


def _create_topics(url: str) -> None:
    for name, partitions in ((INPUT, 2), (OUTPUT, 2), (TOTALS, 1)):
        ok(httpx.post(f"{url}/v1/topics", json={"name": name, "partitions": partitions}), 201)


def _outputs(url: str) -> tuple[list[dict], list[dict]]:
    with httpx.Client(base_url=url, timeout=30) as c:
        income = [r["value"] for p in (0, 1) for r in read_all(c, OUTPUT, p)]
        totals = [r["value"] for r in read_all(c, TOTALS, 0)]
    return income, totals


def _group_offsets(url: str) -> dict[int, int]:
    r = httpx.get(f"{url}/v1/groups/{GROUP}/offsets", params={"require_stable": "false"})
    if r.status_code == 404:
        return {}
    return {o["partition"]: o["offset"] for o in ok(r)["offsets"] if o["topic"] == INPUT}


def _log_ends(url: str, topic: str) -> dict[int, int]:
    return {p["partition"]: p["log_end_offset"] for p in ok(httpx.get(f"{url}/v1/topics/{topic}"))["partitions"]}


def _assert_each_pizza_order_once(url: str, orders: Orders) -> list[dict]:
    income, totals = _outputs(url)
    counts = Counter(r["order_id"] for r in income)
    assert [i for i, n in counts.items() if n > 1] == [], "an order's income was output twice"
    assert {r["order_id"]: r["income"] for r in income} == orders.pizza()
    assert len({t["batch"] for t in totals}) == len(totals), "a batch's totals were output twice"
    assert sum(t["orders"] for t in totals) == len(orders.committed)
    assert sum(t["pizza_orders"] for t in totals) == len(orders.pizza())
    assert round(sum(t["income"] for t in totals), 2) == round(sum(orders.pizza().values()), 2)
    return totals


def test_job_killed_before_and_after_commit_outputs_each_result_once(spark, backend, launcher) -> None:  # type: ignore[no-untyped-def]
    url = launcher.server().url
    _create_topics(url)
    orders = Orders(url)
    orders.plain(4)
    orders.open("shop-a", 3)
    orders.commit("shop-a")
    orders.open("shop-b", 2)
    orders.abort("shop-b")  # never counted
    orders.open("shop-c", 3)  # open at the first snapshot
    orders.plain_producer.send(INPUT, {"meal": "Pizza", "value": 1}, partition=0)  # no order_id
    orders.plain_producer.flush()

    seen: dict[str, BatchResult | None] = {}

    def checkpoints(crash_at: str | None, on_snapshot=None):  # type: ignore[no-untyped-def]
        def checkpoint(name: str, result: BatchResult | None) -> None:
            seen[name] = result
            if name == "after-snapshot" and on_snapshot is not None:
                on_snapshot()  # other writers go on while the job reads
            if name == crash_at:
                raise Crash(name)
        return checkpoint

    def run(crash_at: str | None, on_snapshot=None) -> BatchResult:  # type: ignore[no-untyped-def]
        seen.clear()
        return pizza_income.run(spark, url=url, database_url=backend.url, positions_per_split=PER_SPLIT,
                                checkpoint=checkpoints(crash_at, on_snapshot))

    def commit_c_and_add_plain() -> None:
        orders.commit("shop-c")  # commits after the snapshot: its marker is past the end
        orders.plain(1)

    # Run 1 dies after its read, before its write: nothing of it is ever visible.
    with pytest.raises(Crash):
        run("after-read", on_snapshot=commit_c_and_add_plain)
    run1 = seen["after-read"]
    assert run1 is not None and run1.orders == 4 * 2 + 3 * 2, "shop-c, committed after the snapshot, not read"
    assert _outputs(url) == ([], [])
    assert _group_offsets(url) == {}

    # Run 2 (the rerun) fences run 1's transaction, reads from the same start to a new
    # snapshot, commits, and dies right after the Commit answered.
    with pytest.raises(Crash):
        run("after-commit", on_snapshot=lambda: orders.plain(2))
    run2 = seen["after-commit"]
    assert run2 is not None and run2.committed
    assert [r.start for r in run2.ranges] == [0, 0]
    assert _group_offsets(url) == run2.end_offsets(), "offsets advance exactly to the snapshotted end"
    income, totals = _outputs(url)
    assert [t["batch"] for t in totals] == [run2.batch_id]
    assert totals[0]["orders"] == len(orders.committed) - 2 * 2  # all but the last plain orders
    assert totals[0]["ignored_records"] == run2.ignored == 1

    # Run 3 reads exactly what came after run 2's snapshot.
    run3 = run(None)
    assert run3.committed and [r.start for r in run3.ranges] == [r.end for r in run2.ranges]
    assert run3.orders == 2 * 2
    assert _group_offsets(url) == run3.end_offsets() == _log_ends(url, INPUT)
    totals = _assert_each_pizza_order_once(url, orders)
    assert [t["batch"] for t in totals] == [run2.batch_id, run3.batch_id]

    # Run 4: nothing new, so no transaction and no output.
    run4 = run(None)
    assert not run4.committed and run4.outputs == 0 and all(r.size == 0 for r in run4.ranges)
    assert [t["batch"] for t in _assert_each_pizza_order_once(url, orders)] == [run2.batch_id, run3.batch_id]
    orders.close()


def _job_command(how: str, backend_url: str, url: str, *extra: str) -> list[str]:
    args = ["--url", url, "--database-url", backend_url, "--positions-per-split", str(PER_SPLIT), *extra]
    if how == "python -m":
        return [sys.executable, "-m", "spark_jobs.pizza_income", "--master", "local[2]", *args]
    # No --jars: the data source reads with the database's Python driver.
    return [spark_submit(), "--master", "local[2]",
            "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.ui.enabled=false",
            "--driver-java-options", DRIVER_JAVA_OPTIONS,
            str(ROOT / "spark_jobs" / "pizza_income.py"), *args]


def spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def _run_job(cmd: list[str], tmp: Path, label: str, **env_extra: str) -> tuple[int, BatchResult | None]:
    env = job_env(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, **env_extra)
    log = tmp / f"job-{label}.log"
    with open(log, "w") as err:
        # A session of its own: --crash-at in-commit kills the job's whole process group.
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                              timeout=JOB_TIMEOUT_S, start_new_session=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    # Killed: -9 for python -m; spark-submit reports its killed Python driver as 137.
    if done.returncode not in (0, -9, 137):
        pytest.fail(f"{label}: exit {done.returncode}\n{done.stdout}\n{log.read_text()[-5000:]}")
    if not lines:
        return done.returncode, None
    d = json.loads(lines[-1])
    d["ranges"] = [PositionRange(**r) for r in d["ranges"]]
    return done.returncode, BatchResult(**d)


def test_job_under_python_m_and_spark_submit_survives_kill_9(spark, backend, launcher, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = launcher.server().url
    _create_topics(url)
    orders = Orders(url)
    orders.plain(5)
    orders.open("shop-a", 2)
    orders.commit("shop-a")

    # python -m, killed (SIGKILL, its whole process group) in the sink's commit: every task
    # has prepared its transaction, none is committed.
    code, run1 = _run_job(_job_command("python -m", backend.url, url, "--crash-at", "in-commit"), tmp_path, "1")
    assert code == -9 and run1 is None
    assert _outputs(url) == ([], []) and _group_offsets(url) == {}
    assert unfinished_transactions(url), "the killed run's tasks had prepared"

    orders.plain(1)
    # spark-submit, killed right after its Commit.
    code, run2 = _run_job(_job_command("spark-submit", backend.url, url, "--crash-at", "after-commit"), tmp_path, "2")
    assert code == 137 and run2 is not None and run2.committed
    assert run2.end_offsets() == _log_ends(url, INPUT) == _group_offsets(url)
    _assert_each_pizza_order_once(url, orders)

    # The rerun finds nothing new: no output, offsets where they were.
    rerun = pizza_income.run(spark, url=url, database_url=backend.url)
    assert not rerun.committed and rerun.outputs == 0
    assert [(r.start, r.end) for r in rerun.ranges] == [(r.end, r.end) for r in run2.ranges]
    assert len(_assert_each_pizza_order_once(url, orders)) == 1
    assert _group_offsets(url) == run2.end_offsets()
    assert unfinished_transactions(url) == {}, "run 2's write aborted what run 1 left prepared"
    orders.close()


def _commit_group_offsets(url: str, offsets: dict[int, int]) -> None:
    ok(httpx.post(f"{url}/v1/groups/{GROUP}/offsets", json={"offsets": [
        {"topic": INPUT, "partition": p, "offset": o} for p, o in sorted(offsets.items())]}))


def test_job_starts_at_the_log_start_below_which_orders_were_deleted_and_says_so(spark, backend, launcher, caplog) -> None:  # type: ignore[no-untyped-def]
    url = launcher.server().url
    _create_topics(url)
    orders = Orders(url)
    orders.plain(4)  # orders 1-4 at offsets 0-3 of orders/0, orders 5-8 of orders/1
    _commit_group_offsets(url, {0: 1, 1: 2})
    move_log_start(backend.engine, INPUT, 0, 3)  # orders 2 and 3, never read, are gone

    def delete_while_reading(name: str, _result: BatchResult | None) -> None:
        if name == "after-snapshot":
            move_log_start(backend.engine, INPUT, 1, 3)  # order 7, at the batch's start, is gone

    caplog.set_level(logging.WARNING, logger="spark_jobs.common.positions")
    result = pizza_income.run(spark, url=url, database_url=backend.url, positions_per_split=PER_SPLIT,
                              checkpoint=delete_while_reading)

    assert [(r.start, r.end) for r in result.ranges] == [(3, 4), (2, 4)]
    assert result.committed and result.data_loss_partitions == 2
    assert (result.orders, result.pizza_orders) == (2, 2)  # orders 4 and 8
    assert _outputs(url)[0] == [{"order_id": 4, "income": 4.25}, {"order_id": 8, "income": 8.25}]
    assert _group_offsets(url) == {0: 4, 1: 4}
    assert [r.getMessage() for r in caplog.records if r.name == "spark_jobs.common.positions"] == [
        f"data loss for group {GROUP}: orders/0: committed position 1 is below the log start 3, so records in "
        "[1, 3) were deleted before the group read them; starting at the log start",
        f"data loss for group {GROUP}: orders/1: the log start moved to 3 while the batch read from 2, so "
        "records below 3 may be missing from it; the batch goes on without them",
    ]
    orders.close()


class _SharedSession:
    """The run's SparkSession as a job's own: the job stops its session when it ends, which
    here leaves the shared one running for the next tests."""

    def __init__(self, spark) -> None:  # type: ignore[no-untyped-def]
        self._spark = spark
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._spark, name)


def test_fail_on_data_loss_stops_the_job_with_one_line_and_no_output(spark, backend, launcher, monkeypatch,  # type: ignore[no-untyped-def]
                                                                      capsys) -> None:
    url = launcher.server().url
    _create_topics(url)
    orders = Orders(url)
    orders.plain(3)
    _commit_group_offsets(url, {0: 1})
    move_log_start(backend.engine, INPUT, 0, 2)

    # The job's command line run by its main in this process, on the run's SparkSession: the
    # data loss is found before Spark reads anything, so a process and JVM of its own (most of
    # this test's minute on a loaded machine) showed nothing more; the job as a process, its
    # exit status and its kill, is tested above.
    import spark_jobs.session

    session = _SharedSession(spark)
    monkeypatch.setattr(spark_jobs.session, "build_session", lambda *a, **k: (session, None))
    quieted = {name: logging.getLogger(name).level for name in ("py4j", "httpx")}  # the job's main quiets them
    capsys.readouterr()
    try:
        status = pizza_income.main(_job_command("python -m", backend.url, url, "--fail-on-data-loss")[3:])
    finally:
        for name, level in quieted.items():
            logging.getLogger(name).setLevel(level)
    out, err = capsys.readouterr()

    assert status == 2, err[-5000:]
    assert session.stopped, "the job stops its session"
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: data loss for group '{GROUP}': orders/0: committed position 1 is below the log start 2, so "
        "records in [1, 2) were deleted before the group read them (without fail-on-data-loss the job goes on "
        "without them)"]
    assert "{" not in out  # no batch printed
    assert _outputs(url) == ([], []) and _group_offsets(url) == {0: 1}
    orders.close()


# --- What the job needs, checked before Spark starts ------------------------------------------------


def _job_errors(database_url: str, url: str = "http://127.0.0.1:9") -> list[str]:
    """The job's stderr, line by line, after it exited with status 2. Spark writes to stderr
    as soon as its JVM starts, so one line means the job stopped before Spark started."""
    done = subprocess.run([sys.executable, "-m", "spark_jobs.pizza_income", "--url", url,
                           "--database-url", database_url], cwd=ROOT, capture_output=True, text=True,
                          timeout=JOB_TIMEOUT_S)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr[-3000:]
    return done.stderr.splitlines()


def _postgres_database(name: str) -> str:
    from sqlalchemy.engine import make_url

    require_postgres()
    return make_url(ADMIN_URL).set(drivername="postgresql", database=name).render_as_string(hide_password=False)


def test_an_unreachable_database_is_one_error_line_before_spark_starts() -> None:
    [line] = _job_errors("postgresql://postgres@127.0.0.1:9/outbox")
    assert line.startswith('error: cannot read the database postgresql://postgres@127.0.0.1:9/outbox: connection '
                           'failed: connection to server at "127.0.0.1", port 9 failed: Connection refused'), line


def test_a_missing_database_is_one_error_line_before_spark_starts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert _job_errors(f"sqlite:///{tmp_path}/nope.db") == [
        f"error: --database-url: no SQLite database at {tmp_path}/nope.db: name the service's OUTBOX_DATABASE_URL"]
    missing = _postgres_database("outbox_no_such_database")
    [line] = _job_errors(missing)
    assert line.startswith(f"error: cannot read the database {missing}: connection failed: ")
    assert line.endswith('database "outbox_no_such_database" does not exist'), line


def test_a_database_that_is_not_migrated_is_one_error_line_before_spark_starts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    sqlite3.connect(tmp_path / "empty.db").close()
    fix = "it is not an outbox database migrated to 0020 or later (run outbox migrate, or start outbox serve on it)"
    assert _job_errors(f"sqlite:///{tmp_path}/empty.db") == [
        f"error: the database {tmp_path}/empty.db has no committed_records view with batch_position: {fix}"]
    maintenance = _postgres_database("postgres")
    assert _job_errors(maintenance) == [
        f"error: the database {maintenance} has no committed_records view with batch_position: {fix}"]


def test_an_unreachable_service_is_one_error_line_before_spark_starts(migrated_sqlite) -> None:  # type: ignore[no-untyped-def]
    assert _job_errors(f"sqlite:///{migrated_sqlite}", url="http://127.0.0.1:9") == [
        "error: cannot reach the outbox service at http://127.0.0.1:9: [Errno 111] Connection refused"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_missing_topic_is_one_error_line_before_spark_starts(backend, launcher) -> None:  # type: ignore[no-untyped-def]
    url = launcher.server().url
    ok(httpx.post(f"{url}/v1/topics", json={"name": INPUT, "partitions": 2}), 201)
    assert _job_errors(backend.url, url=url) == [
        f"error: topic {OUTPUT!r} does not exist: create it first, e.g. curl -X POST $OUTBOX/v1/topics "
        f"-H 'content-type: application/json' -d '{{\"name\": \"{OUTPUT}\", \"partitions\": 2}}'"]
