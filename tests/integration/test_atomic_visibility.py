"""Guarantee 1, pinned strictly: a transaction's records in every partition it touched, and the
group offsets it carries, become visible all together or not at all.

Completion writes every partition's COMMIT marker, the group's offsets and the Complete state
in one database transaction. So a reader that reads every partition and the group's committed
offsets in ONE snapshot (Database.read: REPEATABLE READ on PostgreSQL, one read transaction
on SQLite in WAL mode) must find each transaction either nowhere or everywhere. Writers run
small transactions through the service layer (what the HTTP routers call) while a reader takes
snapshot after snapshot; had completion committed partition by partition, or the offsets apart
from the markers, some snapshot would catch a transaction in some partitions and not others,
or offsets ahead of (or behind) the records they stand for.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

import pytest

from app.composition import Services
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder
from app.domain.records import RecordToAppend
from app.domain.types import IsolationLevel
from app.services.log_service import SendBatch
from app.services.transaction_coordinator import TransactionCoordinator
from app.storage import offsets, read, topics

TOPIC, PARTITIONS = "atomic", 4
CONSUMED = "consumed"  # the topic whose positions the transactions commit for GROUP
GROUP = "copiers"
WRITERS = 2
TXNS_PER_WRITER = 100


def _aborts(i: int) -> bool:
    return i % 5 == 3  # every 5th transaction of a writer aborts


def _number(writer: int, i: int) -> int:
    """Transaction numbers are unique and, per writer, increase in the writer's commit order."""
    return i * WRITERS + writer


@dataclass
class _Writer:
    """One transactional_id. Transaction number n sends one record, n, to every partition of
    TOPIC and stages offset n + 1 for CONSUMED/<writer> in GROUP."""

    index: int
    committed: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)

    def run(self, services: Services, coordinator: TransactionCoordinator) -> None:
        tid = f"atomic-writer-{self.index}"
        p = coordinator.init_producer_id(transactional_id=tid, transaction_timeout_ms=None)
        pid, epoch = p.producer_id, p.producer_epoch
        for i in range(TXNS_PER_WRITER):
            n = _number(self.index, i)
            coordinator.begin(tid, pid, epoch)
            services.log.send(
                [
                    SendBatch(TOPIC, partition, [RecordToAppend(None, json.dumps(n), None, services.clock())], i)
                    for partition in range(PARTITIONS)
                ],
                producer_id=pid,
                producer_epoch=epoch,
                transactional_id=tid,
            )
            coordinator.add_offsets(tid, pid, epoch, GROUP,
                                    [OffsetToStage(CONSUMED, self.index, n + 1, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)])
            commit = not _aborts(i)
            coordinator.end_transaction(tid, pid, epoch, commit=commit)
            if not coordinator.settings.complete_inline:
                coordinator.completion.complete(tid)  # what the coordinator worker does
            (self.committed if commit else self.aborted).append(n)


@dataclass(frozen=True)
class _Snapshot:
    """What one read transaction saw: transaction numbers per partition, in read_committed
    order, and the group's committed offset per CONSUMED partition."""

    partitions: tuple[tuple[int, ...], ...]
    group_offsets: dict[int, int]


def _read_snapshot(services: Services) -> _Snapshot:
    seen: list[tuple[int, ...]] = []
    with services.db.read() as conn:  # one snapshot for everything below
        topic = topics.get_topic(conn, TOPIC)
        consumed = topics.get_topic(conn, CONSUMED)
        for partition in range(PARTITIONS):
            numbers: list[int] = []
            position = 0
            while True:
                page = read.fetch(
                    conn,
                    topic_id=topic.topic_id,
                    partition=partition,
                    offset=position,
                    max_records=10_000,
                    isolation=IsolationLevel.READ_COMMITTED,
                )
                numbers.extend(json.loads(r.value) for r in page.records)
                if page.next_offset >= page.high_watermark or page.next_offset == position:
                    break
                position = page.next_offset
            seen.append(tuple(numbers))
        group = {o.partition: o.committed_offset for o in offsets.fetch(conn, GROUP) if o.topic_id == consumed.topic_id}
    return _Snapshot(tuple(seen), group)


def _inconsistencies(snap: _Snapshot, aborted: set[int]) -> list[str]:
    """Everything in one snapshot that a partly visible transaction would produce."""
    problems = []
    first = snap.partitions[0]
    for partition, numbers in enumerate(snap.partitions[1:], start=1):
        if numbers != first:
            only_here = sorted(set(numbers) - set(first))
            only_in_0 = sorted(set(first) - set(numbers))
            problems.append(
                f"partition {partition} shows {list(numbers)} but partition 0 shows {list(first)} "
                f"(only in {partition}: {only_here}, only in 0: {only_in_0})"
            )
    for partition, numbers in enumerate(snap.partitions):
        if bad := sorted(set(numbers) & aborted):
            problems.append(f"aborted transactions {bad} visible in partition {partition}")
    visible = set().union(*map(set, snap.partitions))
    for writer in range(WRITERS):
        mine = [n for n in first if n % WRITERS == writer]
        expected = None if not mine else max(mine) + 1
        got = snap.group_offsets.get(writer)
        if got != expected:
            problems.append(
                f"group offset of {CONSUMED}/{writer} is {got}, expected {expected} "
                f"(writer {writer}'s transactions visible in partition 0: {mine}; in any partition: "
                f"{sorted(n for n in visible if n % WRITERS == writer)})"
            )
    return problems


@pytest.mark.parametrize("complete_inline", [True, False], ids=["completed_by_commit", "completed_by_worker"])
def test_a_reader_sees_a_transaction_in_every_partition_and_its_offsets_at_once(
    services: Services, complete_inline: bool
) -> None:
    services.topics.create(TOPIC, PARTITIONS)
    services.topics.create(CONSUMED, WRITERS)
    coordinator = TransactionCoordinator(
        services.db, services.settings.model_copy(update={"complete_inline": complete_inline}), services.clock
    )
    writers = [_Writer(w) for w in range(WRITERS)]
    # Every number a writer will abort, known up front so a snapshot can be checked at once.
    aborted = {_number(w, i) for w in range(WRITERS) for i in range(TXNS_PER_WRITER) if _aborts(i)}
    errors: list[BaseException] = []
    failures: list[tuple[int, _Snapshot, list[str]]] = []
    states: set[tuple[tuple[int, ...], ...]] = set()
    snapshots = 0
    reader_started = threading.Event()
    writers_done = threading.Event()

    def read_until_writers_are_done() -> None:
        nonlocal snapshots
        try:
            while True:
                last = writers_done.is_set()
                snap = _read_snapshot(services)
                snapshots += 1
                states.add(snap.partitions)
                if problems := _inconsistencies(snap, aborted):
                    failures.append((snapshots, snap, problems))
                reader_started.set()
                if last:
                    return
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            reader_started.set()

    def write(writer: _Writer) -> None:
        try:
            reader_started.wait(timeout=30)
            writer.run(services, coordinator)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    reader = threading.Thread(target=read_until_writers_are_done, name="reader")
    threads = [threading.Thread(target=write, args=(w,), name=f"writer-{w.index}") for w in writers]
    reader.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    writers_done.set()
    reader.join(timeout=120)
    assert not any(t.is_alive() for t in [*threads, reader]), "a thread did not finish"
    if errors:
        raise errors[0]

    assert not failures, (
        f"{len(failures)} of {snapshots} snapshots saw a transaction partly; the first ones:\n"
        + "\n".join(
            f"snapshot #{i}: " + "; ".join(problems) + f" | group offsets {snap.group_offsets}"
            for i, snap, problems in failures[:5]
        )
    )

    # The writers' own account matches the plan: every 5th transaction aborted.
    for w in writers:
        assert w.committed == [_number(w.index, i) for i in range(TXNS_PER_WRITER) if not _aborts(i)]
        assert w.aborted == [_number(w.index, i) for i in range(TXNS_PER_WRITER) if _aborts(i)]
    # After the writers: the exact final state.
    final = _read_snapshot(services)
    log_order = final.partitions[0]
    assert all(numbers == log_order for numbers in final.partitions), final.partitions
    # Every committed transaction, in every partition, once, none of the aborted ones, and
    # each writer's transactions in the order it committed them.
    assert sorted(log_order) == sorted(n for w in writers for n in w.committed)
    for w in writers:
        assert [n for n in log_order if n % WRITERS == w.index] == w.committed
    assert final.group_offsets == {w.index: w.committed[-1] + 1 for w in writers}
    # Each snapshot the reader took showed a prefix of that final commit order.
    for state in states:
        assert state[0] == log_order[: len(state[0])], (state[0], log_order)
