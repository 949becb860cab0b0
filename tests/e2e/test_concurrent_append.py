"""Guarantees 3, 4, 5 and 6 under real concurrency: eight writers append to one partition at
once (plain, idempotent and transactional producers, transactions committed or aborted)
while two readers tail it, one read_uncommitted and one read_committed."""

from __future__ import annotations

import json
import random
import threading
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field

import httpx
import pytest
from sqlalchemy import select

from app.storage.tables import record_batches, records
from tests.e2e.api import ok, partition_offsets
from tests.helpers import ident, init_producer, record_sequence, records_with_batches

pytestmark = pytest.mark.e2e

TOPIC = "hot"
WRITERS = 8
WRITE_FOR_S = 3.0
TAIL_DEADLINE_S = 60.0


@dataclass
class Txn:
    tid: str
    txn_id: int
    committed: bool
    records: list[tuple[int, dict]] = field(default_factory=list)  # (offset, value)


class Writer(threading.Thread):
    """Appends to TOPIC/0 until told to stop, choosing at random each time between a plain
    Send, an idempotent Send (sometimes retried), and a transaction of 1-3 Sends that is
    committed or aborted. Remembers every acknowledged record and its offset."""

    def __init__(self, idx: int, url: str, stop: threading.Event) -> None:
        super().__init__(name=f"writer-{idx}", daemon=True)
        self.idx = idx
        self.url = url
        self.stop = stop
        self.rng = random.Random(7919 * (idx + 1))
        self.plain: list[tuple[int, dict]] = []
        self.idempotent: list[tuple[int, dict]] = []
        self.txns: list[Txn] = []
        self.retries_checked = 0
        self.idempotent_producer: int | None = None
        self.transactional_producer: int | None = None
        self.errors: list[str] = []
        self._n = 0

    def _values(self, kind: str, count: int, txn: str | None = None) -> list[dict]:
        out = [{"w": self.idx, "n": self._n + i, "kind": kind, "txn": txn} for i in range(count)]
        self._n += count
        return out

    def _send(self, c: httpx.Client, body: dict, count: int, *, duplicate: bool = False) -> int:
        (res,) = ok(c.post("/v1/records", json=body))["results"]
        assert (res["topic"], res["partition"], res["record_count"], res["duplicate"]) == (TOPIC, 0, count, duplicate), res
        assert res["last_offset"] == res["base_offset"] + count - 1, res
        return res["base_offset"]

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=60.0) as c:
                self._run(c)
        except BaseException:  # noqa: BLE001 - reported by the test
            self.errors.append(traceback.format_exc())

    def _run(self, c: httpx.Client) -> None:
        idem = init_producer(c)
        self.idempotent_producer = idem["producer_id"]
        idem_seq = 0
        tid = f"writer-{self.idx}"
        txp = init_producer(c, tid)
        self.transactional_producer = txp["producer_id"]
        tx_seq = 0
        while not self.stop.is_set():
            kind = self.rng.choice(("plain", "idempotent", "transactional"))
            if kind == "plain":
                vals = self._values("plain", self.rng.randint(1, 3))
                base = self._send(c, {"batches": [{"topic": TOPIC, "partition": 0,
                                                   "records": [{"value": v} for v in vals]}]}, len(vals))
                self.plain.extend((base + i, v) for i, v in enumerate(vals))
            elif kind == "idempotent":
                vals = self._values("idempotent", self.rng.randint(1, 3))
                body = {**ident(idem), "batches": [{"topic": TOPIC, "partition": 0, "base_sequence": idem_seq,
                                                   "records": [{"value": v} for v in vals]}]}
                base = self._send(c, body, len(vals))
                if self.rng.random() < 0.25:
                    # A retry of the last batch: answered with the first offsets, nothing written.
                    assert self._send(c, body, len(vals), duplicate=True) == base
                    self.retries_checked += 1
                idem_seq += len(vals)
                self.idempotent.extend((base + i, v) for i, v in enumerate(vals))
            else:
                begun = ok(c.post(f"/v1/transactions/{tid}/begin", json=ident(txp)))
                assert begun["state"] == "Ongoing", begun
                txn = Txn(tid, begun["txn_id"], committed=self.rng.random() < 0.6)
                for _ in range(self.rng.randint(1, 3)):
                    vals = self._values("transactional", self.rng.randint(1, 3), f"{tid}#{txn.txn_id}")
                    body = {**ident(txp), "transactional_id": tid,
                            "batches": [{"topic": TOPIC, "partition": 0, "base_sequence": tx_seq,
                                         "records": [{"value": v} for v in vals]}]}
                    base = self._send(c, body, len(vals))
                    tx_seq += len(vals)
                    txn.records.extend((base + i, v) for i, v in enumerate(vals))
                end = ok(c.post(f"/v1/transactions/{tid}/{'commit' if txn.committed else 'abort'}",
                                json={**ident(txp), "txn_id": txn.txn_id}))
                # complete_inline (the default): the markers are written when Commit/Abort answers.
                assert end["state"] == ("CompleteCommit" if txn.committed else "CompleteAbort"), end
                self.txns.append(txn)


@dataclass
class Page:
    position: int
    next_offset: int
    high_watermark: int
    last_stable_offset: int
    records: list[dict]


class Tail(threading.Thread):
    """Follows TOPIC/0 from position 0 with next_offset, in small pages, until the writers are
    done and a fetch started after that returns nothing at the log end."""

    def __init__(self, url: str, isolation: str, writers_done: threading.Event, seed: int) -> None:
        super().__init__(name=f"tail-{isolation}", daemon=True)
        self.url = url
        self.isolation = isolation
        self.writers_done = writers_done
        self.rng = random.Random(seed)
        self.pages: list[Page] = []
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            self._run()
        except BaseException:  # noqa: BLE001
            self.errors.append(traceback.format_exc())

    def _run(self) -> None:
        pos = 0
        deadline = time.monotonic() + TAIL_DEADLINE_S
        with httpx.Client(base_url=self.url, timeout=60.0) as c:
            while time.monotonic() < deadline:
                done = self.writers_done.is_set()  # read before the fetch: that fetch sees every write
                page = ok(c.get(f"/v1/topics/{TOPIC}/partitions/0/records", params={
                    "offset": pos, "isolation": self.isolation, "max_records": self.rng.randint(1, 12)}))
                self.pages.append(Page(pos, page["next_offset"], page["high_watermark"],
                                       page["last_stable_offset"], page["records"]))
                assert page["next_offset"] >= pos, (pos, page)
                pos = page["next_offset"]
                if not page["records"]:
                    if done and pos == page["high_watermark"]:
                        return
                    time.sleep(0.002)
        raise AssertionError(f"{self.isolation} tail did not reach the end in {TAIL_DEADLINE_S}s")


def _final_log(backend) -> list[tuple]:  # type: ignore[no-untyped-def]
    topic_id = backend.topic_id(TOPIC)
    return backend.query(
        select(records.c.offset, record_batches.c.txn_id, records.c.control_type, records.c.value,
               record_batches.c.producer_id, record_sequence())
        .select_from(records_with_batches())
        .where(records.c.topic_id == topic_id, records.c.partition == 0)
        .order_by(records.c.offset)
    )


def test_concurrent_writers_and_tailing_readers(backend, launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server(run_coordinator=True)
    with server.client() as c:
        ok(c.post("/v1/topics", json={"name": TOPIC, "partitions": 1}), 201)

    stop, writers_done = threading.Event(), threading.Event()
    writers = [Writer(i, server.url, stop) for i in range(WRITERS)]
    tails = {iso: Tail(server.url, iso, writers_done, seed) for seed, iso in
             enumerate(("read_uncommitted", "read_committed"))}
    for t in (*tails.values(), *writers):
        t.start()
    time.sleep(WRITE_FOR_S)
    stop.set()
    for w in writers:
        w.join(60)
        assert not w.is_alive(), f"{w.name} is stuck"
    writers_done.set()
    for t in tails.values():
        t.join(TAIL_DEADLINE_S + 10)
        assert not t.is_alive(), f"{t.name} is stuck"
    errors = [e for t in (*writers, *tails.values()) for e in t.errors]
    assert not errors, "\n".join(errors)

    plain = [r for w in writers for r in w.plain]
    idempotent = [r for w in writers for r in w.idempotent]
    txns = [t for w in writers for t in w.txns]
    committed = [t for t in txns if t.committed]
    aborted = [t for t in txns if not t.committed]
    print(f"[{backend.name}] {len(plain)} plain, {len(idempotent)} idempotent records, "
          f"{len(committed)} committed and {len(aborted)} aborted transactions, "
          f"{sum(w.retries_checked for w in writers)} retries; "
          f"{len(tails['read_uncommitted'].pages)} + {len(tails['read_committed'].pages)} fetches")
    # The mix really happened.
    assert plain and idempotent and committed and aborted
    assert sum(w.retries_checked for w in writers) > 0

    # --- the final log: offsets 0 .. log end - 1, no gaps, one marker per transaction ---------
    log = _final_log(backend)
    end = backend.log_ends()[(TOPIC, 0)]
    assert [row[0] for row in log] == list(range(end))
    backend.assert_logs_gapless()
    by_offset = {row[0]: row for row in log}
    data_offsets = [row[0] for row in log if row[2] is None]
    markers = {row[1]: (row[0], row[2]) for row in log if row[2] is not None}
    assert len(markers) == len(txns) == sum(1 for row in log if row[2] is not None)
    with server.client() as c:
        assert partition_offsets(c, TOPIC) == {0: (0, end, end)}  # nothing left open

    # Every acknowledged record is in the log at the offset it was given, and nothing else is.
    for offset, value in plain + idempotent:
        row = by_offset[offset]
        assert (row[1], row[2], json.loads(row[3])) == (None, None, value), row
    for t in txns:
        for offset, value in t.records:
            row = by_offset[offset]
            assert (row[1], row[2], json.loads(row[3])) == (t.txn_id, None, value), row
        marker_offset, control = markers[t.txn_id]
        assert control == ("COMMIT" if t.committed else "ABORT")
        assert marker_offset > max(o for o, _ in t.records)
    acked = {o for o, _ in plain + idempotent} | {o for t in txns for o, _ in t.records}
    assert acked == set(data_offsets)

    # Sequences: per producer, 0, 1, 2 … in offset order; retries wrote nothing.
    by_producer: dict[int, list[int]] = defaultdict(list)
    for row in log:
        if row[2] is None and row[4] is not None:
            by_producer[row[4]].append(row[5])
    for w in writers:
        for pid in (w.idempotent_producer, w.transactional_producer):
            assert by_producer.get(pid, []) == list(range(len(by_producer.get(pid, [])))), (w.name, pid)

    for iso, tail in tails.items():
        for p in tail.pages:
            assert p.position <= p.next_offset <= p.high_watermark, (iso, p)

    # --- read_uncommitted tail: every data offset once, in order, none skipped --------------
    pages = tails["read_uncommitted"].pages
    seen = [r["offset"] for p in pages for r in p.records]
    assert all(a < b for a, b in zip(seen, seen[1:])), "read_uncommitted offsets went backwards or repeated"
    assert seen == data_offsets, f"missed {sorted(set(data_offsets) - set(seen))[:20]}"
    for p in pages:
        assert all(r["offset"] >= p.position for r in p.records)
        if p.records:
            assert p.next_offset > p.records[-1]["offset"]
    for r in (r for p in pages for r in p.records):
        assert r["value"] == json.loads(by_offset[r["offset"]][3])

    # --- read_committed tail: the committed data, in commit order, each once ----------------
    pages = tails["read_committed"].pages
    stream = [(r["offset"], r["commit_position"]) for p in pages for r in p.records]
    positions = [cp for _, cp in stream]
    assert positions == sorted(positions), "commit positions went backwards"
    offsets_seen = [o for o, _ in stream]
    assert len(offsets_seen) == len(set(offsets_seen)), "a record was returned twice"
    aborted_offsets = {o for t in aborted for o, _ in t.records}
    assert not aborted_offsets & set(offsets_seen), "an aborted record was returned"
    for t in committed:
        offs = [o for o, _ in t.records]
        i = offsets_seen.index(offs[0])
        assert offsets_seen[i:i + len(offs)] == offs, f"transaction {t.txn_id} not contiguous"
        assert {cp for o, cp in stream[i:i + len(offs)]} == {markers[t.txn_id][0]}
    # Exactly: a plain record at its own offset, a transaction's records at its COMMIT marker.
    commit_point = {
        row[0]: row[0] if row[1] is None else markers[row[1]][0]
        for row in log
        if row[2] is None and (row[1] is None or markers[row[1]][1] == "COMMIT")
    }
    assert stream == sorted(((o, cp) for o, cp in commit_point.items()), key=lambda x: (x[1], x[0]))
    for p in pages:
        assert all(r["commit_position"] >= p.position for r in p.records)
        if p.records:
            assert p.next_offset > p.records[-1]["commit_position"]
        # A fetch never splits a transaction.
        for txn_id in {by_offset[r["offset"]][1] for r in p.records} - {None}:
            in_page = [r["offset"] for r in p.records if by_offset[r["offset"]][1] == txn_id]
            assert in_page == [o for o, _ in next(t for t in committed if t.txn_id == txn_id).records]
    for r in (r for p in pages for r in p.records):
        assert r["value"] == json.loads(by_offset[r["offset"]][3])
        assert r["transactional"] == (by_offset[r["offset"]][1] is not None)

    # Last, as it is the weakest of these checks: every answer is one view of the partition,
    # so its last stable offset is never past its high watermark (Kafka: LSO <= HW).
    inconsistent = [(iso, p.position, p.high_watermark, p.last_stable_offset)
                    for iso, tail in tails.items() for p in tail.pages
                    if p.last_stable_offset > p.high_watermark]
    assert not inconsistent, (
        f"{len(inconsistent)} fetches answered last_stable_offset > high_watermark "
        f"(isolation, position, high_watermark, last_stable_offset): {inconsistent[:5]}"
    )
