"""InitProducerId of a transactional id no one has used yet, by several callers at once, on
SQLite and PostgreSQL: each is answered, the first made the id's row at epoch 0 and each later
one fenced the one before it, a new epoch each. On PostgreSQL the callers' FOR UPDATE reads find
no row to lock, so two may both go on to insert it: the second's insert meets the first's key
and starts again (ProducerInit.init_producer_id), where it finds the row and bumps its epoch.
Without that it raised the database's unique violation: an HTTP 500, a Kafka connection closed
with no answer."""

from __future__ import annotations

import threading
from typing import Any

from app.composition import Services
from app.storage import producers
from app.storage import transactions as txns

CALLERS = 8


def _init_all(services: Services, tid: str, callers: int) -> list[Any]:
    """InitProducerId of `tid` by `callers` threads started together: each one's answer, or
    the exception it raised."""
    answers: list[Any] = [None] * callers
    start = threading.Barrier(callers)

    def call(i: int) -> None:
        start.wait(timeout=30)
        try:
            answers[i] = services.coordinator.init_producer_id(transactional_id=tid, transaction_timeout_ms=None)
        except Exception as e:  # noqa: BLE001 - asserted by the test
            answers[i] = e

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return answers


def test_callers_at_once_of_a_new_transactional_id_each_get_a_new_epoch_of_one_producer(
        services: Services) -> None:
    answers = _init_all(services, "new-at-once", CALLERS)
    assert [a for a in answers if isinstance(a, Exception)] == []
    assert {a.producer_id for a in answers} == {answers[0].producer_id}
    assert sorted(a.producer_epoch for a in answers) == list(range(CALLERS))
    with services.db.read() as conn:
        stored = txns.get(conn, "new-at-once")
    assert (stored.producer_id, stored.producer_epoch) == (answers[0].producer_id, CALLERS - 1)


def test_a_caller_whose_insert_meets_anothers_row_fences_it(services: Services, monkeypatch: Any) -> None:
    """Both callers have found no row before either inserts it (held apart until then where the
    database lets two writers in at once; SQLite's take turns, so there they cannot meet)."""
    both_read = threading.Barrier(2)
    create = producers.create_producer

    def create_when_both_have_read(*args: Any, **kwargs: Any) -> int:
        if services.db.dialect == "postgresql":
            both_read.wait(timeout=30)
        return create(*args, **kwargs)

    monkeypatch.setattr(producers, "create_producer", create_when_both_have_read)
    answers = _init_all(services, "new-both-read", 2)
    assert [a for a in answers if isinstance(a, Exception)] == []
    assert sorted(a.producer_epoch for a in answers) == [0, 1]
    assert answers[0].producer_id == answers[1].producer_id
