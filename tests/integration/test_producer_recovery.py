"""KIP-360 epoch-bump recovery, transactional id expiration and operator tools, on both databases."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from app.storage.tables import producers, record_batches, records, transactions
from app.worker.chore import ChoreConfig
from app.worker.coordinator import CoordinatorWorker
from tests.helpers import batch, begin, create_topic, fetch, ident, init_producer, records_with_batches, send, values


@pytest.fixture
def worker(services, clock) -> CoordinatorWorker:  # type: ignore[no-untyped-def]
    return CoordinatorWorker(services.coordinator, clock, ChoreConfig(interval_ms=50))


def _recover(client, tid: str, p: dict):  # type: ignore[no-untyped-def]
    return client.post("/v1/producers", json={"transactional_id": tid, **ident(p)})


def test_live_producer_bumps_its_own_epoch_and_restarts_sequences(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    begin(client, "X", p)
    send(client, [batch("t", 0, ["a", "b"], 0)], p, "X")
    r = send(client, [batch("t", 0, ["c"], 7)], p, "X")
    assert r.json()["error_code"] == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    client.post("/v1/transactions/X/abort", json=ident(p))

    bumped = _recover(client, "X", p)

    assert bumped.status_code == 200
    q = bumped.json()
    assert (q["producer_id"], q["producer_epoch"]) == (p["producer_id"], p["producer_epoch"] + 1)
    begin(client, "X", q)
    assert send(client, [batch("t", 0, ["c"], 0)], q, "X").status_code == 200
    client.post("/v1/transactions/X/commit", json=ident(q))
    assert values(fetch(client, "t", 0)) == ["c"]


def test_a_retried_recovery_is_answered_with_the_same_epoch(client):  # type: ignore[no-untyped-def]
    p = init_producer(client, "X")
    first = _recover(client, "X", p).json()
    again = _recover(client, "X", p)
    assert again.status_code == 200 and again.json()["producer_epoch"] == first["producer_epoch"]


def test_recovery_after_another_instance_initialised_is_fenced(client):  # type: ignore[no-untyped-def]
    p = init_producer(client, "X")
    init_producer(client, "X")  # a second instance takes over
    r = _recover(client, "X", p)
    assert (r.status_code, r.json()["error_code"]) == (409, "PRODUCER_FENCED")


def test_recovery_with_an_open_transaction_aborts_it_and_bumps_once(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    begin(client, "X", p)
    send(client, [batch("t", 0, ["lost"], 0)], p, "X")
    r = _recover(client, "X", p)
    assert r.status_code == 200 and r.json()["producer_epoch"] == p["producer_epoch"] + 1
    assert client.get("/v1/transactions/X").json()["state"] == "CompleteAbort"
    assert fetch(client, "t", 0)["records"] == []


def test_idempotent_producer_bumps_its_epoch_to_reset_sequences(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    send(client, [batch("t", 0, ["a"], 0)], p)
    r = client.post("/v1/producers", json=ident(p))
    assert r.status_code == 200
    q = r.json()
    assert (q["producer_id"], q["producer_epoch"]) == (p["producer_id"], 1)
    assert send(client, [batch("t", 0, ["b"], 0)], q).status_code == 200
    assert send(client, [batch("t", 0, ["c"], 1)], p).json()["error_code"] == "INVALID_PRODUCER_EPOCH"


def test_idle_transactional_id_expires_and_its_zombie_stays_fenced(client, clock, worker, settings):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    clock.advance(settings.transactional_id_expiration_ms + 1)
    assert worker.run_once().expired_transactional_ids == 1
    assert client.get("/v1/transactions/X").status_code == 404
    r = client.post("/v1/transactions/X/begin", json=ident(p))
    assert (r.status_code, r.json()["error_code"]) == (404, "TRANSACTIONAL_ID_NOT_FOUND")
    fresh = init_producer(client, "X")
    assert fresh["producer_id"] != p["producer_id"]
    r = client.post("/v1/transactions/X/begin", json=ident(p))
    assert r.json()["error_code"] == "INVALID_PRODUCER_ID_MAPPING"


def test_a_transactional_id_with_an_open_transaction_never_expires(client, clock, worker, settings):  # type: ignore[no-untyped-def]
    p = init_producer(client, "X", transaction_timeout_ms=settings.max_transaction_timeout_ms)
    begin(client, "X", p)
    clock.advance(settings.max_transaction_timeout_ms)
    assert worker.run_once().expired_transactional_ids == 0
    assert client.get("/v1/transactions/X").json()["state"] == "Ongoing"


def test_transaction_timeout_above_the_maximum_is_refused(client, settings):  # type: ignore[no-untyped-def]
    r = client.post("/v1/producers", json={"transactional_id": "X",
                                           "transaction_timeout_ms": settings.max_transaction_timeout_ms + 1})
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_TRANSACTION_TIMEOUT")


def test_list_transactions_filters_by_state_and_age(client, clock):  # type: ignore[no-untyped-def]
    a, b = init_producer(client, "A"), init_producer(client, "B")
    init_producer(client, "C")
    begin(client, "A", a)
    clock.advance(5_000)
    begin(client, "B", b)
    listed = client.get("/v1/transactions", params={"state": "Ongoing"}).json()["transactions"]
    assert [t["transactional_id"] for t in listed] == ["A", "B"]
    old = client.get("/v1/transactions", params={"state": "Ongoing", "min_age_ms": 5_000}).json()["transactions"]
    assert [(t["transactional_id"], t["age_ms"]) for t in old] == [("A", 5_000)]
    empty = client.get("/v1/transactions", params={"state": "Empty"}).json()["transactions"]
    assert [t["transactional_id"] for t in empty] == ["C"]


def test_list_transactions_by_age_without_a_state_leaves_out_ended_transactions(client, clock):  # type: ignore[no-untyped-def]
    ended, still_open = init_producer(client, "Ended"), init_producer(client, "Open")
    begin(client, "Ended", ended)
    begin(client, "Open", still_open)
    assert client.post("/v1/transactions/Ended/commit", json=ident(ended)).status_code == 200
    clock.advance(5_000)

    old = client.get("/v1/transactions", params={"min_age_ms": 5_000}).json()["transactions"]

    # Both began 5 s ago; the committed one has not been open for 5 s, and has no age.
    assert [(t["transactional_id"], t["state"], t["age_ms"]) for t in old] == [("Open", "Ongoing", 5_000)]


def test_hanging_lists_transactions_open_past_the_maximum_timeout(client, clock, settings):  # type: ignore[no-untyped-def]
    p = init_producer(client, "A", transaction_timeout_ms=1000)
    init_producer(client, "B")
    begin(client, "A", p)
    assert client.get("/v1/transactions", params={"hanging": True}).json()["transactions"] == []
    clock.advance(settings.max_transaction_timeout_ms + 1)  # no coordinator ran
    hanging = client.get("/v1/transactions", params={"hanging": True}).json()["transactions"]
    assert [t["transactional_id"] for t in hanging] == ["A"]


def test_operator_abort_aborts_and_fences_the_producer(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    begin(client, "X", p)
    send(client, [batch("t", 0, ["a"], 0)], p, "X")
    r = client.post("/v1/admin/transactions/X/abort")
    assert r.status_code == 200 and r.json()["state"] == "CompleteAbort"
    assert r.json()["producer_epoch"] == p["producer_epoch"] + 1
    r = client.post("/v1/transactions/X/commit", json=ident(p))
    assert r.json()["error_code"] == "PRODUCER_FENCED"
    r = client.post("/v1/admin/transactions/X/abort")
    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")
    # "Open" would include PrepareCommit (docs/ARCHITECTURE.md's glossary), which is not aborted:
    # the refusal names the states that are.
    assert r.json()["message"] == ("transaction is CompleteAbort; only a transaction not decided yet "
                                   "(Ongoing or Prepared) can be aborted")


# --- epoch exhaustion: 32766 is the last epoch a producer is handed, 32767 the coordinator's ---

def _at_epoch(database, p: dict, epoch: int, tid: str | None = "X") -> dict:  # type: ignore[no-untyped-def]
    """The producer `p` moved to `epoch`, as many bumps would have moved it."""
    with database.write() as conn:
        if tid is not None:
            conn.execute(update(transactions).where(transactions.c.transactional_id == tid)
                         .values(producer_epoch=epoch))
        conn.execute(update(producers).where(producers.c.producer_id == p["producer_id"])
                     .values(producer_epoch=epoch))
    return {**p, "producer_epoch": epoch}


def test_recovery_hands_out_epoch_32766_and_then_a_new_producer_id_at_epoch_0(client, database):  # type: ignore[no-untyped-def]
    p = _at_epoch(database, init_producer(client, "X"), 32765)

    last = _recover(client, "X", p).json()
    assert (last["producer_id"], last["producer_epoch"]) == (p["producer_id"], 32766)
    rotated = _recover(client, "X", last).json()
    assert (rotated["producer_id"], rotated["producer_epoch"]) == (p["producer_id"] + 1, 0)


def test_a_new_instance_at_epoch_32766_gets_a_new_producer_id_at_epoch_0(client, database):  # type: ignore[no-untyped-def]
    p = _at_epoch(database, init_producer(client, "X"), 32766)
    q = init_producer(client, "X")
    assert (q["producer_id"], q["producer_epoch"]) == (p["producer_id"] + 1, 0)


def test_recovery_with_an_open_transaction_at_epoch_32766_never_hands_out_32767(client, database):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = _at_epoch(database, init_producer(client, "X"), 32766)
    begin(client, "X", p)
    send(client, [batch("t", 0, ["lost"], 0)], p, "X")

    r = _recover(client, "X", p)

    assert r.status_code == 200, r.text
    assert (r.json()["producer_id"], r.json()["producer_epoch"]) == (p["producer_id"] + 1, 0)
    # The abort's marker: the old producer id, at the epoch its fence took.
    with database.read() as conn:
        assert [tuple(m) for m in conn.execute(
            select(records.c.offset, record_batches.c.producer_id, record_batches.c.producer_epoch,
                   records.c.control_type)
            .select_from(records_with_batches())
            .where(records.c.control_type.is_not(None)))] == [(1, p["producer_id"], 32767, "ABORT")]


def test_a_fence_at_epoch_32766_keeps_the_producer_id_so_the_producer_is_told_it_is_fenced(client, database):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = _at_epoch(database, init_producer(client, "X"), 32766)
    begin(client, "X", p)
    send(client, [batch("t", 0, ["a"], 0)], p, "X")

    aborted = client.post("/v1/admin/transactions/X/abort").json()

    assert (aborted["producer_id"], aborted["producer_epoch"]) == (p["producer_id"], 32767)
    r = client.post("/v1/transactions/X/commit", json=ident(p))
    assert r.json()["error_code"] == "PRODUCER_FENCED"
    q = init_producer(client, "X")
    assert (q["producer_id"], q["producer_epoch"]) == (p["producer_id"] + 1, 0)


def test_an_idempotent_producer_at_epoch_32766_is_bumped_to_a_new_producer_id(client, database):  # type: ignore[no-untyped-def]
    p = _at_epoch(database, init_producer(client), 32765, tid=None)
    last = client.post("/v1/producers", json=ident(p)).json()
    assert (last["producer_id"], last["producer_epoch"]) == (p["producer_id"], 32766)
    rotated = client.post("/v1/producers", json=ident(last)).json()
    assert (rotated["producer_id"], rotated["producer_epoch"]) == (p["producer_id"] + 1, 0)


@pytest.mark.parametrize("version", [1, 2])
def test_a_delayed_recovery_with_an_epoch_left_behind_never_fences_the_transaction_begun_since(  # type: ignore[no-untyped-def]
        client, version: int):
    """A KIP-360 InitProducerId carrying the epoch a bump left behind
    (last_producer_epoch: a recovery's, or under version 2 the ended transaction's) is a retry
    only while no transaction has begun since: a Begin needs the new epoch, so once the id is
    Ongoing the request is a stale copy (a duplicate delivered late). It was answered as a
    retry and fenced the live producer: its open transaction aborted, its epoch replaced, and the
    stale caller handed the new one."""
    create_topic(client, "t", 1)
    p = init_producer(client, "X", transaction_version=version)
    if version == 1:  # a KIP-360 bump: epoch 0 left behind
        live = _recover(client, "X", p).json()
        begin(client, "X", live)
    else:  # a commit: epoch 0 left behind, and the next Send begins a transaction at epoch 1
        assert send(client, [batch("t", 0, ["first"], 0)], p, "X").status_code == 200
        live = client.post("/v1/transactions/X/commit", json=ident(p)).json()
    assert live["producer_epoch"] == 1
    assert send(client, [batch("t", 0, ["open"], 0)], live, "X").status_code == 200

    late = client.post("/v1/producers", json={"transactional_id": "X", "transaction_version": version, **ident(p)})

    assert late.status_code == 409 and late.json()["error_code"] == "PRODUCER_FENCED", late.text
    described = client.get("/v1/transactions/X").json()
    assert (described["state"], described["producer_epoch"]) == ("Ongoing", 1)
    assert client.post("/v1/transactions/X/commit", json=ident(live)).status_code == 200
    assert values(fetch(client, "t", 0))[-1] == "open"


# With keep_prepared_txn the request may also be the retry of a KeepPrepared bump, which left the
# id Prepared with the transaction begun before it: the Prepare of one begun since forgets the
# epoch the bump left behind, so that only that retry finds it.
@pytest.mark.parametrize("keep_prepared_txn", [False, True])
def test_a_delayed_recovery_with_an_epoch_left_behind_never_touches_the_transaction_prepared_since(  # type: ignore[no-untyped-def]
        client, keep_prepared_txn: bool):
    """As for Ongoing: once the live producer has begun and prepared a
    transaction with the epoch a KIP-360 bump handed it, a late copy of the recovery request
    that bumped (its epoch left behind) is stale, not a retry. Without keep_prepared_txn it was
    answered as a retry, which fenced the live producer and aborted its prepared transaction
    (docs/GUARANTEES.md#prepared-transactions: only its owner ends it); with keep_prepared_txn
    it was handed the live producer's own epoch, a second holder of it."""
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    live = _recover(client, "X", p).json()
    assert live["producer_epoch"] == p["producer_epoch"] + 1
    txn_id = begin(client, "X", live)["txn_id"]
    assert send(client, [batch("t", 0, ["prepared"], 0)], live, "X").status_code == 200
    r = client.post("/v1/transactions/X/prepare", json={**ident(live), "txn_id": txn_id})
    assert r.status_code == 200, r.text

    late = client.post("/v1/producers", json={"transactional_id": "X", "keep_prepared_txn": keep_prepared_txn,
                                              **ident(p)})

    assert late.status_code == 409 and late.json()["error_code"] == "PRODUCER_FENCED", late.text
    described = client.get("/v1/transactions/X").json()
    assert (described["state"], described["producer_epoch"]) == ("Prepared", live["producer_epoch"])
    assert client.post("/v1/transactions/X/commit", json={**ident(live), "txn_id": txn_id}).status_code == 200
    assert values(fetch(client, "t", 0)) == ["prepared"]


def test_a_retried_recovery_whose_bump_rotated_the_producer_id_is_answered_again(client, database):  # type: ignore[no-untyped-def]
    """KIP-360 at the last epoch a producer id hands out: the bump rotates to a new producer id
    at epoch 0. If that answer is lost, the live producer retries with its old (producer id,
    epoch), and is answered the new id again. The rotation forgot the old id, and the retry
    was PRODUCER_FENCED: the producer was dead though nobody replaced it."""
    p = _at_epoch(database, init_producer(client, "X"), 32766)
    first = _recover(client, "X", p)
    assert first.status_code == 200, first.text
    assert (first.json()["producer_id"], first.json()["producer_epoch"]) == (p["producer_id"] + 1, 0)

    retried = _recover(client, "X", p)  # the first answer lost

    assert retried.status_code == 200, retried.text
    assert (retried.json()["producer_id"], retried.json()["producer_epoch"]) == (p["producer_id"] + 1, 0)


def test_the_markers_of_a_transaction_begun_after_a_rotating_recovery_carry_the_new_producer_id(  # type: ignore[no-untyped-def]
        client, database):
    """The rotation keeps the old producer id for the recovery's retry: a version 1 transaction
    begun since writes its batches, and so its markers, under the new one."""
    create_topic(client, "t", 1)
    p = _at_epoch(database, init_producer(client, "X"), 32766)
    q = _recover(client, "X", p).json()
    assert (q["producer_id"], q["producer_epoch"]) == (p["producer_id"] + 1, 0)
    begin(client, "X", q)
    assert send(client, [batch("t", 0, ["a"], 0)], q, "X").status_code == 200

    assert client.post("/v1/transactions/X/commit", json=ident(q)).status_code == 200

    with database.read() as conn:
        assert [tuple(m) for m in conn.execute(
            select(records.c.offset, record_batches.c.producer_id, record_batches.c.producer_epoch,
                   records.c.control_type)
            .select_from(records_with_batches()))] == [(0, q["producer_id"], 0, None), (1, q["producer_id"], 0, "COMMIT")]
    assert values(fetch(client, "t", 0)) == ["a"]


@pytest.mark.parametrize("epoch", [0, 32766])
def test_a_retried_keep_prepared_recovery_is_answered_again_and_its_transaction_stays_prepared(  # type: ignore[no-untyped-def]
        client, database, epoch: int):
    """The retry the Prepare's forgetting leaves recognised: a KeepPrepared bump's, whose
    transaction was prepared before it (at 32766 the bump gives a new producer id)."""
    create_topic(client, "t", 1)
    p = _at_epoch(database, init_producer(client, "X"), epoch)
    txn_id = begin(client, "X", p)["txn_id"]
    assert send(client, [batch("t", 0, ["kept"], 0)], p, "X").status_code == 200
    assert client.post("/v1/transactions/X/prepare", json={**ident(p), "txn_id": txn_id}).status_code == 200
    first = client.post("/v1/producers", json={"transactional_id": "X", "keep_prepared_txn": True, **ident(p)})
    assert first.status_code == 200, first.text

    retried = client.post("/v1/producers", json={"transactional_id": "X", "keep_prepared_txn": True, **ident(p)})

    assert retried.status_code == 200, retried.text
    q = first.json()
    assert ((retried.json()["producer_id"], retried.json()["producer_epoch"], retried.json()["prepared_txn_id"])
            == (q["producer_id"], q["producer_epoch"], txn_id))
    assert client.get("/v1/transactions/X").json()["state"] == "Prepared"
    assert client.post("/v1/transactions/X/commit", json={**ident(q), "txn_id": txn_id}).status_code == 200
    assert values(fetch(client, "t", 0)) == ["kept"]
