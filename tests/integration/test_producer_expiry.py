"""Producer ids do not stay forever: producer expiry (app.services.producer_expiry) forgets the
ones no Send has used for OUTBOX_PRODUCER_ID_EXPIRATION_MS, with their sequence state in every
partition, as Kafka expires a producer's state after producer.id.expiration.ms; the next
idempotent Send of one takes it back (LogService.send) at the sequence it carries, and one of an
id never handed out is answered UNKNOWN_PRODUCER_ID. On both databases; time is the test's clock."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import select, update

from app.composition import Services, maintenance_chores, serve_chores
from app.domain.errors import InvalidProducerEpoch, InvalidProducerIdMapping, OutOfOrderSequenceNumber, UnknownProducerId
from app.domain.producer import MAX_SEQUENCE
from app.domain.records import RecordToAppend
from app.domain.types import MAX_PRODUCER_EPOCH
from app.services import producer_expiry
from app.services.log_service import SendBatch
from app.services.producer_expiry import FORGOTTEN_PRODUCER_EXPIRATIONS, PRODUCER_EXPIRY_CHECK_INTERVAL_MS, ProducerIdExpiry
from app.settings import Settings
from app.storage.producers import create_producer
from app.storage.tables import forgotten_producers, producer_partitions, producers, transactions
from app.worker.chore import ChoreConfig
from app.worker.producer_expiry import ProducerExpiryPass, ProducerExpiryWorker
from tests.helpers import init_producer

EXPIRATION_MS = 86_400_000  # a day, as Kafka's producer.id.expiration.ms


def test_the_default_expiration_is_kafka_s_day_and_its_chore_runs(database, clock) -> None:  # type: ignore[no-untyped-def]
    # Unset by default while a forgotten id's next Send was refused: every producer idle for a
    # day would have stopped. Taken back now, Kafka's default holds.
    assert Settings().producer_id_expiration_ms == EXPIRATION_MS
    assert len([c for c in maintenance_chores(database, Settings(), clock) if isinstance(c, ProducerExpiryWorker)]) == 1


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The service's settings with the expiration set: a day, its default."""
    return settings.model_copy(update={"producer_id_expiration_ms": EXPIRATION_MS})


def _init(services: Services, transactional_id: str | None = None) -> Any:
    return services.coordinator.init_producer_id(transactional_id=transactional_id, transaction_timeout_ms=None)


def _send(services: Services, producer: Any, partition: int, base_sequence: int, value: str = "v") -> Any:
    (result,) = services.log.send([SendBatch("t", partition, [RecordToAppend(None, value, None, 1)], base_sequence)],
                                  producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                                  transactional_id=None)
    return result


def _producer_rows(services: Services) -> list[tuple[int, str | None]]:
    with services.db.read() as conn:
        return [tuple(r) for r in conn.execute(  # type: ignore[misc]
            select(producers.c.producer_id, producers.c.transactional_id).order_by(producers.c.producer_id))]


def _state_rows(services: Services) -> list[tuple[int, int]]:
    with services.db.read() as conn:
        return [tuple(r) for r in conn.execute(  # type: ignore[misc]
            select(producer_partitions.c.producer_id, producer_partitions.c.partition)
            .order_by(producer_partitions.c.producer_id, producer_partitions.c.partition))]


def test_idle_idempotent_producers_go_with_their_state_and_a_producer_used_since_stays(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 2)
    never, idle, used = _init(services), _init(services), _init(services)
    _send(services, idle, 0, 0)
    _send(services, idle, 1, 0)
    _send(services, used, 0, 0)
    clock.advance(EXPIRATION_MS)
    _send(services, used, 1, 0)  # its last use: made, and sent to partition 0, a whole expiration ago
    clock.advance(1)

    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(2, False)

    assert _producer_rows(services) == [(used.producer_id, None)]
    assert _state_rows(services) == [(used.producer_id, 0), (used.producer_id, 1)]
    assert never.producer_id not in [p for p, _ in _producer_rows(services)]
    assert _send(services, used, 1, 1).base_offset == 2


def test_a_producer_is_kept_for_the_whole_expiration_after_its_last_send(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 1)
    p = _init(services)
    clock.advance(10_000)
    _send(services, p, 0, 0)
    clock.advance(EXPIRATION_MS)  # its last moment

    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(0, False)
    clock.advance(1)
    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(1, False)
    assert (_producer_rows(services), _state_rows(services)) == ([], [])


def test_the_setting_is_the_expiration(settings, database, clock) -> None:  # type: ignore[no-untyped-def]
    services = Services.build(settings.model_copy(update={"producer_id_expiration_ms": 1_000}), database, clock)
    services.topics.create("t", 1)
    p = _init(services)
    _send(services, p, 0, 0)
    clock.advance(1_000)
    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(0, False)
    clock.advance(1)

    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(1, False)
    assert _producer_rows(services) == []


def _producer_row(services: Services, producer_id: int) -> tuple | None:
    with services.db.read() as conn:
        row = conn.execute(select(producers.c.producer_epoch, producers.c.transactional_id, producers.c.principal,
                                  producers.c.created_ms).where(producers.c.producer_id == producer_id)).first()
    return None if row is None else tuple(row)


def _last_sequences(services: Services) -> list[tuple[int, int, int]]:
    with services.db.read() as conn:
        return [tuple(r) for r in conn.execute(  # type: ignore[misc]
            select(producer_partitions.c.producer_id, producer_partitions.c.partition, producer_partitions.c.last_sequence)
            .order_by(producer_partitions.c.producer_id, producer_partitions.c.partition))]


def test_a_send_after_the_expiry_takes_its_producer_id_back_at_the_sequence_it_carries(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 2)
    p = _init(services)
    _send(services, p, 0, 0, "a")
    _send(services, p, 0, 1, "b")
    clock.advance(EXPIRATION_MS + 1)
    assert services.producer_expiry.expire(clock()).expired == 1
    assert _producer_row(services, p.producer_id) is None

    # Its next batch, at the sequence it carries: the first batch of the id taken back.
    assert (_send(services, p, 0, 2, "c").base_offset, _send(services, p, 0, 3, "d").base_offset) == (2, 3)
    # The row made again: its epoch, no transactional id, its sender, made now (kept a whole
    # expiration from here).
    assert _producer_row(services, p.producer_id) == (p.producer_epoch, None, "User:ANONYMOUS", clock())
    assert _last_sequences(services) == [(p.producer_id, 0, 3)]
    # Later batches follow from it as usual: a gap, and a retry of the last one.
    with pytest.raises(OutOfOrderSequenceNumber):
        _send(services, p, 0, 5, "gap")
    assert _send(services, p, 0, 3, "d").duplicate
    # A later Send to a partition without its state: there too at the sequence it carries (its
    # client's sequences went on there, and it lost its state in every partition).
    assert _send(services, p, 1, 7, "e").base_offset == 0
    assert _last_sequences(services) == [(p.producer_id, 0, 3), (p.producer_id, 1, 7)]
    clock.advance(EXPIRATION_MS)
    assert services.producer_expiry.expire(clock()).expired == 0


def test_a_producer_taken_back_then_bumped_starts_its_new_epoch_at_zero_everywhere(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 2)
    p = _init(services)
    _send(services, p, 0, 0, "a")
    clock.advance(EXPIRATION_MS + 1)
    services.producer_expiry.expire(clock())
    _send(services, p, 0, 1, "b")
    bumped = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None,
                                                   producer_id=p.producer_id, producer_epoch=p.producer_epoch)

    # A new epoch is a new producer's sequences: no longer taken back.
    with pytest.raises(UnknownProducerId):
        _send(services, bumped, 1, 4, "c")
    assert _send(services, bumped, 1, 0, "c").base_offset == 0


def test_a_request_left_behind_at_an_older_epoch_does_not_lock_out_the_current_one(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 2)
    p = _init(services)
    _send(services, p, 0, 0, "a")
    bumped = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None,
                                                   producer_id=p.producer_id, producer_epoch=p.producer_epoch)
    _send(services, bumped, 0, 0, "b")
    _send(services, bumped, 1, 0, "c")
    clock.advance(EXPIRATION_MS + 1)
    services.producer_expiry.expire(clock())
    # An epoch-0 request left behind comes first: it takes the id back at epoch 0.
    assert _send(services, p, 0, 1, "old").base_offset == 2

    # The current epoch's Send: taken back at its epoch, its sequences where they are, in the
    # partition the older epoch wrote to as in the other.
    assert _send(services, bumped, 0, 1, "d").base_offset == 3
    assert _send(services, bumped, 1, 1, "e").base_offset == 1
    assert _producer_row(services, p.producer_id) == (bumped.producer_epoch, None, "User:ANONYMOUS", clock())
    assert _last_sequences(services) == [(p.producer_id, 0, 1), (p.producer_id, 1, 1)]
    # The older epoch stays refused, and the current one bumps as usual.
    with pytest.raises(InvalidProducerEpoch):
        _send(services, p, 0, 2, "older")
    again = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None,
                                                  producer_id=bumped.producer_id, producer_epoch=bumped.producer_epoch)
    assert again.producer_epoch == bumped.producer_epoch + 1
    assert _send(services, again, 0, 0, "f").base_offset == 4


def test_a_send_refused_at_the_newer_epoch_while_a_concurrent_send_raised_the_row_is_judged_again(  # type: ignore[no-untyped-def]
        services, clock, monkeypatch) -> None:
    services.topics.create("t", 2)
    p = _init(services)
    bumped = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None,
                                                   producer_id=p.producer_id, producer_epoch=p.producer_epoch)
    clock.advance(EXPIRATION_MS + 1)
    services.producer_expiry.expire(clock())
    assert _send(services, p, 0, 0, "old").base_offset == 0  # taken back at the older epoch
    # The current epoch's Sends to both partitions at once: each is refused at first (the row
    # at the older epoch), and the other raises the row before this one's own raise runs.
    real = services.log._raise_taken_back_epoch

    def raised_meanwhile(producer_id, producer_epoch, principal):  # type: ignore[no-untyped-def]
        assert real(producer_id, producer_epoch, principal)  # the concurrent Send's raise
        return real(producer_id, producer_epoch, principal)

    monkeypatch.setattr(services.log, "_raise_taken_back_epoch", raised_meanwhile)
    assert _send(services, bumped, 1, 0, "c").base_offset == 0
    assert _producer_row(services, p.producer_id)[0] == bumped.producer_epoch


def test_a_send_at_the_newer_epoch_whose_take_back_a_request_left_behind_won_raises_the_row(  # type: ignore[no-untyped-def]
        services, clock, monkeypatch) -> None:
    services.topics.create("t", 2)
    p = _init(services)
    bumped = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None,
                                                   producer_id=p.producer_id, producer_epoch=p.producer_epoch)
    clock.advance(EXPIRATION_MS + 1)
    services.producer_expiry.expire(clock())
    # The current epoch's Send finds no row; before its own take-back runs, an epoch-0 request
    # left behind takes the id back at epoch 0, and this take-back then inserts nothing.
    real = services.log._take_back
    older: list[int] = []

    def taken_back_meanwhile(producer_id, producer_epoch, principal):  # type: ignore[no-untyped-def]
        if producer_epoch == bumped.producer_epoch and not older:
            older.append(-1)
            older[0] = _send(services, p, 0, 0, "old").base_offset
        return real(producer_id, producer_epoch, principal)

    monkeypatch.setattr(services.log, "_take_back", taken_back_meanwhile)
    assert _send(services, bumped, 1, 0, "c").base_offset == 0
    assert older == [0]
    assert _producer_row(services, p.producer_id)[0] == bumped.producer_epoch
    assert _send(services, bumped, 0, 0, "d").base_offset == 1


def test_an_epoch_bump_of_the_holder_raises_a_row_a_request_left_behind_took_back(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 1)
    p = _init(services)
    bumped = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None,
                                                   producer_id=p.producer_id, producer_epoch=p.producer_epoch)
    clock.advance(EXPIRATION_MS + 1)
    services.producer_expiry.expire(clock())
    assert _send(services, p, 0, 0, "old").base_offset == 0  # taken back at epoch 0

    again = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None,
                                                  producer_id=bumped.producer_id, producer_epoch=bumped.producer_epoch)

    assert (again.producer_id, again.producer_epoch) == (p.producer_id, bumped.producer_epoch + 1)
    assert _send(services, again, 0, 0, "new").base_offset == 1
    with pytest.raises(InvalidProducerEpoch):
        _send(services, p, 0, 1, "older")


def test_every_partition_of_the_send_that_takes_the_id_back_starts_at_its_own_sequence(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 3)
    p = _init(services)
    for partition in range(3):
        _send(services, p, partition, 0, "a")
    clock.advance(EXPIRATION_MS + 1)
    services.producer_expiry.expire(clock())

    results = services.log.send(
        [SendBatch("t", partition, [RecordToAppend(None, "b", None, 1)], seq) for partition, seq in ((2, 1), (0, 4), (1, 9))],
        producer_id=p.producer_id, producer_epoch=p.producer_epoch, transactional_id=None)

    assert [(r.partition, r.base_offset, r.duplicate) for r in results] == [(2, 1, False), (0, 1, False), (1, 1, False)]
    assert _last_sequences(services) == [(p.producer_id, 0, 4), (p.producer_id, 1, 9), (p.producer_id, 2, 1)]


def test_a_retry_of_a_batch_written_before_the_expiry_is_written_again(services, clock, sequence_restarts) -> None:  # type: ignore[no-untyped-def]
    # The accepted cost of forgetting a producer, as in Kafka: its state is what told a retry
    # from a new batch.
    services.topics.create("t", 1)
    p = _init(services)
    _send(services, p, 0, 0, "a")
    clock.advance(EXPIRATION_MS + 1)
    services.producer_expiry.expire(clock())

    again = _send(services, p, 0, 0, "a")

    assert (again.base_offset, again.duplicate) == (1, False)
    sequence_restarts.add((p.producer_id, 0, 1))


def test_an_id_never_handed_out_stays_unknown_and_nothing_is_made(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 1)
    p = _init(services)
    # 0 too: the counter starts there, and the first id handed out is 1.
    for producer_id in (p.producer_id + 1, p.producer_id + 1_000, -1, 0):
        with pytest.raises(UnknownProducerId):
            services.log.send([SendBatch("t", 0, [RecordToAppend(None, "v", None, 1)], 3)],
                              producer_id=producer_id, producer_epoch=0, transactional_id=None)
    assert _producer_rows(services) == [(p.producer_id, None)]
    _topic, (partition,) = services.topics.describe("t")
    assert partition.log_end_offset == 0
    # And the counter was not moved: the next id handed out is the one after p's.
    assert _init(services).producer_id == p.producer_id + 1


def test_a_send_at_an_epoch_no_producer_can_have_does_not_take_the_id_back(services, clock) -> None:  # type: ignore[no-untyped-def]
    # The Kafka door passes a batch's int16 epoch as it is: -1 is what a batch without a
    # producer carries. Answered as a live producer's Send at that epoch is.
    services.topics.create("t", 1)
    p = _init(services)
    _send(services, p, 0, 0, "a")
    clock.advance(EXPIRATION_MS + 1)
    services.producer_expiry.expire(clock())

    for producer_epoch in (-1, MAX_PRODUCER_EPOCH + 1):
        with pytest.raises(InvalidProducerEpoch):
            services.log.send([SendBatch("t", 0, [RecordToAppend(None, "v", None, 1)], 1)],
                              producer_id=p.producer_id, producer_epoch=producer_epoch, transactional_id=None)
    assert _producer_row(services, p.producer_id) is None
    assert _send(services, p, 0, 1, "b").base_offset == 1


def test_a_send_refused_after_taking_the_id_back_leaves_no_row(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 1)
    p = _init(services)
    _send(services, p, 0, 0, "a")
    clock.advance(EXPIRATION_MS + 1)
    services.producer_expiry.expire(clock())

    # Its sequences would pass 2^31-1: refused after the take-back made the row.
    with pytest.raises(OutOfOrderSequenceNumber):
        services.log.send([SendBatch("t", 0, [RecordToAppend(None, "v", None, 1)] * 2, MAX_SEQUENCE)],
                          producer_id=p.producer_id, producer_epoch=p.producer_epoch, transactional_id=None)

    assert _producer_row(services, p.producer_id) is None
    assert _state_rows(services) == []
    # Its next Send takes the id back as if that one had not been.
    assert _send(services, p, 0, 1, "b").base_offset == 1
    assert _producer_row(services, p.producer_id) == (p.producer_epoch, None, "User:ANONYMOUS", clock())


def test_a_transactional_send_does_not_take_a_forgotten_id_back(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 1)
    p = _init(services)
    _send(services, p, 0, 0, "a")
    clock.advance(EXPIRATION_MS + 1)
    services.producer_expiry.expire(clock())
    _init(services, "tx")

    # Refused as today: the transactional id names its own producer, not this one (Kafka's answer).
    with pytest.raises(InvalidProducerIdMapping):
        services.log.send([SendBatch("t", 0, [RecordToAppend(None, "v", None, 1)], 1)],
                          producer_id=p.producer_id, producer_epoch=p.producer_epoch, transactional_id="tx")
    assert _producer_row(services, p.producer_id) is None


def test_over_http_a_send_after_the_expiry_takes_the_id_back(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    client.post("/v1/topics", json={"name": "t", "partitions": 1})
    p = init_producer(client)
    body = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"],
            "batches": [{"topic": "t", "partition": 0, "base_sequence": 0, "records": [{"value": 1}]}]}
    assert client.post("/v1/records", json=body).status_code == 200
    clock.advance(EXPIRATION_MS + 1)
    assert services.producer_expiry.expire(clock()).expired == 1

    body["batches"][0]["base_sequence"] = 1  # type: ignore[index]
    r = client.post("/v1/records", json=body)

    assert (r.status_code, r.json()["results"][0]["base_offset"]) == (200, 1), r.text
    body["producer_id"] = p["producer_id"] + 1  # never handed out
    r = client.post("/v1/records", json=body)
    assert (r.status_code, r.json()["error_code"], r.json()["retriable"]) == (409, "UNKNOWN_PRODUCER_ID", False)


def test_a_transactional_ids_producer_is_kept_however_idle(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 1)
    p = _init(services, "tx")
    services.coordinator.begin("tx", p.producer_id, p.producer_epoch)
    services.log.send([SendBatch("t", 0, [RecordToAppend(None, "v", None, 1)], 0)],
                      producer_id=p.producer_id, producer_epoch=p.producer_epoch, transactional_id="tx")
    services.coordinator.end_transaction("tx", p.producer_id, p.producer_epoch, commit=True)
    clock.advance(EXPIRATION_MS + 1)

    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(0, False)
    assert (_producer_rows(services), _state_rows(services)) == ([(p.producer_id, "tx")], [(p.producer_id, 0)])


def test_the_producer_id_a_transactional_id_replaced_when_its_epochs_ran_out_goes_once_idle(  # type: ignore[no-untyped-def]
        services, clock) -> None:
    services.topics.create("t", 1)
    old = _init(services, "tx")
    services.coordinator.begin("tx", old.producer_id, old.producer_epoch)
    services.log.send([SendBatch("t", 0, [RecordToAppend(None, "v", None, 1)], 0)],
                      producer_id=old.producer_id, producer_epoch=old.producer_epoch, transactional_id="tx")
    services.coordinator.end_transaction("tx", old.producer_id, old.producer_epoch, commit=True)
    with services.db.write() as conn:
        conn.execute(update(transactions).where(transactions.c.transactional_id == "tx").values(producer_epoch=32766))
    new = _init(services, "tx")  # the epoch is exhausted: a new producer id
    assert (new.producer_id != old.producer_id, new.producer_epoch) == (True, 0)
    clock.advance(EXPIRATION_MS)
    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(0, False)
    clock.advance(1)

    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(1, False)
    assert (_producer_rows(services), _state_rows(services)) == ([(new.producer_id, "tx")], [])


def test_a_pass_forgets_at_most_its_bound_in_chunks_and_says_more_may_wait(  # type: ignore[no-untyped-def]
        services, clock, monkeypatch) -> None:
    monkeypatch.setattr(producer_expiry, "PRODUCERS_EXPIRED_PER_PASS", 5)
    monkeypatch.setattr(producer_expiry, "EXPIRY_CHUNK_PRODUCERS", 2)
    ids = [_init(services).producer_id for _ in range(7)]
    transactions_seen: list[int] = []
    write = services.db.write

    def counted(*args: Any, **kwargs: Any) -> Any:
        transactions_seen.append(1)
        return write(*args, **kwargs)

    monkeypatch.setattr(services.db, "write", counted)
    clock.advance(EXPIRATION_MS + 1)

    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(5, True)
    # Three chunks, and the drop of old rows of forgotten_producers.
    assert (_producer_rows(services), len(transactions_seen)) == ([(ids[5], None), (ids[6], None)], 4)
    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(2, False)
    assert _producer_rows(services) == []


def test_the_worker_looks_once_a_check_interval_and_again_at_once_after_a_full_look(  # type: ignore[no-untyped-def]
        settings, database, clock, monkeypatch, caplog) -> None:
    from prometheus_client import REGISTRY

    def counted() -> tuple[float, float]:
        return (REGISTRY.get_sample_value("outbox_producer_ids_expired_total") or 0,
                REGISTRY.get_sample_value("outbox_producer_expiry_passes_total", {"outcome": "ok"}) or 0)

    monkeypatch.setattr(producer_expiry, "PRODUCERS_EXPIRED_PER_PASS", 2)
    services = Services.build(settings.model_copy(update={"producer_id_expiration_ms": 1_000}), database, clock)
    worker = ProducerExpiryWorker(services.producer_expiry, clock, ChoreConfig(interval_ms=200))
    for _ in range(3):
        _init(services)
    clock.advance(1_001)
    before = counted()

    with caplog.at_level(logging.INFO, logger="app.worker.chore"):
        assert worker.run_once() == ProducerExpiryPass(2)  # its most: the next pass looks again
        clock.advance(200)
        assert worker.run_once() == ProducerExpiryPass(1)  # the next look a check interval later
        _init(services)
        clock.advance(PRODUCER_EXPIRY_CHECK_INTERVAL_MS - 1)
        assert worker.run_once() == ProducerExpiryPass(0)
        clock.advance(1)
        assert worker.run_once() == ProducerExpiryPass(1)

    assert [r.getMessage() for r in caplog.records] == [
        "producer-expiry pass: ProducerExpiryPass(expired_producer_ids=2)",
        "producer-expiry pass: ProducerExpiryPass(expired_producer_ids=1)",
        "producer-expiry pass: ProducerExpiryPass(expired_producer_ids=1)"]
    after = counted()
    assert (after[0] - before[0], after[1] - before[1]) == (4, 4)


def test_the_worker_runs_beside_the_coordinator_at_its_interval(settings, database, clock) -> None:  # type: ignore[no-untyped-def]
    on = settings.model_copy(update={"run_coordinator": True, "coordinator_interval_ms": 300,
                                     "producer_id_expiration_ms": 1_000})
    history = Services.build(on, database, clock).lag_history

    for chores in (maintenance_chores(database, on, clock), serve_chores(database, on, clock, None, history)):
        assert [c.config.interval_ms for c in chores if isinstance(c, ProducerExpiryWorker)] == [300]
    unset = on.model_copy(update={"producer_id_expiration_ms": None})
    for chores in (maintenance_chores(database, unset, clock), serve_chores(database, unset, clock, None, history)):
        assert [c for c in chores if isinstance(c, ProducerExpiryWorker)] == []
    off = settings.model_copy(update={"run_coordinator": False})
    assert [c for c in serve_chores(database, off, clock, None, history) if isinstance(c, ProducerExpiryWorker)] == []


def test_an_epoch_bump_counts_as_use_and_keeps_the_producer_a_whole_expiration(services, clock) -> None:  # type: ignore[no-untyped-def]
    # KIP-360's InitProducerId makes the producer anew (its sequences start again): forgotten
    # just after, its first Send under the new epoch was answered UNKNOWN_PRODUCER_ID.
    services.topics.create("t", 1)
    p = _init(services)
    clock.advance(EXPIRATION_MS)  # its last moment
    bumped = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None,
                                                   producer_id=p.producer_id, producer_epoch=p.producer_epoch)
    assert (bumped.producer_id, bumped.producer_epoch) == (p.producer_id, 1)
    clock.advance(EXPIRATION_MS)

    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(0, False)
    assert _send(services, bumped, 0, 0).base_offset == 0
    clock.advance(EXPIRATION_MS + 1)
    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(1, False)


def _send_as(services: Services, producer: Any, principal: str, base_sequence: int, value: str = "v") -> Any:
    (result,) = services.log.send([SendBatch("t", 0, [RecordToAppend(None, value, None, 1)], base_sequence)],
                                  producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                                  transactional_id=None, principal=principal)
    return result


def _forgotten(services: Services) -> list[tuple[int, str, int]]:
    with services.db.read() as conn:
        return [tuple(r) for r in conn.execute(select(  # type: ignore[misc]
            forgotten_producers.c.producer_id, forgotten_producers.c.principal, forgotten_producers.c.forgotten_ms)
            .order_by(forgotten_producers.c.producer_id))]


def test_a_forgotten_producer_s_row_of_forgotten_producers_keeps_its_id_from_another_principal_and_lets_its_holder_take_it_back(  # type: ignore[no-untyped-def]
        services, clock) -> None:
    services.topics.create("t", 1)
    p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None, principal="User:alice")
    _send_as(services, p, "User:alice", 0, "a")
    clock.advance(EXPIRATION_MS + 1)
    assert services.producer_expiry.expire(clock()).expired == 1
    assert _forgotten(services) == [(p.producer_id, "User:alice", clock())]

    # Answered as an id never handed out, and nothing is made or written.
    with pytest.raises(UnknownProducerId, match=f"^unknown producer id {p.producer_id}; call InitProducerId$"):
        _send_as(services, p, "User:mallory", 7, "stolen")
    assert (_producer_row(services, p.producer_id), _state_rows(services)) == (None, [])
    _topic, (partition,) = services.topics.describe("t")
    assert partition.log_end_offset == 1

    # Its holder takes it back as before, and goes on.
    assert _send_as(services, p, "User:alice", 1, "b").base_offset == 1
    assert _producer_row(services, p.producer_id) == (p.producer_epoch, None, "User:alice", clock())
    with pytest.raises(UnknownProducerId):  # the live row's holder rule, as ever
        _send_as(services, p, "User:mallory", 2, "stolen")
    # Forgotten again: its row of forgotten_producers is written anew, at this expiry.
    clock.advance(EXPIRATION_MS + 1)
    assert services.producer_expiry.expire(clock()).expired == 1
    assert _forgotten(services) == [(p.producer_id, "User:alice", clock())]
    with pytest.raises(UnknownProducerId):
        _send_as(services, p, "User:mallory", 2, "stolen")


def test_a_producer_the_service_made_without_a_holder_leaves_no_row_of_forgotten_producers(services, clock) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("t", 1)
    with services.db.write() as conn:
        create_producer(conn, transactional_id=None, now_ms=clock(), principal=None)
    clock.advance(EXPIRATION_MS + 1)

    assert services.producer_expiry.expire(clock()).expired == 1
    assert _forgotten(services) == []


def test_a_row_of_forgotten_producers_lives_its_expirations_then_the_chore_drops_it_and_the_id_goes_to_whoever_sends_first(  # type: ignore[no-untyped-def]
        services, clock) -> None:
    services.topics.create("t", 1)
    p = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None, principal="User:alice")
    clock.advance(EXPIRATION_MS + 1)
    services.producer_expiry.expire(clock())
    forgotten_ms = clock()

    clock.advance(FORGOTTEN_PRODUCER_EXPIRATIONS * EXPIRATION_MS)  # its last moment
    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(0, False, 0)
    with pytest.raises(UnknownProducerId):
        _send_as(services, p, "User:mallory", 0)
    clock.advance(1)
    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(0, False, 1)
    assert _forgotten(services) == []
    assert clock() - forgotten_ms == FORGOTTEN_PRODUCER_EXPIRATIONS * EXPIRATION_MS + 1

    # The accepted risk past it (README): the id is taken back by whoever sends with it first.
    assert _send_as(services, p, "User:mallory", 0).base_offset == 0
    assert _producer_row(services, p.producer_id)[2] == "User:mallory"  # type: ignore[index]


def test_the_lifetime_of_a_row_of_forgotten_producers_follows_the_expiration_setting(settings, database, clock) -> None:  # type: ignore[no-untyped-def]
    services = Services.build(settings.model_copy(update={"producer_id_expiration_ms": 1_000}), database, clock)
    services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None, principal="User:alice")
    clock.advance(1_001)
    services.producer_expiry.expire(clock())
    clock.advance(FORGOTTEN_PRODUCER_EXPIRATIONS * 1_000)
    assert services.producer_expiry.expire(clock()).forgotten_dropped == 0
    clock.advance(1)

    assert services.producer_expiry.expire(clock()).forgotten_dropped == 1


def test_a_pass_drops_at_most_its_bound_of_forgotten_producers_oldest_first_and_says_more_may_wait(  # type: ignore[no-untyped-def]
        services, clock, monkeypatch) -> None:
    monkeypatch.setattr(producer_expiry, "PRODUCERS_EXPIRED_PER_PASS", 2)
    ids = []
    for _ in range(3):
        ids.append(services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None,
                                                         principal="User:alice").producer_id)
        clock.advance(EXPIRATION_MS + 1)
        services.producer_expiry.expire(clock())  # one forgotten a pass: three forgotten times
    assert [t[0] for t in _forgotten(services)] == ids
    clock.advance(FORGOTTEN_PRODUCER_EXPIRATIONS * EXPIRATION_MS)

    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(0, True, 2)
    assert [t[0] for t in _forgotten(services)] == [ids[2]]
    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(0, False, 0)  # the last one: not yet
    clock.advance(2 * EXPIRATION_MS)
    assert services.producer_expiry.expire(clock()) == ProducerIdExpiry(0, False, 1)

