"""A Send racing the expiry of its producer (app.services.producer_expiry), on SQLite and
PostgreSQL: either the expiry sees the Send and keeps the producer, or the producer is gone and
the Send takes its id back (LogService.send), made again before any of its batches is written;
never a Send accepted for a producer the expiry forgot, nor sequence state left without its
producer.

On PostgreSQL a Send holds its producer's row FOR KEY SHARE (sequence_state._PRODUCER_HOLDS) and
the expiry deletes only the rows it locked FOR UPDATE, looked at again once locked; on SQLite
the two are writers that take turns."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, select

from app.composition import Services
from app.domain.errors import UnknownProducerId
from app.domain.read import IsolationLevel
from app.domain.records import RecordToAppend
from app.services import log_service, producer_expiry
from app.services.log_service import SendBatch
from app.services.producer_expiry import ProducerIdExpiry
from app.settings import Settings
from app.storage.tables import producer_partitions, producers
from tests.integration.test_send_races import _wait_until_blocked

EXPIRATION_MS = 86_400_000  # a day, as Kafka's producer.id.expiration.ms


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The service's settings with the expiration set: a day, its default."""
    return settings.model_copy(update={"producer_id_expiration_ms": EXPIRATION_MS})


def _send(services: Services, producer: Any, partition: int, base_sequence: int, value: str) -> Any:
    (result,) = services.log.send([SendBatch("t", partition, [RecordToAppend(None, value, None, 1)], base_sequence)],
                                  producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                                  transactional_id=None)
    return result


def _stored(services: Services) -> dict[int, list[tuple[int, Any]]]:
    """Each partition of topic t: its records' (offset, value)."""
    _topic, partitions = services.topics.describe("t")
    return {p.partition: [(r.offset, r.value) for r in services.log.fetch(
        "t", p.partition, offset=0, max_records=1_000, isolation=IsolationLevel.READ_UNCOMMITTED)[1].records]
        for p in partitions}


def _rows(services: Services) -> tuple[list[int], list[tuple[int, int, int]]]:
    """The producers' ids, and each sequence state's (producer id, partition, last sequence)."""
    pp = producer_partitions
    with services.db.read() as conn:
        return (list(conn.execute(select(producers.c.producer_id).order_by(producers.c.producer_id)).scalars()),
                [tuple(r) for r in conn.execute(  # type: ignore[misc]
                    select(pp.c.producer_id, pp.c.partition, pp.c.last_sequence).order_by(pp.c.producer_id, pp.c.partition))])


class _Thread(threading.Thread):
    """A thread whose target's result, or exception, is kept."""

    def __init__(self, target: Any) -> None:
        super().__init__(daemon=True)
        self._target_fn = target
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._target_fn()
        except BaseException as e:  # noqa: BLE001 - asserted by the test
            self.error = e


@contextmanager
def _expiry_held_before_its_commit(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """The expiry's deletion stops after its statements, its transaction open: (deleted, go)."""
    deleted, go = threading.Event(), threading.Event()
    delete = producer_expiry.producers.delete_idle_producers

    def held(*args: Any) -> list[int]:
        done = delete(*args)
        deleted.set()
        assert go.wait(30)
        return done

    monkeypatch.setattr(producer_expiry.producers, "delete_idle_producers", held)
    try:
        yield deleted, go
    finally:
        go.set()


# The Send racing the deletion: the producer's next batch in partition 0 (its state's UPDATE),
# its first batch in partition 1 (an INSERT of a state no row of the deletion's covers), and a
# retry of its last batch (judged on the state read back).
SENDS = {"next": (0, 1), "first_in_another_partition": (1, 0), "retry": (0, 0)}


@pytest.mark.parametrize("send", sorted(SENDS))
def test_a_send_that_comes_while_the_expiry_deletes_its_producer_waits_and_takes_it_back(  # type: ignore[no-untyped-def]
        services, database, clock, monkeypatch, send, sequence_restarts) -> None:
    services.topics.create("t", 2)
    p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)
    _send(services, p, 0, 0, "first")
    clock.advance(EXPIRATION_MS + 1)
    partition, base_sequence = SENDS[send]

    with _expiry_held_before_its_commit(monkeypatch) as (deleted, go):
        expiry = _Thread(lambda: services.producer_expiry.expire(clock()))
        expiry.start()
        assert deleted.wait(30)
        sender = _Thread(lambda: _send(services, p, partition, base_sequence, "late"))
        sender.start()
        _wait_until_blocked(database, 1)
        assert sender.is_alive()  # it waits for the expiry
        go.set()
        expiry.join(30)
        sender.join(30)

    assert (expiry.error, expiry.result) == (None, ProducerIdExpiry(1, False))
    # Written as the first batch of the id taken back, at its own sequence; the retry of the
    # batch written before the expiry a second time (what forgetting the state costs).
    assert (sender.error, sender.result.base_offset, sender.result.duplicate) == (None, 1 if partition == 0 else 0, False)
    assert _stored(services) == {0: [(0, "first")] + ([(1, "late")] if partition == 0 else []),
                                 1: [(0, "late")] if partition == 1 else []}
    assert _rows(services) == ([p.producer_id], [(p.producer_id, partition, base_sequence)])
    if send == "retry":
        sequence_restarts.add((p.producer_id, 0, 1))


@pytest.mark.parametrize("send", ["next", "first_in_another_partition"])
def test_an_expiry_that_comes_while_a_send_of_its_producer_is_under_way_keeps_the_producer(  # type: ignore[no-untyped-def]
        services, database, clock, send) -> None:
    services.topics.create("t", 2)
    p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)
    _send(services, p, 0, 0, "first")
    clock.advance(EXPIRATION_MS + 1)  # idle as the expiry's look finds it; the Send is its use now
    partition, base_sequence = SENDS[send]
    sending, go = threading.Event(), threading.Event()

    def held_at_commit(conn: Any) -> None:
        if threading.current_thread() is sender:
            sending.set()
            assert go.wait(30)

    sender = _Thread(lambda: _send(services, p, partition, base_sequence, "late"))
    event.listen(database.engine, "commit", held_at_commit)
    try:
        sender.start()
        assert sending.wait(30)
        expiry = _Thread(lambda: services.producer_expiry.expire(clock()))
        expiry.start()
        expiry.join(1 if database.dialect == "sqlite" else 30)  # SQLite's waits for the Send's turn to end
        go.set()
        sender.join(30)
        expiry.join(30)
    finally:
        go.set()
        event.remove(database.engine, "commit", held_at_commit)

    assert (sender.error, sender.result.base_offset) == (None, 1 if partition == 0 else 0)
    assert (expiry.error, expiry.result) == (None, ProducerIdExpiry(0, False))
    assert _rows(services) == ([p.producer_id], [(p.producer_id, 0, base_sequence if partition == 0 else 0)]
                               + ([(p.producer_id, 1, 0)] if partition == 1 else []))
    # Kept: its next Send goes on from its sequences.
    assert _send(services, p, 0, 2 if partition == 0 else 1, "next").base_offset == (2 if partition == 0 else 1)


def test_sends_racing_expiry_passes_are_written_once_each_and_a_forgotten_producer_taken_back(  # type: ignore[no-untyped-def]
        settings, database, clock, monkeypatch) -> None:
    """Producers each sending SENDS_EACH batches, alternately to two partitions, while passes of
    the expiry run at a time for which a producer is idle until its first Send commits: each
    producer has all its Sends written, each once, at the offsets they were answered, and is
    kept with its state; one forgotten before its first Send took its id back, once (made
    again at the Send's time, it is no longer idle for these passes)."""
    services = Services.build(settings.model_copy(update={"producer_id_expiration_ms": 1}), database, clock)
    taken_back: list[int] = []
    take_back = log_service.producers.take_back_producer

    def counted(conn: Any, producer_id: int, *args: Any) -> bool:
        taken_back.append(producer_id)
        return take_back(conn, producer_id, *args)

    monkeypatch.setattr(log_service.producers, "take_back_producer", counted)
    count, partitions, sends_each = 12, 4, 6
    services.topics.create("t", partitions)
    made = [services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)
            for _ in range(count)]
    clock.advance(10)  # Sends are stamped now; the expiry's cut-off is now too: idle until a Send
    now = clock()
    accepted: dict[int, list[tuple[int, int, str]]] = {p.producer_id: [] for p in made}
    refused: dict[int, list[int]] = {p.producer_id: [] for p in made}
    done = threading.Event()
    rng = random.Random(7)
    starts = {p.producer_id: rng.random() * 0.3 for p in made}

    def produce(p: Any) -> None:
        done.wait(starts[p.producer_id])  # staggered, among the passes
        for seq in range(sends_each):
            partition = (p.producer_id + seq % 2) % partitions
            value = f"{p.producer_id}-{seq}"
            try:
                result = _send(services, p, partition, seq // 2, value)
            except UnknownProducerId:
                refused[p.producer_id].append(seq)
                return
            accepted[p.producer_id].append((partition, result.base_offset, value))
            if seq == 0:
                with lock:
                    first_answered.append(p.producer_id)
                    if len(first_answered) == count // 3:
                        a_third_answered.set()

    passes: list[ProducerIdExpiry] = []
    lock, a_third_answered = threading.Lock(), threading.Event()
    first_answered: list[int] = []

    def expire() -> None:
        # Once a third of the producers are kept, the rest race the passes, or come after them.
        assert a_third_answered.wait(30)
        while not done.is_set():
            passes.append(services.producer_expiry.expire(now + 1))

    expiry = _Thread(expire)
    senders = [_Thread(lambda p=p: produce(p)) for p in made]
    expiry.start()
    for t in senders:
        t.start()
    for t in senders:
        t.join(60)
    done.set()
    expiry.join(60)
    assert [t.error for t in [expiry, *senders]] == [None] * (count + 1)

    kept, states = _rows(services)
    stored = _stored(services)
    expected: dict[int, list[tuple[int, str]]] = {i: [] for i in range(partitions)}
    assert kept == sorted(p.producer_id for p in made)
    for p in made:
        pid = p.producer_id
        assert (len(accepted[pid]), refused[pid]) == (sends_each, [])
        assert [(q, last) for q_pid, q, last in states if q_pid == pid] == sorted(
            [(pid % partitions, sends_each // 2 - 1), ((pid + 1) % partitions, sends_each // 2 - 1)])
        for partition, offset, value in accepted[pid]:
            expected[partition].append((offset, value))
    # Each partition holds exactly the accepted batches, once each, at the offsets answered.
    assert stored == {q: sorted(records) for q, records in expected.items()}
    assert all(offsets == list(range(len(offsets))) for offsets in ([o for o, _ in stored[q]] for q in stored))
    # Some were forgotten before their first Send (a third were answered before any pass).
    assert 0 < len(set(taken_back)) == len(taken_back) == sum(d.expired for d in passes)


@contextmanager
def _take_back_held_before_its_commit(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """The first take-back stops after its insert, its transaction open: (made, go). Later ones
    run through."""
    made, go = threading.Event(), threading.Event()
    take_back = log_service.producers.take_back_producer

    def held(*args: Any) -> bool:
        done = take_back(*args)
        if not made.is_set():
            made.set()
            assert go.wait(30)
        return done

    monkeypatch.setattr(log_service.producers, "take_back_producer", held)
    try:
        yield made, go
    finally:
        go.set()


# The second Send: the same batch (a client's retry racing its first attempt), or a batch of
# another partition, at another sequence.
SECOND = {"same_batch": (0, 5), "other_partition": (1, 7)}


@pytest.mark.parametrize("second", sorted(SECOND))
def test_two_sends_taking_back_one_id_at_once_make_one_row_and_the_second_follows(  # type: ignore[no-untyped-def]
        services, database, clock, monkeypatch, second) -> None:
    services.topics.create("t", 2)
    p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)
    clock.advance(EXPIRATION_MS + 1)
    assert services.producer_expiry.expire(clock()).expired == 1
    partition, base_sequence = SECOND[second]

    with _take_back_held_before_its_commit(monkeypatch) as (made, go):
        first = _Thread(lambda: _send(services, p, 0, 5, "late"))
        first.start()
        assert made.wait(30)
        other = _Thread(lambda: _send(services, p, partition, base_sequence, "late"))
        other.start()
        # PostgreSQL: its insert waits on the first one's key; SQLite: for the write lock.
        _wait_until_blocked(database, 1)
        assert other.is_alive()
        go.set()
        first.join(30)
        other.join(30)

    assert (first.error, other.error) == (None, None)
    assert (first.result.base_offset, other.result.base_offset) == (0, 0)
    # The same batch is written once: the later of the two is answered as its retry.
    assert sorted([first.result.duplicate, other.result.duplicate]) == ([False, True] if second == "same_batch"
                                                                       else [False, False])
    assert _stored(services) == {0: [(0, "late")], 1: [(0, "late")] if partition == 1 else []}
    assert _rows(services) == ([p.producer_id], [(p.producer_id, 0, 5)] + ([(p.producer_id, 1, 7)] if partition == 1
                                                                         else []))


def test_a_take_back_that_comes_while_the_expiry_deletes_the_row_waits_and_makes_it_again(  # type: ignore[no-untyped-def]
        services, database, clock, monkeypatch) -> None:
    # An expiry pass forgets the id and another is deleting it again as the take-back's insert
    # comes: on PostgreSQL the insert waits for the deletion's commit (the primary key's
    # conflict with a row being deleted), then makes its row; the chore's deletion, looked at
    # again under its lock, cannot have deleted a row made after it.
    services.topics.create("t", 1)
    p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)
    _send(services, p, 0, 0, "first")
    clock.advance(EXPIRATION_MS + 1)

    with _expiry_held_before_its_commit(monkeypatch) as (deleted, go):
        expiry = _Thread(lambda: services.producer_expiry.expire(clock()))
        expiry.start()
        assert deleted.wait(30)
        sender = _Thread(lambda: _send(services, p, 0, 1, "late"))
        sender.start()
        _wait_until_blocked(database, 1)
        assert sender.is_alive()
        go.set()
        expiry.join(30)
        sender.join(30)
    again = services.producer_expiry.expire(clock())

    assert (expiry.error, expiry.result, again) == (None, ProducerIdExpiry(1, False), ProducerIdExpiry(0, False))
    assert (sender.error, sender.result.base_offset) == (None, 1)
    assert _stored(services) == {0: [(0, "first"), (1, "late")]}
    assert _rows(services) == ([p.producer_id], [(p.producer_id, 0, 1)])
    assert _send(services, p, 0, 2, "next").base_offset == 2


def test_another_principal_s_take_back_that_comes_while_the_expiry_deletes_the_row_is_refused(  # type: ignore[no-untyped-def]
        services, database, clock, monkeypatch) -> None:
    # The expiry has deleted the row and written its row of forgotten_producers, uncommitted, as
    # another principal's Send comes: it waits for the deletion (PostgreSQL: its hold on the row;
    # SQLite: the write lock), finds the row gone, and its take-back finds the forgotten_producers
    # row the deletion committed with it: refused, nothing made.
    services.topics.create("t", 1)
    p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None, principal="User:alice")
    clock.advance(EXPIRATION_MS + 1)

    def send_as(principal: str, base_sequence: int, value: str) -> Any:
        return services.log.send([SendBatch("t", 0, [RecordToAppend(None, value, None, 1)], base_sequence)],
                                 producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                                 transactional_id=None, principal=principal)

    with _expiry_held_before_its_commit(monkeypatch) as (deleted, go):
        expiry = _Thread(lambda: services.producer_expiry.expire(clock()))
        expiry.start()
        assert deleted.wait(30)
        stranger = _Thread(lambda: send_as("User:mallory", 3, "stolen"))
        stranger.start()
        _wait_until_blocked(database, 1)
        assert stranger.is_alive()
        go.set()
        expiry.join(30)
        stranger.join(30)

    assert (expiry.error, expiry.result) == (None, ProducerIdExpiry(1, False))
    assert isinstance(stranger.error, UnknownProducerId), stranger.error
    assert _rows(services) == ([], [])
    assert _stored(services) == {0: []}
    (taken,) = send_as("User:alice", 3, "late")
    assert taken.base_offset == 0


def test_a_forgotten_producer_row_written_anew_while_the_drop_of_old_ones_waits_for_it_stays(  # type: ignore[no-untyped-def]
        services, database, clock) -> None:
    # The id's old row of forgotten_producers is due to go; an expiry forgets the id again and
    # writes its row anew, uncommitted, as the drop of old rows comes and waits for that row
    # (PostgreSQL: its lock; SQLite: the write lock). Once the expiry commits, the row is a new
    # one, and stays.
    from app.storage.producers import delete_idle_producers, drop_forgotten_producers
    from app.storage.tables import forgotten_producers

    p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None, principal="User:alice")
    with services.db.write() as conn:
        conn.execute(forgotten_producers.insert().values(producer_id=p.producer_id, principal="User:alice",
                                                         forgotten_ms=1))
    clock.advance(8 * EXPIRATION_MS)
    now = clock()
    with services.db.engine.connect() as expiry:
        with expiry.begin():
            assert delete_idle_producers(expiry, [p.producer_id], now - EXPIRATION_MS, now) == [p.producer_id]

            def drop() -> int:
                with services.db.write() as conn:
                    return drop_forgotten_producers(conn, now - 7 * EXPIRATION_MS, 1_000)

            dropper = _Thread(drop)
            dropper.start()
            _wait_until_blocked(database, 1)
            assert dropper.is_alive()
        dropper.join(30)

    assert (dropper.error, dropper.result) == (None, 0)
    with services.db.read() as conn:
        assert conn.execute(select(forgotten_producers.c.producer_id, forgotten_producers.c.principal,
                                   forgotten_producers.c.forgotten_ms)).all() == [(p.producer_id, "User:alice", now)]
