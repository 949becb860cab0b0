"""GET /v1/transactions?min_age_ms=… and each transaction's age_ms share one meaning of open:
Ongoing, Prepared, or decided and still completing (its records hold back the last stable
offset until its markers are written). Completion is left to a coordinator worker here (none
runs), so a decided transaction stays PrepareCommit or PrepareAbort. On both databases."""

from __future__ import annotations

import pytest

from app.domain.errors import InvalidTxnState
from app.services.transaction_coordinator import TransactionCoordinator
from app.settings import Settings
from app.worker.chore import ChoreConfig
from app.worker.coordinator import CoordinatorWorker
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

OPEN_STATES = "Ongoing, Prepared, PrepareCommit, PrepareAbort"  # PrepareEpochFence is never stored


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(database_url=db_url, run_coordinator=False, auto_migrate=False, console_lag_interval_ms=0,
                    complete_inline=False)


def _listed(client, **params) -> list[tuple[str, str, int | None]]:  # type: ignore[no-untyped-def]
    r = client.get("/v1/transactions", params=params)
    assert r.status_code == 200, r.text
    return [(t["transactional_id"], t["state"], t["age_ms"]) for t in r.json()["transactions"]]


@pytest.mark.parametrize(("end", "state"), [("commit", "PrepareCommit"), ("abort", "PrepareAbort")])
def test_a_decided_transaction_still_completing_is_open_with_its_age(client, clock, end: str, state: str) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "A")
    begin(client, "A", p)
    send(client, [batch("t", 0, ["a"], 0)], p, "A")
    clock.advance(1_000)
    r = client.post(f"/v1/transactions/A/{end}", json=ident(p))
    assert (r.status_code, r.json()["state"], r.json()["age_ms"]) == (200, state, 1_000)
    clock.advance(4_000)

    assert _listed(client, min_age_ms=5_000) == [("A", state, 5_000)]
    assert _listed(client, state=state, min_age_ms=5_000) == [("A", state, 5_000)]
    assert _listed(client, min_age_ms=5_001) == []
    # It holds the partition's last stable offset, as an open transaction does.
    assert client.get("/v1/topics/t").json()["partitions"][0]["last_stable_offset"] == 0


def test_a_completed_transaction_has_no_age_and_is_not_listed_by_age(client, clock, services) -> None:  # type: ignore[no-untyped-def]
    p = init_producer(client, "A")
    begin(client, "A", p)
    assert client.post("/v1/transactions/A/commit", json=ident(p)).status_code == 200
    assert CoordinatorWorker(services.coordinator, clock, ChoreConfig(interval_ms=50)).run_once().completed_commits == 1
    clock.advance(5_000)

    assert _listed(client, state="CompleteCommit") == [("A", "CompleteCommit", None)]
    assert _listed(client, min_age_ms=0) == []


@pytest.mark.parametrize("ended", ["Empty", "CompleteCommit", "CompleteAbort", "Dead"])
def test_min_age_with_a_state_in_which_none_is_open_is_refused(client, ended: str) -> None:  # type: ignore[no-untyped-def]
    r = client.get("/v1/transactions", params={"state": ended, "min_age_ms": 0})

    assert (r.status_code, r.json()["error_code"], r.json()["message"]) == (
        400, "INVALID_REQUEST",
        f"min_age_ms lists open transactions only (states {OPEN_STATES}); in state {ended} no transaction is "
        "open: list it without min_age_ms")


def test_min_age_with_open_and_ended_states_names_the_ended_ones(client) -> None:  # type: ignore[no-untyped-def]
    r = client.get("/v1/transactions", params={"state": ["Ongoing", "Empty", "CompleteAbort"], "min_age_ms": 0})

    assert (r.status_code, r.json()["message"]) == (
        400, f"min_age_ms lists open transactions only (states {OPEN_STATES}); in state Empty, CompleteAbort no "
             "transaction is open: list them without min_age_ms")


def test_ended_states_without_min_age_are_listed(client) -> None:  # type: ignore[no-untyped-def]
    init_producer(client, "idle")

    assert _listed(client, state="Empty") == [("idle", "Empty", None)]


@pytest.mark.parametrize("end", ["commit", "abort"])
@pytest.mark.parametrize("entry", ["add_partitions", "begin_or_join"])
def test_a_kafka_add_to_an_id_whose_last_transaction_is_completing_completes_it_and_begins(  # type: ignore[no-untyped-def]
        client, services, end: str, entry: str) -> None:
    """Kafka's version 1 AddPartitionsToTxn (AddOffsetsToTxn: begin_or_join) after a Commit or
    Abort left to the worker: the add completes that transaction inline and begins the next
    one, as a Begin does, rather than answer CONCURRENT_TRANSACTIONS until the worker's pass."""
    create_topic(client, "t", 1)
    p = init_producer(client, "A")
    begin(client, "A", p)
    send(client, [batch("t", 0, ["a"], 0)], p, "A")
    assert client.post(f"/v1/transactions/A/{end}", json=ident(p)).status_code == 200
    first = client.get("/v1/transactions/A").json()["txn_id"]
    coordinator = TransactionCoordinator(services.db, services.settings.model_copy(update={"complete_inline": True}),
                                         services.clock)
    if entry == "add_partitions":
        assert coordinator.add_partitions("A", p["producer_id"], p["producer_epoch"], [("t", 0)]) == {("t", 0): None}
    else:
        coordinator.begin_or_join("A", p["producer_id"], p["producer_epoch"])
    described = client.get("/v1/transactions/A").json()
    assert (described["state"], described["txn_id"] > first) == ("Ongoing", True)
    # The completed transaction's records are committed or aborted, as decided.
    assert client.get("/v1/topics/t").json()["partitions"][0]["last_stable_offset"] == 2


@pytest.mark.parametrize(("then", "joined"), [(None, True), ("prepare", False)], ids=["still Ongoing", "Prepared"])
def test_a_kafka_add_that_loses_the_race_to_begin_joins_what_the_winner_began_or_is_refused(  # type: ignore[no-untyped-def]
        client, services, monkeypatch, then: str | None, joined: bool) -> None:
    """begin_or_join read an idle id, and another request of the producer began its transaction
    before this one's Begin (refused: INVALID_TXN_STATE): the add joins the Ongoing transaction
    the other began, or, if that one is no longer Ongoing (Prepared here), is refused."""
    create_topic(client, "t", 1)
    p = init_producer(client, "A")
    coordinator = TransactionCoordinator(services.db, services.settings, services.clock)
    real_begin = coordinator.begin

    def raced(*args, **kwargs):  # type: ignore[no-untyped-def]
        real_begin(*args, **kwargs)  # the other request's Begin, first
        if then == "prepare":
            assert client.post("/v1/transactions/A/prepare", json=ident(p)).status_code == 200
        return real_begin(*args, **kwargs)  # this one's, refused

    monkeypatch.setattr(coordinator, "begin", raced)
    if joined:
        view = coordinator.begin_or_join("A", p["producer_id"], p["producer_epoch"])
        assert (view.meta.state.value, client.get("/v1/transactions/A").json()["state"]) == ("Ongoing", "Ongoing")
    else:
        with pytest.raises(InvalidTxnState, match="Prepared"):
            coordinator.begin_or_join("A", p["producer_id"], p["producer_epoch"])
