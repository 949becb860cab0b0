"""Guarantee 9 with several coordinator processes at once: they race to complete the same
transactions, and every (transaction, partition) still gets exactly one marker and every
transaction's offsets are committed once."""

from __future__ import annotations

import re
import threading
import time
import traceback

import httpx
import pytest
from sqlalchemy import func, select

from app.storage.tables import record_batches, records
from tests.e2e.api import describe_txn, group_offsets, ok, partition_offsets
from tests.helpers import ident, init_producer, records_with_batches

pytestmark = pytest.mark.e2e

TOPIC = "multi"
PARTITIONS = 3
PRODUCERS = 7
ROUNDS = 3  # transactions per producer
WORKERS = 3
CLIENT_THREADS = 4


def _tid(i: int) -> str:
    return f"mw-{i:02d}"


def _group(i: int) -> str:
    return f"group-{i:02d}"


def _value(i: int, round_: int, p: int) -> str:
    return f"{_tid(i)}/r{round_}/p{p}"


def _transaction(c: httpx.Client, i: int, producer: dict, round_: int) -> int:
    """One transaction of producer i: a record in each partition and group offsets, then
    commit. Round 0 runs before any worker. Returns its txn_id."""
    tid = _tid(i)
    for attempt in range(100):
        r = c.post(f"/v1/transactions/{tid}/begin", json=ident(producer))
        # Begin after a commit that no worker has completed yet completes it itself (racing the
        # workers) or, at worst, answers the retriable CONCURRENT_TRANSACTIONS.
        if r.status_code == 409 and r.json()["error_code"] == "CONCURRENT_TRANSACTIONS":
            time.sleep(0.02)
            continue
        txn_id = ok(r)["txn_id"]
        break
    else:
        raise AssertionError(f"{tid}: begin kept answering CONCURRENT_TRANSACTIONS")
    ok(c.post("/v1/records", json={
        **ident(producer), "transactional_id": tid,
        "batches": [{"topic": TOPIC, "partition": p, "base_sequence": round_,
                     "records": [{"value": _value(i, round_, p)}]} for p in range(PARTITIONS)],
    }))
    ok(c.post(f"/v1/transactions/{tid}/offsets", json={
        **ident(producer), "group_id": _group(i),
        "offsets": [{"topic": "source", "partition": 0, "offset": 100 * (round_ + 1) + i},
                    {"topic": "source", "partition": 1, "offset": 1000 * (round_ + 1) + i}],
    }))
    end = ok(c.post(f"/v1/transactions/{tid}/commit", json={**ident(producer), "txn_id": txn_id}))
    # complete_inline is off: PrepareCommit, unless a worker already completed it between the
    # commit and the describe that makes the answer.
    assert end["txn_id"] == txn_id, end
    assert end["state"] in (("PrepareCommit",) if round_ == 0 else ("PrepareCommit", "CompleteCommit")), end
    return txn_id


def _in_threads(fn, items: list) -> None:  # type: ignore[no-untyped-def]
    errors: list[str] = []

    def run(chunk: list) -> None:
        try:
            for item in chunk:
                fn(item)
        except BaseException:  # noqa: BLE001
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=run, args=(items[k::CLIENT_THREADS],)) for k in range(CLIENT_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, "\n".join(errors)


def _wait_all(c: httpx.Client, state: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        states = {_tid(i): describe_txn(c, _tid(i))["state"] for i in range(PRODUCERS)}
        if set(states.values()) == {state}:
            return
        assert time.monotonic() < deadline, f"not all {state}: {states}"
        time.sleep(0.05)


def test_racing_coordinator_processes_write_each_marker_once(backend, launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server(complete_inline=False, run_coordinator=False)
    url = server.url
    txn_ids: dict[int, list[int]] = {i: [] for i in range(PRODUCERS)}
    producers: dict[int, dict] = {}

    with server.client() as c:
        ok(c.post("/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}), 201)
        ok(c.post("/v1/topics", json={"name": "source", "partitions": 2}), 201)
        for i in range(PRODUCERS):
            producers[i] = init_producer(c, _tid(i))

    def rounds(*numbers: int):  # type: ignore[no-untyped-def]
        def run(i: int) -> None:
            with httpx.Client(base_url=url, timeout=60.0) as c:
                for n in numbers:
                    txn_ids[i].append(_transaction(c, i, producers[i], n))
        return run

    # A backlog of PrepareCommit transactions left for whichever worker comes first.
    _in_threads(rounds(0), list(range(PRODUCERS)))
    with server.client() as c:
        assert {describe_txn(c, _tid(i))["state"] for i in range(PRODUCERS)} == {"PrepareCommit"}
    assert backend.markers() == []
    workers = [launcher.coordinator(coordinator_interval_ms=20) for _ in range(WORKERS)]
    for w in workers:
        w.wait_for_log("coordinator and log cleaner running against")
    with server.client() as c:
        _wait_all(c, "CompleteCommit")

    # Two more transactions per producer while the three workers poll every 20 ms: each
    # PrepareCommit is raced by the workers, and the Begin right after it by the server too.
    _in_threads(rounds(1, 2), list(range(PRODUCERS)))
    # One worker dies (kill -9) while the last completions may still be running; the others
    # finish whatever it was doing.
    workers[0].kill9()
    with server.client() as c:
        _wait_all(c, "CompleteCommit")
    for w in workers[1:]:
        assert w.alive(), w.log_text()[-3000:]
    reported = sum(int(n) for w in workers for n in re.findall(r"completed_commits=(\d+)", w.log_text()))
    print(f"[{backend.name}] the workers reported {reported} completions of {ROUNDS * PRODUCERS} transactions")

    all_txn_ids = sorted(t for ts in txn_ids.values() for t in ts)
    assert len(all_txn_ids) == len(set(all_txn_ids)) == ROUNDS * PRODUCERS

    # Exactly one COMMIT marker per (transaction, partition), and no other marker.
    duplicated = backend.query(
        select(record_batches.c.txn_id, records.c.topic_id, records.c.partition, func.count())
        .select_from(records_with_batches())
        .where(records.c.control_type.is_not(None))
        .group_by(record_batches.c.txn_id, records.c.topic_id, records.c.partition)
        .having(func.count() > 1)
    )
    assert duplicated == []
    markers = backend.markers()
    assert sorted((t, p, ctl, txn) for t, p, _, ctl, txn in markers) == sorted(
        (TOPIC, p, "COMMIT", txn) for txn in all_txn_ids for p in range(PARTITIONS)
    )
    assert backend.open_transaction_partitions() == []
    assert backend.staged_offsets() == []
    backend.assert_logs_gapless()
    backend.assert_batch_rows_match()

    per_partition = 2 * ROUNDS * PRODUCERS  # a data record and a marker per transaction
    with server.client() as c:
        assert partition_offsets(c, TOPIC) == {p: (0, per_partition, per_partition) for p in range(PARTITIONS)}
        for p in range(PARTITIONS):
            page = ok(c.get(f"/v1/topics/{TOPIC}/partitions/{p}/records", params={"max_records": 1000}))
            assert sorted(r["value"] for r in page["records"]) == sorted(
                _value(i, n, p) for i in range(PRODUCERS) for n in range(ROUNDS)
            )
            assert page["next_offset"] == per_partition
            # Each record is exposed at the offset of its own transaction's marker.
            marker_at = {txn: off for _, part, off, _, txn in markers if part == p}
            for rec in page["records"]:
                i, n = int(rec["value"][3:5]), int(rec["value"].split("/")[1][1:])
                assert rec["commit_position"] == marker_at[txn_ids[i][n]], rec
        # The last transaction's offsets are the group's: a late re-completion of an earlier
        # one would have put its offsets back.
        for i in range(PRODUCERS):
            assert group_offsets(c, _group(i)) == [("source", 0, 100 * ROUNDS + i), ("source", 1, 1000 * ROUNDS + i)]
    assert len(backend.group_offset_rows()) == 2 * PRODUCERS

    # A straggler pass finds nothing to do.
    before = (backend.markers(), backend.log_ends(), backend.group_offset_rows())
    assert launcher.coordinator_once() == {"timed_out": 0, "completed_commits": 0, "completed_aborts": 0}
    assert (backend.markers(), backend.log_ends(), backend.group_offset_rows()) == before
