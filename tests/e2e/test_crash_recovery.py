"""Guarantees 2 and 9 with real processes killed with SIGKILL: a transaction left in
PrepareCommit/PrepareAbort by a crashed server is completed by the next coordinator that
runs, completing it again writes nothing (one control marker per partition), and a crash at a
random moment under load loses nothing that was acknowledged."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
import traceback
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, insert, select, update

from app.domain.types import ControlType, RecordState
from app.storage.engine import Database, build_engine
from app.storage.batch_rows import marker_batch_row
from app.storage.log_end import take_offsets
from app.storage.markers import MarkerOwner, marker_row
from app.storage.tables import record_batches, records, transaction_partitions, transactions
from tests.e2e.api import (
    committed_view,
    describe_txn,
    group_offsets,
    ok,
    partition_offsets,
    refused,
    uncommitted_view,
    wait_for_state,
)
from tests.helpers import batch, begin, ident, init_producer, records_with_batches, send

pytestmark = pytest.mark.e2e

TID = "tx-crash"
GROUP = "g"
# A server that only makes the decision durable: no markers in the request, no worker.
PREPARE_ONLY = {"complete_inline": False, "run_coordinator": False}


def _prepare(c, *, commit: bool) -> tuple[dict, int]:  # type: ignore[no-untyped-def]
    """Topics, two plain records, a committed group offset, then one transaction over
    orders/0, orders/1 and audit/0 carrying group offsets, ended with commit or abort. The
    server leaves it in PrepareCommit / PrepareAbort. Returns (producer, txn_id)."""
    for name, n in (("orders", 3), ("audit", 1), ("in", 2)):
        ok(c.post("/v1/topics", json={"name": name, "partitions": n}), 201)
    r = ok(send(c, [batch("orders", 0, ["pre-0", "pre-1"])]))
    assert r["results"][0]["base_offset"] == 0
    ok(c.post(f"/v1/groups/{GROUP}/offsets", json={"offsets": [{"topic": "in", "partition": 0, "offset": 3}]}))

    producer = init_producer(c, TID)
    txn_id = begin(c, TID, producer)["txn_id"]
    r = ok(send(
        c,
        [batch("orders", 0, ["a0", "a1"], base_sequence=0),
         batch("orders", 1, ["b0"], base_sequence=0),
         batch("audit", 0, ["c0", "c1", "c2"], base_sequence=0)],
        producer, TID,
    ))
    assert [(b["topic"], b["partition"], b["base_offset"], b["last_offset"]) for b in r["results"]] == [
        ("orders", 0, 2, 3), ("orders", 1, 0, 0), ("audit", 0, 0, 2)
    ]
    ok(c.post(f"/v1/transactions/{TID}/offsets", json={
        **ident(producer), "group_id": GROUP,
        "offsets": [{"topic": "in", "partition": 0, "offset": 10},
                    {"topic": "in", "partition": 1, "offset": 4}],
    }))
    end = ok(c.post(f"/v1/transactions/{TID}/{'commit' if commit else 'abort'}",
                    json={**ident(producer), "txn_id": txn_id}))
    assert end["state"] == ("PrepareCommit" if commit else "PrepareAbort")
    assert end["txn_id"] == txn_id
    assert sorted((p["topic"], p["partition"], p["first_offset"]) for p in end["partitions"]) == [
        ("audit", 0, 0), ("orders", 0, 2), ("orders", 1, 0)
    ]
    assert [(o["group_id"], o["topic"], o["partition"], o["offset"]) for o in end["pending_offsets"]] == [
        (GROUP, "in", 0, 10), (GROUP, "in", 1, 4)
    ]
    return producer, txn_id


def _assert_prepared_state(c, backend, state: str) -> None:  # type: ignore[no-untyped-def]
    """Decided but not completed: nothing of the transaction is visible to read_committed,
    its offsets are unstable, no marker exists."""
    assert describe_txn(c, TID)["state"] == state
    assert committed_view(c, "orders", 0) == [(0, 0, "pre-0"), (1, 1, "pre-1")]
    assert committed_view(c, "orders", 1) == []
    assert committed_view(c, "audit", 0) == []
    assert uncommitted_view(c, "orders", 0) == [(0, "pre-0"), (1, "pre-1"), (2, "a0"), (3, "a1")]
    assert uncommitted_view(c, "audit", 0) == [(0, "c0"), (1, "c1"), (2, "c2")]
    # (log start, log end, last stable offset): the open transaction holds the LSO back.
    assert partition_offsets(c, "orders") == {0: (0, 4, 2), 1: (0, 1, 0), 2: (0, 0, 0)}
    assert partition_offsets(c, "audit") == {0: (0, 3, 0)}
    body = refused(c.get(f"/v1/groups/{GROUP}/offsets"), 409, "UNSTABLE_OFFSET_COMMIT")
    assert body["retriable"] is True
    stale = ok(c.get(f"/v1/groups/{GROUP}/offsets", params={"require_stable": "false"}))
    assert [(o["topic"], o["partition"], o["offset"]) for o in stale["offsets"]] == [("in", 0, 3)]
    assert backend.markers() == []


def _crash(server) -> None:  # type: ignore[no-untyped-def]
    server.kill9()
    assert server.proc.returncode == -signal.SIGKILL


def _expected_markers(control: str, txn_id: int) -> list[tuple]:
    # orders/0 holds 4 records (marker at 4), orders/1 one (marker at 1), audit/0 three (at 3).
    return [("audit", 0, 3, control, txn_id), ("orders", 0, 4, control, txn_id),
            ("orders", 1, 1, control, txn_id)]


def _snapshot(c, backend) -> tuple:  # type: ignore[no-untyped-def]
    return (
        backend.markers(),
        backend.log_ends(),
        partition_offsets(c, "orders"),
        partition_offsets(c, "audit"),
        committed_view(c, "orders", 0),
        committed_view(c, "orders", 1),
        committed_view(c, "audit", 0),
        backend.group_offset_rows(),
    )


def test_prepare_commit_left_by_a_crash_is_completed_once(backend, launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server(**PREPARE_ONLY)
    with server.client() as c:
        producer, txn_id = _prepare(c, commit=True)
        _assert_prepared_state(c, backend, "PrepareCommit")
    _crash(server)
    # A new server without a worker, starting meanwhile: it completes nothing by itself.
    server2 = launcher.start_server(run_coordinator=False)

    # The next coordinator to run finishes it.
    assert launcher.coordinator_once() == {"timed_out": 0, "completed_commits": 1, "completed_aborts": 0}
    assert backend.markers() == _expected_markers("COMMIT", txn_id)
    assert backend.open_transaction_partitions() == []
    assert backend.staged_offsets() == []
    backend.assert_logs_gapless()
    backend.assert_batch_rows_match()

    server2.wait_ready()
    with server2.client() as c:
        desc = describe_txn(c, TID)
        assert (desc["state"], desc["txn_id"], desc["partitions"], desc["pending_offsets"]) == (
            "CompleteCommit", txn_id, [], []
        )
        # A transaction's records surface at the offset of its COMMIT marker.
        assert committed_view(c, "orders", 0) == [(0, 0, "pre-0"), (1, 1, "pre-1"), (2, 4, "a0"), (3, 4, "a1")]
        assert committed_view(c, "orders", 1) == [(0, 1, "b0")]
        assert committed_view(c, "audit", 0) == [(0, 3, "c0"), (1, 3, "c1"), (2, 3, "c2")]
        txn_records = ok(c.get("/v1/topics/audit/partitions/0/records"))["records"]
        assert [(r["producer_id"], r["producer_epoch"], r["sequence"], r["transactional"]) for r in txn_records] == [
            (producer["producer_id"], producer["producer_epoch"], s, True) for s in (0, 1, 2)
        ]
        # One marker per partition: log end = data records + 1.
        assert partition_offsets(c, "orders") == {0: (0, 5, 5), 1: (0, 2, 2), 2: (0, 0, 0)}
        assert partition_offsets(c, "audit") == {0: (0, 4, 4)}
        assert group_offsets(c, GROUP) == [("in", 0, 10), ("in", 1, 4)]
        before = _snapshot(c, backend)

        # Completing again writes nothing.
        assert launcher.coordinator_once() == {"timed_out": 0, "completed_commits": 0, "completed_aborts": 0}
        assert _snapshot(c, backend) == before

        # The producer survived the crash: same id and epoch, sequences go on.
        begin(c, TID, producer)
        r = ok(send(c, [batch("orders", 0, ["d0"], base_sequence=2)], producer, TID))
        assert r["results"][0]["base_offset"] == 5
        assert ok(c.post(f"/v1/transactions/{TID}/commit", json=ident(producer)))["state"] == "CompleteCommit"
        assert committed_view(c, "orders", 0)[-1] == (5, 6, "d0")
    backend.assert_logs_gapless()
    backend.assert_batch_rows_match()


def test_prepare_abort_left_by_a_crash_is_completed_once(backend, launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server(**PREPARE_ONLY)
    with server.client() as c:
        _, txn_id = _prepare(c, commit=False)
        _assert_prepared_state(c, backend, "PrepareAbort")
    _crash(server)

    # This time a new server with its own coordinator worker picks it up.
    server2 = launcher.server(run_coordinator=True, coordinator_interval_ms=50)
    with server2.client() as c:
        desc = wait_for_state(c, TID, "CompleteAbort")
        assert (desc["txn_id"], desc["partitions"], desc["pending_offsets"]) == (txn_id, [], [])
        assert backend.markers() == _expected_markers("ABORT", txn_id)
        assert backend.open_transaction_partitions() == []
        assert backend.staged_offsets() == []
        assert committed_view(c, "orders", 0) == [(0, 0, "pre-0"), (1, 1, "pre-1")]
        assert committed_view(c, "orders", 1) == []
        assert committed_view(c, "audit", 0) == []
        # The aborted records stay in the log for read_uncommitted.
        assert uncommitted_view(c, "orders", 0) == [(0, "pre-0"), (1, "pre-1"), (2, "a0"), (3, "a1")]
        assert uncommitted_view(c, "orders", 1) == [(0, "b0")]
        assert uncommitted_view(c, "audit", 0) == [(0, "c0"), (1, "c1"), (2, "c2")]
        assert partition_offsets(c, "orders") == {0: (0, 5, 5), 1: (0, 2, 2), 2: (0, 0, 0)}
        assert partition_offsets(c, "audit") == {0: (0, 4, 4)}
        # The staged offsets were dropped: the group keeps what it had.
        assert group_offsets(c, GROUP) == [("in", 0, 3)]
        before = _snapshot(c, backend)

        assert launcher.coordinator_once() == {"timed_out": 0, "completed_commits": 0, "completed_aborts": 0}
        assert _snapshot(c, backend) == before
    backend.assert_logs_gapless()
    backend.assert_batch_rows_match()


def _one_marker_as_an_earlier_worker(conn: Any, txn_id: int, producer: dict[str, int], topic_id: int,
                                     partition: int) -> list[tuple[int, int, int]]:
    """What one database transaction of such a worker did: claim the partition (delete its
    transaction_partitions row) and, if it was still there, append the COMMIT marker at the
    log end, taken as every append takes it, with the marker's batch row, and stamp the
    transaction's open batches in the partition committed at the marker (as every completion
    since migration 0019 does: without the stamp read_committed would never expose them)."""
    claimed = conn.execute(delete(transaction_partitions).where(
        transaction_partitions.c.transactional_id == TID, transaction_partitions.c.txn_id == txn_id,
        transaction_partitions.c.topic_id == topic_id, transaction_partitions.c.partition == partition)).rowcount
    if not claimed:
        return []
    offset = take_offsets(conn, topic_id, partition, 1, records=0)
    owner = MarkerOwner(TID, txn_id, producer["producer_id"], producer["producer_epoch"])
    conn.execute(insert(records).values(marker_row(topic_id, partition, offset, owner, ControlType.COMMIT, 1)))
    conn.execute(insert(record_batches).values(marker_batch_row(topic_id, partition, offset, owner, ControlType.COMMIT)))
    conn.execute(update(record_batches).where(
        record_batches.c.topic_id == topic_id, record_batches.c.partition == partition,
        record_batches.c.txn_id == txn_id, record_batches.c.state == RecordState.OPEN.value,
    ).values(state=RecordState.COMMITTED.value, commit_position=offset))
    return [(topic_id, partition, offset)]


def test_half_written_markers_are_finished_once(backend, launcher) -> None:  # type: ignore[no-untyped-def]
    """A transaction decided but with one partition's marker of three written (as a worker of
    an earlier version, which wrote one marker per database transaction, could leave it): the
    next worker writes the two missing markers and leaves the first alone."""
    server = launcher.server(**PREPARE_ONLY)
    with server.client() as c:
        producer, txn_id = _prepare(c, commit=True)

        db = Database(build_engine(backend.url, pool_size=1))
        try:
            orders_id = backend.topic_id("orders")
            with db.write() as conn:
                assert _one_marker_as_an_earlier_worker(conn, txn_id, producer, orders_id, 1) == [(orders_id, 1, 1)]
            with db.write() as conn:  # the claim is gone: a second attempt writes nothing
                assert _one_marker_as_an_earlier_worker(conn, txn_id, producer, orders_id, 1) == []
        finally:
            db.dispose()

        # The partition keeps taking records after its marker.
        assert ok(send(c, [batch("orders", 1, ["post"])]))["results"][0]["base_offset"] == 2
        assert describe_txn(c, TID)["state"] == "PrepareCommit"
        assert committed_view(c, "orders", 1) == [(0, 1, "b0"), (2, 2, "post")]
        refused(c.get(f"/v1/groups/{GROUP}/offsets"), 409, "UNSTABLE_OFFSET_COMMIT")
    _crash(server)
    server2 = launcher.start_server(run_coordinator=False)  # completes nothing by itself

    orders_id, audit_id = backend.topic_id("orders"), backend.topic_id("audit")
    assert backend.markers() == [("orders", 1, 1, "COMMIT", txn_id)]
    assert backend.open_transaction_partitions() == [
        (TID, orders_id, 0, txn_id), (TID, audit_id, 0, txn_id)
    ]

    assert launcher.coordinator_once() == {"timed_out": 0, "completed_commits": 1, "completed_aborts": 0}
    assert backend.markers() == [("audit", 0, 3, "COMMIT", txn_id), ("orders", 0, 4, "COMMIT", txn_id),
                                 ("orders", 1, 1, "COMMIT", txn_id)]
    assert backend.open_transaction_partitions() == []
    backend.assert_logs_gapless()

    server2.wait_ready()
    with server2.client() as c:
        assert describe_txn(c, TID)["state"] == "CompleteCommit"
        assert committed_view(c, "orders", 0) == [(0, 0, "pre-0"), (1, 1, "pre-1"), (2, 4, "a0"), (3, 4, "a1")]
        assert committed_view(c, "orders", 1) == [(0, 1, "b0"), (2, 2, "post")]
        assert committed_view(c, "audit", 0) == [(0, 3, "c0"), (1, 3, "c1"), (2, 3, "c2")]
        assert partition_offsets(c, "orders") == {0: (0, 5, 5), 1: (0, 3, 3), 2: (0, 0, 0)}
        assert partition_offsets(c, "audit") == {0: (0, 4, 4)}
        assert group_offsets(c, GROUP) == [("in", 0, 10), ("in", 1, 4)]
        before = _snapshot(c, backend)
        assert launcher.coordinator_once() == {"timed_out": 0, "completed_commits": 0, "completed_aborts": 0}
        assert _snapshot(c, backend) == before


class _LoadWriter(threading.Thread):
    """Plain Sends and two-partition transactions until the server dies under it. Keeps what
    was acknowledged; a request cut off by the crash is in doubt and is not kept."""

    def __init__(self, idx: int, url: str) -> None:
        super().__init__(name=f"load-{idx}", daemon=True)
        self.idx, self.url = idx, url
        self.rng = random.Random(104729 * (idx + 1))
        self.plain: list[tuple[int, int, str]] = []  # (partition, offset, value)
        self.committed: dict[int, list[tuple[int, int, str]]] = {}  # txn_id -> records
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=30.0) as c:
                self._run(c)
        except httpx.TransportError:
            return  # the crash
        except BaseException:  # noqa: BLE001
            self.errors.append(traceback.format_exc())

    def _run(self, c: httpx.Client) -> None:
        tid = f"load-{self.idx}"
        # A short timeout: a transaction the crash leaves open is aborted soon after restart.
        producer = init_producer(c, tid, transaction_timeout_ms=1500)
        seq = [0, 0]
        n = 0
        while True:
            if self.rng.random() < 0.4:
                p, value = self.rng.randrange(2), f"{tid}/plain/{n}"
                r = ok(send(c, [batch("load", p, [value])]))
                self.plain.append((p, r["results"][0]["base_offset"], value))
                n += 1
                continue
            txn_id = begin(c, tid, producer)["txn_id"]
            recs = []
            for p in (0, 1):
                values = [f"{tid}/txn{txn_id}/{p}/{k}" for k in range(self.rng.randint(1, 3))]
                r = ok(send(c, [batch("load", p, values, base_sequence=seq[p])], producer, tid))
                seq[p] += len(values)
                recs.extend((p, r["results"][0]["base_offset"] + k, v) for k, v in enumerate(values))
            end = ok(c.post(f"/v1/transactions/{tid}/commit", json={**ident(producer), "txn_id": txn_id}))
            assert end["state"] == "CompleteCommit", end
            self.committed[txn_id] = recs


def test_kill_under_load_loses_nothing_acknowledged(backend, launcher) -> None:  # type: ignore[no-untyped-def]
    """Guarantee 2 with a real crash at a random moment: every acknowledged record and every
    acknowledged commit survives, and the transactions the crash cut off end whole, one way or
    the other, with one marker per partition."""
    server = launcher.server(run_coordinator=False)  # commits complete inline
    with server.client() as c:
        ok(c.post("/v1/topics", json={"name": "load", "partitions": 2}), 201)
    writers = [_LoadWriter(i, server.url) for i in range(4)]
    for w in writers:
        w.start()
    # The crash comes at a random moment once something of each kind was acknowledged (on a
    # loaded machine a fixed 1-2 s had seen no commit yet), so that there is something to lose.
    deadline = time.monotonic() + 60
    while not (any(w.plain for w in writers) and any(w.committed for w in writers)):
        assert time.monotonic() < deadline, "no plain Send and commit acknowledged in 60 s"
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 1.0))
    _crash(server)
    for w in writers:
        w.join(30)
        assert not w.is_alive()
    errors = [e for w in writers for e in w.errors]
    assert not errors, "\n".join(errors)
    assert any(w.plain for w in writers) and any(w.committed for w in writers)
    left = backend.query(select(transactions.c.state))
    print(f"[{backend.name}] states the crash left: {sorted(s for (s,) in left)}; "
          f"{len(backend.open_transaction_partitions())} partitions without their marker")

    server2 = launcher.server(run_coordinator=True, coordinator_interval_ms=50)
    with server2.client() as c:
        # Whatever the crash left in Prepare* is completed; what it left open times out.
        deadline = time.monotonic() + 30
        while True:
            states = {t["transactional_id"]: t["state"] for t in ok(c.get("/v1/transactions"))["transactions"]}
            if set(states.values()) <= {"Empty", "CompleteCommit", "CompleteAbort"}:
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.05)
        views = {p: committed_view(c, "load", p) for p in (0, 1)}
        assert partition_offsets(c, "load") == {p: (0, end, end) for p, end in
                                                ((p, backend.log_ends()[("load", p)]) for p in (0, 1))}

    backend.assert_logs_gapless()
    backend.assert_batch_rows_match()
    topic_id = backend.topic_id("load")
    rows = backend.query(
        select(records.c.partition, records.c.offset, record_batches.c.txn_id, records.c.control_type,
               records.c.value)
        .select_from(records_with_batches())
        .where(records.c.topic_id == topic_id)
    )
    data = {(p, o): (txn, json.loads(v)) for p, o, txn, ctl, v in rows if ctl is None}
    markers: dict[int, dict[int, list[tuple[int, str]]]] = {}
    for p, o, txn, ctl, _ in rows:
        if ctl is not None:
            markers.setdefault(txn, {}).setdefault(p, []).append((o, ctl))
    # Every transaction that wrote data ends with exactly one marker in each of its partitions,
    # and the same outcome in all of them.
    for txn in {txn for txn, _ in data.values() if txn is not None}:
        parts = {p for (p, _), (t, _) in data.items() if t == txn}
        assert set(markers.get(txn, {})) == parts, (txn, markers.get(txn))
        assert all(len(ms) == 1 for ms in markers[txn].values()), (txn, markers[txn])
        assert len({ms[0][1] for ms in markers[txn].values()}) == 1, (txn, markers[txn])

    # Nothing acknowledged was lost.
    for w in writers:
        for p, o, v in w.plain:
            assert data[(p, o)] == (None, v)
        for txn, recs in w.committed.items():
            for p, o, v in recs:
                assert data[(p, o)] == (txn, v)
            assert {p: ms[0][1] for p, ms in markers[txn].items()} == {0: "COMMIT", 1: "COMMIT"}
    # read_committed: exactly the plain records and those of transactions that committed.
    for p in (0, 1):
        expected = sorted(
            (o, o if txn is None else markers[txn][p][0][0], v)
            for (q, o), (txn, v) in data.items()
            if q == p and (txn is None or markers[txn][p][0][1] == "COMMIT")
        )
        assert sorted(views[p]) == expected
