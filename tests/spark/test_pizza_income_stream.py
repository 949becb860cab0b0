"""The streaming pizza job (spark_jobs.pizza_income_stream): while transactional and plain
producers write, commit and abort, its output is the committed pizza orders, each exactly once,
in commit order per input partition, and the group's offsets move in the commits that carry
the outputs; a query restarted from its checkpoint, without it, after a SIGKILL at a random
point, or after SIGTERM to its process group goes on exactly where the last commit left it. On SQLite and PostgreSQL."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from spark_jobs import pizza_income_stream
from spark_jobs.pizza_income import INPUT, OUTPUT
from spark_jobs.pizza_income_stream import GROUP
from tests.e2e.api import ok, read_all, unfinished_transactions
from tests.spark.conftest import job_env
from tests.spark.orders import Orders

ROOT = Path(__file__).resolve().parents[2]
SINK_ID = f"{GROUP}-sink"


@pytest.fixture
def url(url):  # type: ignore[no-untyped-def]
    """conftest's service, with the job's topics."""
    for name in (INPUT, OUTPUT):
        ok(httpx.post(f"{url}/v1/topics", json={"name": name, "partitions": 2}), 201)
    return url


def committed_pizza_orders(url: str) -> dict[str, tuple[int, dict]]:
    """What the job must output: each committed pizza order record, by its position
    ("orders/0/17"), with its commit position and the output's value."""
    out = {}
    with httpx.Client(base_url=url, timeout=30) as c:
        for p in (0, 1):
            for r in read_all(c, INPUT, p):
                v = r["value"]
                if v.get("order_id") is not None and v.get("meal") == "Pizza":
                    out[f"{INPUT}/{p}/{r['offset']}"] = (r["commit_position"],
                                                         {"order_id": v["order_id"], "income": v["value"]})
    return out


def outputs(url: str) -> list[tuple[int, str, dict]]:
    """(output partition, source position, value) of every committed output, in log order."""
    with httpx.Client(base_url=url, timeout=30) as c:
        return [(p, r["headers"]["source"], r["value"]) for p in (0, 1) for r in read_all(c, OUTPUT, p)]


def group_offsets(url: str) -> dict[int, int]:
    r = httpx.get(f"{url}/v1/groups/{GROUP}/offsets", params={"require_stable": "false"})
    return {} if r.status_code == 404 else {o["partition"]: o["offset"] for o in ok(r)["offsets"]
                                            if o["topic"] == INPUT}


def log_ends(url: str) -> dict[int, int]:
    return {p["partition"]: p["log_end_offset"] for p in ok(httpx.get(f"{url}/v1/topics/{INPUT}"))["partitions"]}


def wait_caught_up(url: str, query, timeout_s: float = 90) -> None:  # type: ignore[no-untyped-def]
    """Until the group's offsets are the input's log ends: every committed order consumed."""
    deadline = time.monotonic() + timeout_s
    while group_offsets(url) != log_ends(url):
        assert query.isActive, f"the query stopped: {query.exception()}"
        assert time.monotonic() < deadline, f"group at {group_offsets(url)}, log ends {log_ends(url)}"
        time.sleep(0.3)


def assert_each_committed_pizza_order_once(url: str) -> None:
    expected = committed_pizza_orders(url)
    out = outputs(url)
    twice = [s for s, n in Counter(s for _, s, _ in out).items() if n > 1]
    assert twice == [], "output twice"
    assert {s: v for _, s, v in out} == {s: v for s, (_, v) in expected.items()}
    # Commit order: within an output partition, the outputs of one input partition follow
    # the inputs' commit positions (a transaction's records share one, in offset order).
    for p in (0, 1):
        for source_partition in ("0", "1"):
            order = [(expected[s][0], int(s.rsplit("/", 1)[1])) for q, s, _ in out
                     if q == p and s.split("/")[1] == source_partition]
            assert order == sorted(order), f"output {p} from input {source_partition} not in commit order"


def test_the_stream_outputs_each_committed_pizza_order_once_while_producers_commit_and_abort(spark, backend, url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    orders = Orders(url)
    orders.plain(3)
    orders.open("shop-a", 2)
    query = pizza_income_stream.start(spark, url=url, database_url=backend.url,
                                      checkpoint=str(tmp_path / "checkpoint"), trigger_seconds=0.3)
    try:
        orders.plain(2)  # after shop-a's records, committed before them
        orders.commit("shop-a")
        orders.open("shop-b", 3)
        orders.plain(1)
        orders.abort("shop-b")  # never output
        orders.open("shop-c", 2)  # open while the query reads: left out until it commits
        orders.plain_producer.send(INPUT, {"meal": "Pizza", "value": 1}, partition=1)  # no order id
        orders.plain_producer.flush()
        time.sleep(1.0)
        orders.commit("shop-c")
        orders.plain(2)
        wait_caught_up(url, query)
    finally:
        query.stop()
    assert query.exception() is None
    assert_each_committed_pizza_order_once(url)
    assert len(outputs(url)) == len(orders.pizza())
    assert unfinished_transactions(url) == {}
    orders.close()


def test_a_query_restarted_from_its_checkpoint_or_without_it_goes_on_where_the_last_commit_left_it(spark, backend, url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Trigger.AvailableNow runs: the second from the same checkpoint reads only what came
    since; the third from a new checkpoint (batch ids from 0 again, which the sink committed
    already) starts at the group's offsets, and its batch 0 is no replay: its positions were
    never committed."""
    orders = Orders(url)
    checkpoint = str(tmp_path / "checkpoint")

    def run(at: str) -> None:
        query = pizza_income_stream.start(spark, url=url, database_url=backend.url, checkpoint=at,
                                          trigger_seconds=None)
        query.awaitTermination(120)
        assert query.exception() is None

    orders.plain(2)
    run(checkpoint)
    assert group_offsets(url) == log_ends(url)
    assert len(outputs(url)) == len(orders.pizza()) == 4 - 1  # order 3 is a salad

    orders.open("shop-a", 2)
    orders.commit("shop-a")
    run(checkpoint)
    assert len(outputs(url)) == len(orders.pizza())

    orders.plain(3)
    run(str(tmp_path / "new-checkpoint"))
    assert_each_committed_pizza_order_once(url)
    assert len(outputs(url)) == len(orders.pizza())
    assert group_offsets(url) == log_ends(url)
    assert unfinished_transactions(url) == {}
    orders.close()


# --- kill -9 at random points -------------------------------------------------------------------


def _start_job(url: str, backend_url: str, checkpoint: Path, log: Path, *extra: str) -> subprocess.Popen:
    env = job_env(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.pizza_income_stream", "--master", "local[2]", "--url", url,
         "--database-url", backend_url, "--checkpoint", str(checkpoint), *extra],
        cwd=ROOT, env=env, start_new_session=True, stdout=log.open("a"), stderr=subprocess.STDOUT)


@pytest.mark.slow
# Three Spark drivers started as processes, one after the other: 2 min here with the machine
# shared, 4.7 min at a load average of 12 on its 2 cores.
@pytest.mark.timeout(480)
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_stream_killed_with_sigkill_or_stopped_by_its_group_sigterm_outputs_each_order_once_after_restarts(backend, url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The job as its own process (driver, JVM, Python workers), first killed with SIGKILL at a
    random moment while orders keep coming, then, restarted from its checkpoint, stopped by
    SIGTERM to its whole process group mid-stream (what a process supervisor sends: the JVM,
    started with SIGTERM ignored, does not hear it; the job stops the query), then restarted
    to the end. Whatever it was doing (planning,
    tasks sending or prepared, the commit, the checkpoint's write), no order is output twice or
    lost; the SIGTERM ends the job with exit status 0 and one line of its own, STOPPED, no
    Python traceback. (PostgreSQL only: three Spark drivers as processes; the sink's side is the same
    on SQLite, which the tests above cover.)"""
    seed = int(os.environ.get("OUTBOX_TEST_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    orders = Orders(url)
    checkpoint = tmp_path / "checkpoint"

    def planned_batches() -> int:  # Spark writes offsets/<batch id> before it runs the micro-batch
        return len(list((checkpoint / "offsets").glob("[0-9]*")))

    for round_, sig in enumerate((signal.SIGKILL, signal.SIGTERM)):
        log = tmp_path / f"job-{round_}.log"
        planned = planned_batches()
        job = _start_job(url, backend.url, checkpoint, log, "--trigger-seconds", "0.2")
        # Orders in small transactions and plain, until the signal: the job is mid-stream. The
        # SIGTERM waits for a micro-batch this run planned first (Spark up, the query running),
        # then comes within 2 s, mostly while that micro-batch runs.
        started_by = time.monotonic() + 8  # Spark starts in about 8 s
        deadline = time.monotonic() + 240
        signal_at = None
        n = 0
        while signal_at is None or time.monotonic() < signal_at:
            assert job.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            if signal_at is None and (sig == signal.SIGKILL and time.monotonic() > started_by
                                      or sig == signal.SIGTERM and planned_batches() > planned):
                signal_at = time.monotonic() + rng.uniform(0, 6 if sig == signal.SIGKILL else 2)
            shop = f"shop-{round_}-{n % 3}"
            orders.open(shop, 1)
            orders.abort(shop) if n % 4 == 3 else orders.commit(shop)
            orders.plain(1)
            n += 1
            time.sleep(0.05)
        os.killpg(job.pid, sig)
        try:
            status = job.wait(120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"seed {seed}: still running 120 s after {sig.name}: {log.read_text()[-4000:]}")
        got = outputs(url)
        assert len({s for _, s, _ in got}) == len(got), f"seed {seed}: output twice after {sig.name}"
    text = log.read_text()
    assert status == 0, f"seed {seed}: {text[-4000:]}"
    lines = text.splitlines()
    # One line of the job's, STOPPED: the JVM, deaf to the group's SIGTERM, did not end first.
    assert [line for line in lines if line.startswith("stopped")] == [pizza_income_stream.STOPPED], text[-4000:]
    # No Python traceback, no error line. Spark's JVM may log the micro-batch it aborts.
    assert "Traceback" not in text and not any(line.startswith("error") for line in lines), text[-4000:]

    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.pizza_income_stream", "--master", "local[2]", "--url", url,
         "--database-url", backend.url, "--checkpoint", str(checkpoint), "--available-now"],
        cwd=ROOT, env=job_env(PYSPARK_PYTHON=sys.executable), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"seed {seed}: {done.stderr[-4000:]}"
    assert group_offsets(url) == log_ends(url), f"seed {seed}"
    assert_each_committed_pizza_order_once(url)
    assert len(outputs(url)) == len(orders.pizza()), f"seed {seed}"
    # The killed runs' transactions: aborted by the restart's take-over, none left to block.
    assert unfinished_transactions(url) == {}, f"seed {seed}"
    orders.close()


def _job_with_a_first_output(url: str, backend, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The job started with a 0.2-s trigger, plain orders sent until it has output one: (the
    orders' writer, the job's process, its log, the deadline that also bounds what follows)."""
    orders = Orders(url)
    log = tmp_path / "job.log"
    job = _start_job(url, backend.url, tmp_path / "checkpoint", log, "--trigger-seconds", "0.2")
    # The first micro-batch waits for Spark to start its query: a minute or more on a loaded machine.
    deadline = time.monotonic() + 240
    while not outputs(url):
        assert job.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
        orders.plain(1)
        time.sleep(0.2)
    return orders, job, log, deadline


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_ctrl_c_stops_the_stream_with_one_line_and_nothing_left_open(backend, url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGINT to the job's process group, as a terminal's Ctrl-C sends it, while orders keep
    coming: the query stops, the job says so in one line and exits 0, and no transaction of
    the sink is left open or prepared (the micro-batch in progress, if any, was aborted)."""
    orders, job, log, deadline = _job_with_a_first_output(url, backend, tmp_path)
    for _ in range(10):
        orders.plain(1)
    os.killpg(job.pid, signal.SIGINT)
    assert job.wait(60) == 0, log.read_text()[-4000:]
    assert "stopped: the micro-batch in progress, if any, was aborted" in log.read_text()
    # Not a KeyboardInterrupt inside a Py4J call (the JVM's connection broken, the query and
    # its Spark left behind).
    assert "KeyboardInterrupt" not in log.read_text() and "Py4JError" not in log.read_text(), log.read_text()[-4000:]
    assert unfinished_transactions(url) == {}
    # What it output before it stopped: committed pizza orders, each once.
    sources = [s for _, s, _ in outputs(url)]
    assert sources and len(set(sources)) == len(sources)
    assert set(sources) <= set(committed_pizza_orders(url))
    orders.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_ctrl_c_aborts_a_prepared_task_transaction_that_sparks_abort_missed(backend, url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A task's transaction left Prepared at the stop (Spark's abort runs in a Python worker
    of its own, which the group's signal may end first): the job aborts it itself once the
    query has stopped, so Ctrl-C leaves nothing prepared for the next start to clean."""
    from app.client import Producer

    orders, job, log, deadline = _job_with_a_first_output(url, backend, tmp_path)
    # No more orders: once the job has committed every one and holds nothing open, no
    # micro-batch commits again (each one's commit would clean the planted transaction up).
    while not (group_offsets(url) == log_ends(url) and unfinished_transactions(url) == {}):
        assert job.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.2)
    time.sleep(1)  # a trigger or more with nothing new: the query is idle
    task = Producer(url, f"{pizza_income_stream.sink_id(GROUP)}.7")
    task.init_transactions()
    task.begin_transaction()
    task.send(OUTPUT, {"order_id": "planted", "income": 1.0}, key="planted", headers={"source": "planted"})
    task.prepare_transaction()
    task.close()
    assert unfinished_transactions(url) == {f"{pizza_income_stream.sink_id(GROUP)}.7": "Prepared"}
    os.killpg(job.pid, signal.SIGINT)
    assert job.wait(60) == 0, log.read_text()[-4000:]
    assert unfinished_transactions(url) == {}, log.read_text()[-4000:]
    assert "planted" not in {s for _, s, _ in outputs(url)}
    orders.close()


@pytest.mark.slow
@pytest.mark.timeout(420)
# The signals are the job's and Spark's, not the database's: SQLite, the quicker to serve.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sigterm_to_the_jobs_process_group_ends_it_with_the_stopped_line_last_and_exit_status_0(backend, url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGTERM to the job's whole process group (what a process supervisor sends: the job, its
    JVM and the Python processes the JVM started all get it) while a micro-batch is under way,
    once the job has output an order: the job stops the query itself, exits 0, its last line
    is STOPPED (after what Spark logs of the micro-batch it aborts), Spark logs no failure of
    the query, no transaction of the sink is left open or prepared, and what it output is
    committed pizza orders, each once."""
    orders = Orders(url)
    log = tmp_path / "job.log"
    checkpoint = tmp_path / "checkpoint"

    def batches(kind: str) -> int:  # Spark writes offsets/<batch id> before it runs the micro-batch, commits/ after
        return len(list((checkpoint / kind).glob("[0-9]*")))

    job = _start_job(url, backend.url, checkpoint, log, "--trigger-seconds", "0.2")
    try:
        deadline = time.monotonic() + 300  # Spark's start and first micro-batch, on a loaded machine
        while not outputs(url):
            assert job.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            orders.plain(1)
            time.sleep(0.2)
        # Orders keep coming until a micro-batch is planned and not yet committed: the signal
        # comes while it runs. (offsets/ read first: a commit written between the two reads
        # shows as no micro-batch under way, never the other way round.)
        deadline = time.monotonic() + 120
        while not batches("offsets") > batches("commits"):
            assert job.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            orders.plain(1)
        os.killpg(job.pid, signal.SIGTERM)
        status = job.wait(120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        orders.close()
    text = log.read_text()
    assert status == 0, text[-4000:]
    assert text.splitlines()[-1] == pizza_income_stream.STOPPED, text[-4000:]
    # Not the query's failure (the JVM, or the source's runner, ended under it): Spark logs
    # that with these. A stack trace as such is no failure: a stop that cancels a running task
    # has Spark log the task's cancellation (SPARK_JOB_CANCELLED, TaskKilledException) with one.
    assert not any(m in text for m in ("EOFException", "INTERNAL_ERROR", "Py4JError", "Py4JNetworkError")), text[-4000:]
    assert unfinished_transactions(url) == {}
    sources = [s for _, s, _ in outputs(url)]
    assert sources and len(set(sources)) == len(sources)
    assert set(sources) <= set(committed_pizza_orders(url))


def test_the_clean_up_after_a_stop_holds_the_stop_no_longer_than_its_bound(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """A service that does not answer holds Ctrl-C STOP_CLEANUP_S at most: the stop goes on with
    a warning while the abort is still waiting, and the next start aborts what it left."""
    release = threading.Event()
    waiting = threading.Event()

    def unanswered(options, keep):  # type: ignore[no-untyped-def]
        waiting.set()
        release.wait(60)

    monkeypatch.setattr(pizza_income_stream, "clean_leftovers", unanswered)
    monkeypatch.setattr(pizza_income_stream, "STOP_CLEANUP_S", 0.2)
    try:
        with caplog.at_level("WARNING", logger=pizza_income_stream.logger.name):
            pizza_income_stream.abort_what_the_stop_left(
                url="http://127.0.0.1:1", checkpoint="/nonexistent", group=GROUP, output_topic=OUTPUT, api_key=None)
        assert waiting.wait(5) and not release.is_set()  # returned while the abort still waited
        assert [r.getMessage() for r in caplog.records] == [
            "the sink's open transactions were not all aborted within 0.2 s: the next start aborts them"]
    finally:
        release.set()
