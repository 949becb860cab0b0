"""A hypothesis state machine of the transaction coordinator, checked against a model of the
contract (the load and fault-injection work), through the service layer in-process, on SQLite and PostgreSQL.

Several producer instances share three transactional ids and run random sequences of
InitProducerId (a new instance: fences the previous one; it speaks transaction protocol version
1 or 2), Begin, Send, a retry of the last Send, AddOffsets, Commit, Abort, calls with a future epoch, plain (non-transactional) Sends,
clock advances with a coordinator pass (timeouts, completion of decided transactions), and
service restarts (the Services are dropped and built again on the same database, with
completion inline or left to the coordinator worker, OUTBOX_COMPLETE_INLINE).

The model is the contract, not the implementation:

- per transactional id: the live producer (id, epoch), the transaction state, the open
  transaction's records per partition and its staged group offsets;
- each call's outcome: success, or the refusal the contract names (PRODUCER_FENCED for an
  older epoch, INVALID_PRODUCER_EPOCH for a newer one, INVALID_TXN_STATE,
  CONCURRENT_TRANSACTIONS while a decided transaction is completing);
- version 2: a Send or AddOffsets of the live producer to an idle transactional id begins its
  transaction; each Commit and Abort bumps the epoch; a call with the epoch of the transaction
  the last Commit or Abort ended is INVALID_PRODUCER_EPOCH (an instance's old handle is such a
  delayed caller), except a retry of that Commit or Abort, answered again until the next
  transaction begins;
- per partition, the read_committed view as a sequence of commit steps: a committed
  transaction's records appear together, in send order, when it completes; transactions
  completed by one coordinator pass may appear in either order among themselves;
- the committed group offsets (where transactions completed by one pass staged different
  offsets for one partition, any of them may be the last), and which groups have offsets
  pending (UNSTABLE_OFFSET_COMMIT).

After every step: the read_committed view equals the model's; no record of an open or aborted
transaction is in it; read_uncommitted holds every record sent exactly once; each partition's
offsets (records and control markers) are 0 … next_offset-1 without a gap; the transactions
table holds the model's producer, epoch and state; group offsets equal the model's.

Each example gets a fresh database. OUTBOX_MODEL_EXAMPLES (default 30) and OUTBOX_MODEL_STEPS
(default 30) make the run longer; it is derandomized, so a failure repeats.
"""

from __future__ import annotations

import itertools
from collections import Counter
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import Engine, event, text

from app.composition import Services
from app.domain.errors import OutboxError
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder
from app.domain.records import RecordToAppend
from app.domain.types import IsolationLevel
from app.services.log_service import SendBatch
from app.settings import Settings
from app.storage.engine import Database, build_engine
from app.worker.chore import ChoreConfig
from app.worker.coordinator import CoordinatorWorker
from tests.conftest import FakeClock, _reset_postgres

MODEL_EXAMPLES = int(os.environ.get("OUTBOX_MODEL_EXAMPLES", "30"))
MODEL_STEPS = int(os.environ.get("OUTBOX_MODEL_STEPS", "30"))

TIDS = ["tx-a", "tx-b", "tx-c"]
DATA = "data"  # the topic transactions write to
SRC = "src"  # the topic whose group offsets they carry
PARTITIONS = [0, 1]
GROUPS = ["g1", "g2"]
TIMEOUTS_MS = [500, 5_000]

ONGOING, PREPARE_COMMIT, PREPARE_ABORT = "Ongoing", "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT, EMPTY = "CompleteCommit", "CompleteAbort", "Empty"
PREPARING = {PREPARE_COMMIT, PREPARE_ABORT}

OK = None  # an expected outcome: success


# --- the model --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Handle:
    """One producer instance: what InitProducerId answered it."""

    tid: str
    producer_id: int
    producer_epoch: int


@dataclass
class Txn:
    name: str  # unique, for record values
    started_ms: int
    records: dict[int, list[str]] = field(default_factory=dict)  # partition -> values, in send order
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # (group, src partition) -> offset
    last_send: list[tuple[int, int, list[str]]] | None = None  # (partition, base_sequence, values)


@dataclass
class Tid:
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    txn: Txn | None = None  # the Ongoing or decided (Prepare*) transaction
    sequences: dict[int, int] = field(default_factory=dict)  # partition -> next sequence, this epoch
    version: int = 1  # the transaction protocol version of the live producer
    last_epoch: int | None = None  # version 2: the epoch the last Commit or Abort moved from


# A commit step: what became visible at once in a partition, as a list of record runs (one per
# transaction, or one per plain batch) whose order among themselves the contract leaves open.
Step = list[list[str]]


@dataclass
class Model:
    tids: dict[str, Tid] = field(default_factory=dict)
    committed: dict[int, list[Step]] = field(default_factory=lambda: {p: [] for p in PARTITIONS})
    # (group, src partition) -> the committed offset; a set when transactions completed by one
    # coordinator pass staged different offsets for it (whichever completed last wins).
    group_offsets: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    sent: set[str] = field(default_factory=set)  # every record value ever written
    invisible: set[str] = field(default_factory=set)  # values of aborted transactions
    inline: bool = True

    def complete(self, tids: list[str]) -> None:
        """The decided transactions of `tids` complete, together (one commit step)."""
        runs: dict[int, Step] = {p: [] for p in PARTITIONS}
        offsets: dict[tuple[str, int], set[int]] = {}
        for tid in tids:
            m = self.tids[tid]
            assert m.state in PREPARING and m.txn is not None
            if m.state == PREPARE_COMMIT:
                for p, values in m.txn.records.items():
                    runs[p].append(list(values))
                for key, offset in m.txn.offsets.items():
                    offsets.setdefault(key, set()).add(offset)
                m.state = COMPLETE_COMMIT
            else:
                self.invisible.update(v for values in m.txn.records.values() for v in values)
                m.state = COMPLETE_ABORT
            m.txn = None
        self.group_offsets.update(offsets)
        for p, step in runs.items():
            if step:
                self.committed[p].append(step)

    def decide_abort(self, tid: str) -> None:
        m = self.tids[tid]
        assert m.state == ONGOING
        m.state = PREPARE_ABORT

    def open_values(self) -> set[str]:
        return {v for m in self.tids.values() if m.txn is not None
                for values in m.txn.records.values() for v in values}

    def pending_groups(self) -> set[str]:
        return {g for m in self.tids.values() if m.txn is not None for (g, _) in m.txn.offsets}


def _expect_transactional(model: Model, h: Handle) -> str | None:
    """The refusal the contract gives a transactional call by `h` before looking at the state."""
    m = model.tids[h.tid]
    if m.version == 2 and h.producer_id == m.producer_id and h.producer_epoch == m.last_epoch:
        return "INVALID_PRODUCER_EPOCH"  # a caller from the transaction that ended
    if h.producer_id != m.producer_id:
        return "INVALID_PRODUCER_ID_MAPPING"
    if h.producer_epoch < m.producer_epoch:
        return "PRODUCER_FENCED"
    if h.producer_epoch > m.producer_epoch:
        return "INVALID_PRODUCER_EPOCH"
    return None


def _in_transaction(model: Model, h: Handle) -> str | None:
    """Send and AddOffsets: the caller must be live and its transaction Ongoing."""
    refused = _expect_transactional(model, h)
    if refused:
        return refused
    m = model.tids[h.tid]
    if m.state == ONGOING or (m.version == 2 and m.state not in PREPARING):
        return OK  # version 2: it begins the transaction
    return "CONCURRENT_TRANSACTIONS" if m.state in PREPARING else "INVALID_TXN_STATE"


# --- reading the system ----------------------------------------------------------------------------


def _call(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return fn(), OK
    except OutboxError as e:
        return None, e.error_code


def _values(services: Services, partition: int, isolation: IsolationLevel) -> list[str]:
    out: list[str] = []
    position = 0
    while True:
        # fetch answers (topic, result[, ...]): index 1 is the FetchResult.
        result = services.log.fetch(DATA, partition, offset=position, max_records=1000,
                                    isolation=isolation)[1]
        out += [json.loads(r.value) for r in result.records]
        if not result.records or result.next_offset >= result.high_watermark:
            return out
        position = result.next_offset


def _matches(actual: list[str], steps: list[Step]) -> bool:
    """`actual` is the steps in order, each step's runs whole and in some order."""
    pos = 0
    for step in steps:
        remaining = list(step)
        while remaining:
            run = next((r for r in remaining if actual[pos:pos + len(r)] == r), None)
            if run is None:
                return False
            remaining.remove(run)
            pos += len(run)
    return pos == len(actual)


def _fast_engine(url: str) -> Engine:
    """The service's engine, without waiting for each commit to reach the disk: this test is
    about the protocol, not about durability across a power loss (and fsyncs dominate its time)."""
    if url.startswith("sqlite"):
        return build_engine(url, pool_size=2, sqlite_synchronous="NORMAL")
    engine = build_engine(url, pool_size=2)

    @event.listens_for(engine, "connect")
    def _no_commit_wait(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit = off")
        dbapi_connection.commit()

    return engine


# --- the state machine -----------------------------------------------------------------------------


class CoordinatorMachine(RuleBasedStateMachine):
    """Subclassed per test with `fresh_url` (a new database per example) set."""

    fresh_url: Callable[[], str]
    outcomes: Counter[str]  # how often each call ended how (printed with -s)
    break_commits = False  # the harness self-test: Commit is silently turned into Abort

    handles = Bundle("handles")

    def __init__(self) -> None:
        super().__init__()
        self.url = type(self).fresh_url()
        self.clock = FakeClock()
        self.model = Model()
        self.names = itertools.count()
        self.db: Database | None = None
        self._start(inline=True)
        self.services.topics.create(DATA, len(PARTITIONS))
        self.services.topics.create(SRC, len(PARTITIONS))

    def _start(self, inline: bool) -> None:
        self.settings = Settings(database_url=self.url, run_coordinator=False, auto_migrate=False,
                                 complete_inline=inline)
        self.db = Database(_fast_engine(self.url))
        self.services = Services.build(self.settings, self.db, self.clock)
        if self.break_commits:
            coordinator = self.services.coordinator
            end = coordinator.end_transaction

            def broken(*args: Any, commit: bool, **kwargs: Any) -> Any:
                return end(*args, commit=False, **kwargs)

            coordinator.end_transaction = broken  # type: ignore[method-assign]
        self.worker = CoordinatorWorker(self.services.coordinator, self.clock, ChoreConfig(interval_ms=1_000))
        self.model.inline = inline

    def teardown(self) -> None:
        if self.db is not None:
            self.db.dispose()

    # --- helpers -----------------------------------------------------------------------------

    def _row(self, tid: str) -> tuple[int, int, str] | None:
        with self.db.engine.connect() as conn:  # type: ignore[union-attr]
            row = conn.execute(
                text("SELECT producer_id, producer_epoch, state FROM transactions WHERE transactional_id = :t"),
                {"t": tid},
            ).first()
        return None if row is None else (row[0], row[1], row[2])

    def _bumped(self, tid: str) -> None:
        """The epoch of `tid` was bumped (fence, timeout): take the new one, which must be newer."""
        m = self.model.tids[tid]
        row = self._row(tid)
        assert row is not None
        assert row[0] == m.producer_id, f"{tid}: producer id changed {m.producer_id} -> {row[0]}"
        assert row[1] > m.producer_epoch, f"{tid}: epoch not bumped ({m.producer_epoch} -> {row[1]})"
        m.producer_epoch = row[1]
        m.sequences = {}
        m.last_epoch = None

    def _check(self, what: str, got: str | None, expected: str | None) -> None:
        type(self).outcomes[f"{what.split()[0]}: {got or 'ok'}"] += 1
        assert got == expected, f"{what}: expected {expected or 'success'}, got {got or 'success'}"

    # --- rules ---------------------------------------------------------------------------------

    @initialize(target=handles, timeout_ms=st.sampled_from(TIMEOUTS_MS), inline=st.booleans(),
                versions=st.lists(st.sampled_from([1, 2]), min_size=len(TIDS), max_size=len(TIDS)))
    def start_with_a_producer_per_transactional_id(self, timeout_ms: int, inline: bool, versions: list[int]) -> Any:
        """The service starts (completing inline or not) and every transactional id gets a
        producer, so that transactions start at once."""
        self.restart_the_service(inline)
        return multiple(*(self.init_producer(tid, timeout_ms, v) for tid, v in zip(TIDS, versions, strict=True)))

    @rule(target=handles, tid=st.sampled_from(TIDS), timeout_ms=st.sampled_from(TIMEOUTS_MS),
          version=st.sampled_from([1, 2]))
    def init_producer(self, tid: str, timeout_ms: int, version: int = 1) -> Any:
        """A new producer instance (InitProducerId): fences the previous one of the same id."""
        model = self.model
        m = model.tids.get(tid)
        result, code = _call(lambda: self.services.coordinator.init_producer_id(
            transactional_id=tid, transaction_timeout_ms=timeout_ms, transaction_version=version))
        if m is None:
            self._check(f"init {tid}", code, OK)
            assert result.producer_id not in {t.producer_id for t in model.tids.values()}
            model.tids[tid] = Tid(result.producer_id, result.producer_epoch, EMPTY, timeout_ms, version=version)
            return Handle(tid, result.producer_id, result.producer_epoch)
        if m.state == ONGOING:
            model.decide_abort(tid)  # the previous instance's transaction is aborted, fenced
            if model.inline:
                model.complete([tid])
            else:
                self._check(f"init {tid} over an open transaction", code, "CONCURRENT_TRANSACTIONS")
                self._bumped(tid)
                return multiple()
        elif m.state in PREPARING:
            if not model.inline:
                self._check(f"init {tid} while completing", code, "CONCURRENT_TRANSACTIONS")
                return multiple()
            model.complete([tid])
        self._check(f"init {tid} ({m.state})", code, OK)
        assert result.producer_id == m.producer_id, f"{tid}: producer id changed"
        assert result.producer_epoch > m.producer_epoch, f"{tid}: epoch not bumped"
        m.producer_epoch, m.state, m.timeout_ms, m.sequences = result.producer_epoch, EMPTY, timeout_ms, {}
        m.version, m.last_epoch = version, None
        return Handle(tid, result.producer_id, result.producer_epoch)

    def _live(self, data: st.DataObject) -> Handle:
        """The live producer of a transactional id (the one the model says holds it)."""
        tid = data.draw(st.sampled_from(sorted(self.model.tids)), label="transactional_id")
        m = self.model.tids[tid]
        return Handle(tid, m.producer_id, m.producer_epoch)

    def _transactional_call(self, h: Handle, call: str, data: st.DataObject) -> None:
        if call == "begin":
            self._begin(h)
        elif call == "send":
            partitions = data.draw(st.sets(st.sampled_from(PARTITIONS), min_size=1), label="partitions")
            self._send_records(h, partitions, data.draw(st.integers(1, 3), label="count"))
        elif call == "add_offsets":
            self._add_offsets(h, data.draw(st.sampled_from(GROUPS), label="group"),
                              data.draw(st.sampled_from(PARTITIONS), label="partition"),
                              data.draw(st.integers(0, 100), label="offset"))
        else:
            self._end(h, commit=call == "commit")

    CALLS = st.sampled_from(["begin", "send", "add_offsets", "commit", "abort"])

    @rule(h=handles, call=CALLS, data=st.data())
    def an_instance_calls(self, h: Handle, call: str, data: st.DataObject) -> None:
        """Any instance ever initialised (often a fenced one) makes a transactional call."""
        self._transactional_call(h, call, data)

    @rule(call=CALLS, data=st.data(), future=st.booleans())
    def the_live_producer_calls(self, call: str, data: st.DataObject, future: bool) -> None:
        """A transactional id's live producer makes a call, valid in its state or not; or the
        call comes with an epoch newer than the live one (refused, INVALID_PRODUCER_EPOCH)."""
        if future:
            self._call_with_a_future_epoch(call, data)
        else:
            self._transactional_call(self._live(data), call, data)

    @rule(data=st.data(), steps=st.integers(1, 4))
    def live_producers_go_on(self, data: st.DataObject, steps: int) -> None:
        """Live producers take steps their state allows, so that transactions get somewhere:
        begin when idle; send (mostly), add offsets, commit or abort when Ongoing."""
        for _ in range(steps):
            h = self._live(data)
            state = self.model.tids[h.tid].state
            if state == ONGOING:
                call = data.draw(st.sampled_from(["send", "send", "send", "add_offsets", "commit", "commit", "abort"]))
            elif state in PREPARING:
                call = "commit" if state == PREPARE_COMMIT else "abort"  # a retry of the decision
            elif self.model.tids[h.tid].version == 2:
                call = data.draw(st.sampled_from(["send", "send", "add_offsets", "begin"]))  # the first call begins
            else:
                call = "begin"
            self._transactional_call(h, call, data)

    def _begin(self, h: Handle) -> None:
        m = self.model.tids[h.tid]
        _, code = _call(lambda: self.services.coordinator.begin(h.tid, h.producer_id, h.producer_epoch))
        expected = _expect_transactional(self.model, h)
        if expected is None:
            if m.state == ONGOING:
                expected = "INVALID_TXN_STATE"
            elif m.state in PREPARING:
                if self.model.inline:
                    self.model.complete([h.tid])
                else:
                    expected = "CONCURRENT_TRANSACTIONS"
        self._check(f"begin {h} ({m.state})", code, expected)
        if code is OK:
            m.state = ONGOING
            m.txn = Txn(f"{h.tid}.{next(self.names)}", self.clock())

    def _begins(self, h: Handle, expected: str | None) -> str:
        """The state before a Send or AddOffsets; under version 2 the model's transaction begins
        with one that is to succeed on an idle transactional id."""
        m = self.model.tids[h.tid]
        state = m.state
        if expected is OK and state != ONGOING:
            m.state = ONGOING
            m.txn = Txn(f"{h.tid}.{next(self.names)}", self.clock())
        return state

    def _send_records(self, h: Handle, partitions: set[int], count: int) -> None:
        m = self.model.tids[h.tid]
        expected = _in_transaction(self.model, h)
        state = self._begins(h, expected)
        name = m.txn.name if m.txn is not None else f"{h.tid}.stray"
        plan = []
        for p in sorted(partitions):
            start = len(m.txn.records.get(p, [])) if m.txn is not None else 0
            values = [f"{name}.p{p}.{start + i}.{next(self.names)}" for i in range(count)]
            plan.append((p, m.sequences.get(p, 0), values))
        results, code = _call(lambda: self._send(h, plan))
        self._check(f"send {h} ({state})", code, expected)
        if code is OK:
            assert m.txn is not None
            assert not any(r.duplicate for r in results), results
            for p, _, values in plan:
                m.txn.records.setdefault(p, []).extend(values)
                m.sequences[p] = m.sequences.get(p, 0) + len(values)
                self.model.sent.update(values)
            m.txn.last_send = plan

    def _send(self, h: Handle, plan: list[tuple[int, int, list[str]]]) -> Any:
        now = self.clock()
        batches = [SendBatch(DATA, p, [RecordToAppend(None, json.dumps(v), None, now) for v in values], seq)
                   for p, seq, values in plan]
        return self.services.log.send(batches, producer_id=h.producer_id,
                                      producer_epoch=h.producer_epoch, transactional_id=h.tid)

    def _add_offsets(self, h: Handle, group: str, partition: int, offset: int) -> None:
        m = self.model.tids[h.tid]
        expected = _in_transaction(self.model, h)
        state = self._begins(h, expected)
        _, code = _call(lambda: self.services.coordinator.add_offsets(
            h.tid, h.producer_id, h.producer_epoch, group,
            [OffsetToStage(SRC, partition, offset, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)]))
        self._check(f"add_offsets {h} ({state})", code, expected)
        if code is OK:
            assert m.txn is not None
            m.txn.offsets[(group, partition)] = offset

    def _end(self, h: Handle, commit: bool) -> None:
        m = self.model.tids[h.tid]
        decided, done = (PREPARE_COMMIT, COMPLETE_COMMIT) if commit else (PREPARE_ABORT, COMPLETE_ABORT)
        state = m.state
        _, code = _call(lambda: self.services.coordinator.end_transaction(
            h.tid, h.producer_id, h.producer_epoch, commit=commit))
        # Of the Commit or Abort that ended it: answered again. An Abort that found nothing open
        # left the state Empty.
        ended = (decided, done) if commit else (decided, done, EMPTY)
        retry = (m.version == 2 and h.producer_id == m.producer_id and h.producer_epoch == m.last_epoch
                 and state in ended)
        expected = None if retry else _expect_transactional(self.model, h)
        if retry:
            type(self).outcomes["version 2: retry of an end"] += 1
        if expected is None:
            if retry:
                pass  # answered as the first time; a decision left to the worker may complete below
            elif state == ONGOING:
                m.state = decided
                if m.version == 2:  # every Commit and Abort bumps the epoch
                    type(self).outcomes["version 2: end"] += 1
                    m.last_epoch, m.producer_epoch, m.sequences = m.producer_epoch, m.producer_epoch + 1, {}
            elif m.version == 2 and not commit and state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
                # Version 2: an Abort with nothing open bumps the epoch all the same.
                m.state, m.sequences = EMPTY, {}
                m.last_epoch, m.producer_epoch = m.producer_epoch, m.producer_epoch + 1
            elif state not in (decided, done):  # Empty, the other decision, its completion
                expected = "INVALID_TXN_STATE"
            elif m.version == 2:
                # Only the epoch before the decision's bump retries it: the live epoch names a
                # transaction that has not begun.
                expected = "CONCURRENT_TRANSACTIONS" if state == decided else "INVALID_TXN_STATE"
            if expected is None and m.state == decided and self.model.inline:
                self.model.complete([h.tid])
        self._check(f"{'commit' if commit else 'abort'} {h} ({state})", code, expected)

    def _version_2_committable(self) -> list[str]:
        return sorted(tid for tid, m in self.model.tids.items()
                      if m.version == 2 and m.state not in PREPARING)

    @precondition(lambda self: self._version_2_committable())
    @rule(data=st.data(), count=st.integers(1, 2))
    def a_version_2_producer_commits_carrying_its_last_batches(self, data: st.DataObject, count: int) -> None:
        """A live version 2 producer's Commit carries batches: appended to its open transaction,
        or to the one it begins (a whole transaction in one request), and committed with it."""
        tid = data.draw(st.sampled_from(self._version_2_committable()), label="transactional_id")
        partitions = data.draw(st.sets(st.sampled_from(PARTITIONS), min_size=1), label="partitions")
        m = self.model.tids[tid]
        h = Handle(tid, m.producer_id, m.producer_epoch)
        state = self._begins(h, OK)
        assert m.txn is not None
        plan = []
        for p in sorted(partitions):
            start = len(m.txn.records.get(p, []))
            values = [f"{m.txn.name}.p{p}.{start + i}.{next(self.names)}" for i in range(count)]
            plan.append((p, m.sequences.get(p, 0), values))
        now = self.clock()
        batches = [SendBatch(DATA, p, [RecordToAppend(None, json.dumps(v), None, now) for v in values], seq)
                   for p, seq, values in plan]
        view, code = _call(lambda: self.services.coordinator.end_transaction(
            h.tid, h.producer_id, h.producer_epoch, commit=True, batches=batches))
        self._check(f"commit carrying batches {h} ({state})", code, OK)
        type(self).outcomes[f"version 2: commit carrying batches ({'joined' if state == ONGOING else 'whole'})"] += 1
        assert not any(r.duplicate for r in view.sent), view.sent
        for p, _, values in plan:
            m.txn.records.setdefault(p, []).extend(values)
            self.model.sent.update(values)
        m.state = PREPARE_COMMIT
        m.last_epoch, m.producer_epoch, m.sequences = m.producer_epoch, m.producer_epoch + 1, {}
        if self.model.inline:
            self.model.complete([tid])

    def _retriable_sends(self) -> list[str]:
        return [tid for tid, m in self.model.tids.items()
                if m.state == ONGOING and m.txn is not None and m.txn.last_send is not None]

    @precondition(lambda self: self._retriable_sends())
    @rule(data=st.data())
    def the_live_producer_retries_its_last_send(self, data: st.DataObject) -> None:
        """A retried Send is answered as duplicates and writes nothing."""
        tid = data.draw(st.sampled_from(self._retriable_sends()))
        m = self.model.tids[tid]
        h = Handle(tid, m.producer_id, m.producer_epoch)
        results, code = _call(lambda: self._send(h, m.txn.last_send))  # type: ignore[union-attr, arg-type]
        self._check(f"retry of the last send of {h}", code, OK)
        assert all(r.duplicate for r in results), results

    def _ended_under_version_2(self) -> list[str]:
        return sorted(tid for tid, m in self.model.tids.items() if m.version == 2 and m.last_epoch is not None)

    @precondition(lambda self: self._ended_under_version_2())
    @rule(call=CALLS, data=st.data())
    def a_call_delayed_from_the_transaction_that_ended_arrives(self, call: str, data: st.DataObject) -> None:
        """Version 2: a call with the epoch of the transaction the last Commit or Abort ended
        (a Send that lay in the network, a retried Commit): refused, never part of the next
        transaction, except the retry of that Commit or Abort, answered again."""
        tid = data.draw(st.sampled_from(self._ended_under_version_2()), label="transactional_id")
        m = self.model.tids[tid]
        assert m.last_epoch is not None
        type(self).outcomes["version 2: a delayed call"] += 1
        self._transactional_call(Handle(tid, m.producer_id, m.last_epoch), call, data)

    @rule(partition=st.sampled_from(PARTITIONS), count=st.integers(1, 2))
    def a_plain_producer_sends(self, partition: int, count: int) -> None:
        """A non-transactional Send to the same partitions: visible at once."""
        values = [f"plain.{next(self.names)}" for _ in range(count)]
        now = self.clock()
        self.services.log.send(
            [SendBatch(DATA, partition, [RecordToAppend(None, json.dumps(v), None, now) for v in values])],
            producer_id=None, producer_epoch=None, transactional_id=None,
        )
        self.model.sent.update(values)
        self.model.committed[partition].append([values])

    def _call_with_a_future_epoch(self, call: str, data: st.DataObject) -> None:
        live = self._live(data)
        future = Handle(live.tid, live.producer_id, live.producer_epoch + 1)
        c = self.services.coordinator
        calls: dict[str, Callable[[], Any]] = {
            "begin": lambda: c.begin(future.tid, future.producer_id, future.producer_epoch),
            "send": lambda: self._send(future, [(0, 0, [f"future.{next(self.names)}"])]),
            "add_offsets": lambda: c.add_offsets(future.tid, future.producer_id, future.producer_epoch,
                                                 GROUPS[0], [OffsetToStage(SRC, 0, 1, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)]),
            "commit": lambda: c.end_transaction(future.tid, future.producer_id, future.producer_epoch, commit=True),
            "abort": lambda: c.end_transaction(future.tid, future.producer_id, future.producer_epoch, commit=False),
        }
        _, code = _call(calls[call])
        self._check(f"{call} with a future epoch {future}", code, "INVALID_PRODUCER_EPOCH")

    @rule(ms=st.sampled_from([600, 6_000, 0, 1, 450]))
    def advance_clock_and_run_the_coordinator(self, ms: int) -> None:
        """Time passes; a coordinator pass aborts timed-out transactions (bumping the epoch, so
        the late producer is fenced) and completes decided ones."""
        self.clock.advance(ms)
        now = self.clock()
        model = self.model
        timed_out = [tid for tid, m in model.tids.items()
                     if m.state == ONGOING and m.txn is not None and now > m.txn.started_ms + m.timeout_ms]
        decided = [tid for tid, m in model.tids.items() if m.state in PREPARING]
        result = self.worker.run_once(now)
        assert result.timed_out == len(timed_out), (result, timed_out)
        type(self).outcomes["coordinator: timed out"] += len(timed_out)
        type(self).outcomes["coordinator: completed"] += len(decided)
        for tid in timed_out:
            model.decide_abort(tid)
            model.complete([tid])
            self._bumped(tid)
        model.complete([tid for tid, m in model.tids.items() if m.state in PREPARING])

    @rule(inline=st.booleans())
    def restart_the_service(self, inline: bool) -> None:
        """The service process restarts: nothing in memory survives; completion inline or not."""
        assert self.db is not None
        self.db.dispose()
        self.db = None
        self._start(inline)
        type(self).outcomes[f"restart: inline={inline}"] += 1

    # --- invariants ----------------------------------------------------------------------------

    @invariant()
    def read_committed_is_the_committed_transactions_in_commit_order(self) -> None:
        hidden = self.model.invisible | self.model.open_values()
        for p in PARTITIONS:
            actual = _values(self.services, p, IsolationLevel.READ_COMMITTED)
            shown = set(actual) & hidden
            assert not shown, f"partition {p}: read_committed shows open or aborted records {sorted(shown)}"
            assert _matches(actual, self.model.committed[p]), (
                f"partition {p}: read_committed\n  got      {actual}\n"
                f"  expected {self.model.committed[p]} (commit steps, in order)")

    @invariant()
    def every_record_sent_is_stored_once(self) -> None:
        stored = [v for p in PARTITIONS for v in _values(self.services, p, IsolationLevel.READ_UNCOMMITTED)]
        assert len(stored) == len(set(stored)), f"a record is stored twice: {sorted(stored)}"
        assert set(stored) == self.model.sent, (
            f"missing {sorted(self.model.sent - set(stored))}, extra {sorted(set(stored) - self.model.sent)}")

    @invariant()
    def offsets_are_gapless(self) -> None:
        with self.db.engine.connect() as conn:  # type: ignore[union-attr]
            for p in PARTITIONS:
                end = conn.execute(text(
                    "SELECT next_offset FROM partitions JOIN topics USING (topic_id) "
                    "WHERE name = :t AND partition = :p"), {"t": DATA, "p": p}).scalar_one()
                offsets = conn.execute(text(
                    'SELECT r."offset" FROM records r JOIN topics USING (topic_id) '
                    'WHERE name = :t AND r.partition = :p ORDER BY r."offset"'), {"t": DATA, "p": p}).scalars().all()
                assert list(offsets) == list(range(end)), f"partition {p}: offsets {list(offsets)}, log end {end}"

    @invariant()
    def transactions_are_in_the_model_state(self) -> None:
        for tid, m in self.model.tids.items():
            assert self._row(tid) == (m.producer_id, m.producer_epoch, m.state), (
                f"{tid}: stored {self._row(tid)}, model {(m.producer_id, m.producer_epoch, m.state)}")

    @invariant()
    def group_offsets_are_the_committed_ones(self) -> None:
        pending = self.model.pending_groups()
        for g in GROUPS:
            rows = self.services.group_offsets.fetch(g, topic_names=None, require_stable=False, order=None)
            got = {(r.topic, r.partition): r.committed_offset for r in rows}
            want = {(SRC, p): o for (group, p), o in self.model.group_offsets.items() if group == g}
            assert got.keys() == want.keys() and all(got[k] in want[k] for k in got), (
                f"group {g}: committed {got}, model {want}")
            _, code = _call(lambda: self.services.group_offsets.fetch(g, topic_names=None, require_stable=True, order=None))
            self._check(f"stable offset fetch of {g}", code,
                        "UNSTABLE_OFFSET_COMMIT" if g in pending else OK)


# --- running it ---------------------------------------------------------------------------------------


def model_settings(max_examples: int = MODEL_EXAMPLES, shrink: bool = True) -> settings:
    return settings(
        max_examples=max_examples,
        stateful_step_count=MODEL_STEPS,
        derandomize=True,
        database=None,
        deadline=None,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        # No explain phase: its line tracing makes a failing run many times slower.
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target] + ([Phase.shrink] if shrink else []),
    )


@pytest.fixture
def fresh_url(db_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """A new, migrated, empty database for each example: a copy of the migrated SQLite file, or
    the session's PostgreSQL database truncated."""
    if db_url.startswith("sqlite"):
        pristine = tmp_path / "pristine.db"
        shutil.copy(db_url.removeprefix("sqlite:///"), pristine)
        made: list[Path] = []
        numbers = itertools.count()

        def fresh() -> str:
            for old in made:  # the previous example's database is closed by now
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{old}{suffix}").unlink(missing_ok=True)
            made.clear()
            path = tmp_path / f"example-{next(numbers)}.db"
            shutil.copy(pristine, path)
            made.append(path)
            return f"sqlite:///{path}"

        yield fresh
    else:
        engine = request.getfixturevalue("postgres_engine")

        def fresh_pg() -> str:
            _reset_postgres(engine)
            return db_url

        yield fresh_pg


def _machine(fresh: Callable[[], str], **attrs: Any) -> type[CoordinatorMachine]:
    return type("Machine", (CoordinatorMachine,),
                {"fresh_url": staticmethod(fresh), "outcomes": Counter(), **attrs})


# The default run takes well under a minute per backend; a longer one gets time to match.
@pytest.mark.timeout(max(300, MODEL_EXAMPLES * MODEL_STEPS // 2))
def test_coordinator_behaves_as_the_model_of_the_contract(fresh_url: Callable[[], str]) -> None:
    machine = _machine(fresh_url)
    try:
        run_state_machine_as_test(machine, settings=model_settings())
    finally:
        print("\n" + ", ".join(f"{k} {v}" for k, v in sorted(machine.outcomes.items())))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_model_catches_a_commit_that_aborts(fresh_url: Callable[[], str]) -> None:
    """The harness can fail: a coordinator whose Commit aborts is caught."""
    with pytest.raises(AssertionError):
        run_state_machine_as_test(_machine(fresh_url, break_commits=True), settings=model_settings(50, shrink=False))
