"""Prepared transactions (KIP-939), the outbox's two-phase commit with another database:
Prepare, the Prepared state's rules, and InitProducerId's keep_prepared_txn, on both databases."""

from __future__ import annotations

from typing import Any

import pytest

from app.worker.chore import ChoreConfig
from app.worker.coordinator import CoordinatorWorker
from tests.helpers import batch, begin, create_topic, fetch, ident, init_producer, send, values

TID = "orders-app"


def call(client: Any, action: str, producer: dict, **extra: Any) -> Any:
    return client.post(f"/v1/transactions/{TID}/{action}", json={**ident(producer), **extra})


@pytest.fixture
def prepared(client: Any) -> dict:
    """A transaction with one record in orders/0 and staged offsets, prepared. Returns the
    producer, with the transaction's txn_id."""
    create_topic(client, "orders")
    p = init_producer(client, TID)
    txn_id = begin(client, TID, p)["txn_id"]
    assert send(client, [batch("orders", 0, ["order 1"], 0)], p, TID).status_code == 200
    r = client.post(f"/v1/transactions/{TID}/offsets",
                    json={**ident(p), "group_id": "g", "offsets": [{"topic": "orders", "partition": 0, "offset": 5}]})
    assert r.status_code == 200, r.text
    r = call(client, "prepare", p, txn_id=txn_id)
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "Prepared"
    return {**p, "txn_id": txn_id}


def state(client: Any) -> str:
    return client.get(f"/v1/transactions/{TID}").json()["state"]


def test_a_prepared_transaction_keeps_its_partitions_and_offsets_and_shows_nothing_yet(client: Any, prepared: dict) -> None:
    described = client.get(f"/v1/transactions/{TID}").json()

    assert [(p["topic"], p["partition"], p["first_offset"]) for p in described["partitions"]] == [("orders", 0, 0)]
    assert [(o["group_id"], o["offset"]) for o in described["pending_offsets"]] == [("g", 5)]
    page = fetch(client, "orders", 0)
    assert (page["records"], page["last_stable_offset"]) == ([], 0)


def test_a_prepared_transaction_takes_no_more_records_nor_offsets(client: Any, prepared: dict) -> None:
    r = send(client, [batch("orders", 0, ["late"], 1)], prepared, TID)
    o = client.post(f"/v1/transactions/{TID}/offsets",
                    json={**ident(prepared), "group_id": "g", "offsets": [{"topic": "orders", "partition": 0, "offset": 9}]})

    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")
    assert (o.status_code, o.json()["error_code"]) == (409, "INVALID_TXN_STATE")
    assert "commit or abort it" in r.json()["message"]
    assert fetch(client, "orders", 0, isolation="read_uncommitted")["high_watermark"] == 1


def test_prepare_again_answers_the_same(client: Any, prepared: dict) -> None:
    r = call(client, "prepare", prepared, txn_id=prepared["txn_id"])

    assert (r.status_code, r.json()["state"]) == (200, "Prepared")


def test_a_prepared_transaction_is_never_timed_out(client: Any, prepared: dict, services: Any, clock: Any) -> None:
    clock.advance(services.settings.max_transaction_timeout_ms * 10)
    counts = CoordinatorWorker(services.coordinator, clock, ChoreConfig(interval_ms=50)).run_once(clock())

    assert counts.timed_out == 0
    assert state(client) == "Prepared"


def test_committing_a_prepared_transaction_shows_its_records_and_commits_its_offsets(client: Any, prepared: dict) -> None:
    r = call(client, "commit", prepared, txn_id=prepared["txn_id"])

    assert (r.status_code, r.json()["state"]) == (200, "CompleteCommit")
    assert values(fetch(client, "orders", 0)) == ["order 1"]
    assert client.get("/v1/groups/g/offsets").json()["offsets"][0]["offset"] == 5


def test_aborting_a_prepared_transaction_drops_its_records_and_offsets(client: Any, prepared: dict) -> None:
    r = call(client, "abort", prepared, txn_id=prepared["txn_id"])

    assert (r.status_code, r.json()["state"]) == (200, "CompleteAbort")
    assert values(fetch(client, "orders", 0)) == []
    assert client.get("/v1/groups/g/offsets").json()["offsets"] == []


def test_a_new_instance_keeps_the_prepared_transaction_and_ends_it_with_its_new_epoch(client: Any, prepared: dict) -> None:
    new = init_producer(client, TID, keep_prepared_txn=True)

    assert (new["producer_id"], new["producer_epoch"]) == (prepared["producer_id"], prepared["producer_epoch"] + 1)
    assert new["prepared_txn_id"] == prepared["txn_id"]
    assert state(client) == "Prepared"
    fenced = call(client, "commit", prepared, txn_id=prepared["txn_id"])
    assert (fenced.status_code, fenced.json()["error_code"]) == (409, "PRODUCER_FENCED")
    assert state(client) == "Prepared"
    r = call(client, "commit", new, txn_id=new["prepared_txn_id"])
    assert (r.status_code, r.json()["state"]) == (200, "CompleteCommit")
    assert values(fetch(client, "orders", 0)) == ["order 1"]


def test_a_new_instance_that_does_not_keep_it_aborts_the_prepared_transaction(client: Any, prepared: dict) -> None:
    new = init_producer(client, TID)

    assert new["prepared_txn_id"] is None and new["producer_epoch"] > prepared["producer_epoch"]
    assert state(client) == "Empty"  # aborted, then the new epoch handed out
    assert values(fetch(client, "orders", 0)) == []


def test_keep_prepared_txn_still_aborts_a_transaction_that_was_never_prepared(client: Any) -> None:
    create_topic(client, "orders")
    p = init_producer(client, TID)
    begin(client, TID, p)
    assert send(client, [batch("orders", 0, ["unprepared"], 0)], p, TID).status_code == 200

    new = init_producer(client, TID, keep_prepared_txn=True)

    assert new["prepared_txn_id"] is None
    assert state(client) == "Empty"  # aborted, then the new epoch handed out
    assert fetch(client, "orders", 0)["records"] == []


def test_keep_prepared_txn_again_keeps_it_again_with_a_newer_epoch(client: Any, prepared: dict) -> None:
    """A new instance whose answer was lost asks again (it has no producer id to recover with):
    the transaction stays Prepared, and only the last instance may end it."""
    first = init_producer(client, TID, keep_prepared_txn=True)
    second = init_producer(client, TID, keep_prepared_txn=True)

    assert second["prepared_txn_id"] == first["prepared_txn_id"] == prepared["txn_id"]
    assert second["producer_epoch"] == first["producer_epoch"] + 1
    assert call(client, "abort", first, txn_id=prepared["txn_id"]).json()["error_code"] == "PRODUCER_FENCED"
    assert state(client) == "Prepared"


def test_prepare_of_another_transaction_than_the_current_is_refused(client: Any, prepared: dict) -> None:
    r = call(client, "prepare", prepared, txn_id=prepared["txn_id"] + 1)

    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")


def test_prepare_without_an_open_transaction_is_refused(client: Any) -> None:
    p = init_producer(client, TID)

    r = call(client, "prepare", p)

    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")
    assert state(client) == "Empty"


def test_keep_prepared_txn_needs_a_transactional_id(client: Any) -> None:
    r = client.post("/v1/producers", json={"keep_prepared_txn": True})

    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")


def test_a_prepared_transaction_past_the_maximum_timeout_is_open_but_not_hanging(client: Any, prepared: dict,
                                                                                  clock: Any, settings: Any) -> None:
    # Hanging is what the coordinator should have ended; a Prepared transaction is the
    # application's to decide, as the hanging parameter's description says.
    clock.advance(settings.max_transaction_timeout_ms + 1)

    hanging = client.get("/v1/transactions", params={"hanging": True}).json()["transactions"]
    old = client.get("/v1/transactions", params={"min_age_ms": settings.max_transaction_timeout_ms}).json()

    assert hanging == []
    assert [t["transactional_id"] for t in old["transactions"]] == [TID]


def test_operators_list_prepared_transactions_marked_as_awaiting_their_application(client: Any,
                                                                                  prepared: dict) -> None:
    create_topic(client, "other")
    other = init_producer(client, "other-app")
    begin(client, "other-app", other)

    listed = client.get("/v1/transactions", params={"min_age_ms": 0}).json()["transactions"]

    assert sorted((t["transactional_id"], t["state"], t["awaits_application_decision"]) for t in listed) == [
        ("orders-app", "Prepared", True), ("other-app", "Ongoing", False)]


def test_an_operators_abort_refuses_a_prepared_transaction_and_changes_nothing(client: Any, prepared: dict) -> None:
    r = client.post(f"/v1/admin/transactions/{TID}/abort")

    assert (r.status_code, r.json()["error_code"]) == (409, "TRANSACTION_PREPARED")
    assert "force_prepared" in r.json()["message"]
    described = client.get(f"/v1/transactions/{TID}").json()
    assert (described["state"], described["producer_epoch"]) == ("Prepared", prepared["producer_epoch"])
    assert call(client, "commit", prepared, txn_id=prepared["txn_id"]).json()["state"] == "CompleteCommit"


def test_an_operators_abort_forced_aborts_a_prepared_transaction(client: Any, prepared: dict) -> None:
    r = client.post(f"/v1/admin/transactions/{TID}/abort", params={"force_prepared": True})

    assert (r.status_code, r.json()["state"]) == (200, "CompleteAbort")
    fenced = call(client, "commit", prepared, txn_id=prepared["txn_id"])
    assert fenced.json()["error_code"] == "PRODUCER_FENCED"


def test_an_operators_abort_naming_another_txn_id_than_the_current_one_is_refused_and_changes_nothing(
        client: Any, prepared: dict) -> None:
    # The operator confirmed the abort of an earlier transaction of this id (as the console names
    # it); the one Prepared now was never shown to them.
    r = client.post(f"/v1/admin/transactions/{TID}/abort",
                    params={"force_prepared": True, "txn_id": prepared["txn_id"] - 1})

    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")
    described = client.get(f"/v1/transactions/{TID}").json()
    assert (described["state"], described["txn_id"]) == ("Prepared", prepared["txn_id"])
    r = client.post(f"/v1/admin/transactions/{TID}/abort",
                    params={"force_prepared": True, "txn_id": prepared["txn_id"]})
    assert (r.status_code, r.json()["state"]) == (200, "CompleteAbort")


def test_a_prepared_transaction_of_an_exhausted_epoch_is_kept_under_a_new_producer_id(
    client: Any, prepared: dict, db_url: str,
) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    with engine.begin() as conn:  # 32766: the last epoch a producer id gives its producer
        conn.execute(text("UPDATE producers SET producer_epoch = 32766 WHERE producer_id = :p"),
                     {"p": prepared["producer_id"]})
        conn.execute(text("UPDATE transactions SET producer_epoch = 32766"))
    engine.dispose()

    new = init_producer(client, TID, keep_prepared_txn=True)

    assert (new["producer_id"], new["producer_epoch"]) == (prepared["producer_id"] + 1, 0)
    assert (new["prepared_txn_id"], state(client)) == (prepared["txn_id"], "Prepared")
    r = call(client, "commit", new, txn_id=new["prepared_txn_id"])
    assert (r.status_code, r.json()["state"]) == (200, "CompleteCommit"), r.text
    assert values(fetch(client, "orders", 0)) == ["order 1"]
