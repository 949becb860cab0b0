"""A joint commit: a Commit that names other Prepared transactions (KIP-939) commits them in the
same decision, all or none. Parallel writers (the Spark sink's tasks) each prepare their own
transaction; one Commit, with the writer's progress as staged offsets, makes every record of
the batch visible at once. On both databases."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from app.composition import Services
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder
from app.domain.records import RecordToAppend
from app.domain.transaction import PreparedTxnRef
from app.domain.types import IsolationLevel
from app.services.log_service import SendBatch
from app.services.transaction_coordinator import TransactionCoordinator
from app.storage import read, topics
from app.worker.chore import ChoreConfig
from app.worker.coordinator import CoordinatorWorker
from tests.helpers import batch, begin, create_topic, fetch, ident, init_producer, send, values

DRIVER = "sink"


def _prepared_writer(client: Any, tid: str, partition: int, value: str) -> dict:
    """A writer that sent `value` to out/<partition> and prepared: its {transactional_id, txn_id}."""
    p = init_producer(client, tid)
    txn_id = begin(client, tid, p)["txn_id"]
    assert send(client, [batch("out", partition, [value], 0)], p, tid).status_code == 200
    r = client.post(f"/v1/transactions/{tid}/prepare", json={**ident(p), "txn_id": txn_id})
    assert (r.status_code, r.json()["state"]) == (200, "Prepared"), r.text
    return {"transactional_id": tid, "txn_id": txn_id}


@pytest.fixture
def batch_of_two(client: Any) -> dict:
    """Two writers prepared (one record each, in out/0 and out/1) and the driver's transaction
    open with the sink's progress staged as group offsets."""
    create_topic(client, "out", partitions=2)
    writers = [_prepared_writer(client, "sink.0", 0, "a"), _prepared_writer(client, "sink.1", 1, "b")]
    driver = init_producer(client, DRIVER)
    txn_id = begin(client, DRIVER, driver)["txn_id"]
    r = client.post(f"/v1/transactions/{DRIVER}/offsets", json={
        **ident(driver), "group_id": "sink", "offsets": [{"topic": "out", "partition": 0, "offset": 8, "metadata": "batch 7"}]})
    assert r.status_code == 200, r.text
    return {"driver": {**driver, "txn_id": txn_id}, "writers": writers}


def _commit(client: Any, b: dict, prepared: list[dict] | None = None) -> Any:
    d = b["driver"]
    return client.post(f"/v1/transactions/{DRIVER}/commit", json={
        **ident(d), "txn_id": d["txn_id"], "prepared": b["writers"] if prepared is None else prepared})


def _state(client: Any, tid: str) -> str:
    return client.get(f"/v1/transactions/{tid}").json()["state"]


def _visible(client: Any) -> list[list[str]]:
    return [values(fetch(client, "out", p)) for p in (0, 1)]


def test_a_commit_naming_prepared_transactions_commits_them_all_with_its_offsets(client: Any, batch_of_two: dict) -> None:
    r = _commit(client, batch_of_two)

    assert (r.status_code, r.json()["state"]) == (200, "CompleteCommit"), r.text
    assert [_state(client, t) for t in ("sink.0", "sink.1")] == ["CompleteCommit", "CompleteCommit"]
    assert _visible(client) == [["a"], ["b"]]
    offsets = client.get("/v1/groups/sink/offsets").json()["offsets"]
    assert [(o["partition"], o["offset"], o["metadata"]) for o in offsets] == [(0, 8, "batch 7")]


def test_a_named_transaction_that_is_not_prepared_fails_the_commit_and_changes_nothing(client: Any, batch_of_two: dict) -> None:
    p = init_producer(client, "sink.2")
    open_txn = begin(client, "sink.2", p)["txn_id"]
    assert send(client, [batch("out", 0, ["c"], 0)], p, "sink.2").status_code == 200

    r = _commit(client, batch_of_two, [*batch_of_two["writers"], {"transactional_id": "sink.2", "txn_id": open_txn}])

    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")
    assert "'sink.2'" in r.json()["message"] and "Ongoing" in r.json()["message"]
    assert [_state(client, t) for t in (DRIVER, "sink.0", "sink.1", "sink.2")] == ["Ongoing", "Prepared", "Prepared", "Ongoing"]
    assert _visible(client) == [[], []]
    r = client.get("/v1/groups/sink/offsets", params={"require_stable": "false"})
    assert r.json().get("offsets") == [], r.text


def test_a_named_transaction_is_taken_only_with_its_own_txn_id(client: Any, batch_of_two: dict) -> None:
    wrong = [batch_of_two["writers"][0], {**batch_of_two["writers"][1], "txn_id": batch_of_two["writers"][1]["txn_id"] + 1}]

    r = _commit(client, batch_of_two, wrong)

    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")
    assert [_state(client, t) for t in (DRIVER, "sink.0", "sink.1")] == ["Ongoing", "Prepared", "Prepared"]


def test_a_retry_of_a_joint_commit_answers_the_same_and_writes_nothing_more(client: Any, batch_of_two: dict) -> None:
    first = _commit(client, batch_of_two)
    again = _commit(client, batch_of_two)

    assert (again.status_code, again.json()["state"]) == (200, first.json()["state"])
    assert [fetch(client, "out", p, isolation="read_uncommitted")["high_watermark"] for p in (0, 1)] == [2, 2]  # record + 1 marker


def test_a_retry_cannot_add_a_transaction_the_first_commit_did_not_name(client: Any, batch_of_two: dict) -> None:
    assert _commit(client, batch_of_two, batch_of_two["writers"][:1]).status_code == 200

    r = _commit(client, batch_of_two)

    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")
    assert _state(client, "sink.1") == "Prepared"
    assert _visible(client) == [["a"], []]


@pytest.mark.parametrize(("prepared", "why"), [
    ([{"transactional_id": DRIVER, "txn_id": 0}], "itself"),
    ([{"transactional_id": "sink.0", "txn_id": 0}, {"transactional_id": "sink.0", "txn_id": 0}], "twice"),
], ids=["itself", "twice"])
def test_a_commit_that_names_itself_or_one_transaction_twice_is_refused(client: Any, batch_of_two: dict, prepared: list, why: str) -> None:
    r = _commit(client, batch_of_two, prepared)

    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")
    assert why in r.json()["message"]
    assert _state(client, DRIVER) == "Ongoing"


def test_an_abort_names_no_other_transactions(client: Any, batch_of_two: dict) -> None:
    d = batch_of_two["driver"]
    r = client.post(f"/v1/transactions/{DRIVER}/abort", json={**ident(d), "txn_id": d["txn_id"], "prepared": batch_of_two["writers"]})

    # Not a field of Abort's body: refused as any unknown field is.
    assert (r.status_code, r.json()["error_code"]) == (422, "INVALID_REQUEST")
    assert [_state(client, t) for t in (DRIVER, "sink.0", "sink.1")] == ["Ongoing", "Prepared", "Prepared"]


def test_a_joint_commit_left_to_the_worker_is_decided_at_once_and_completed_by_it(services: Services) -> None:
    coordinator = TransactionCoordinator(services.db, services.settings.model_copy(update={"complete_inline": False}), services.clock)
    services.topics.create("out", 2)
    refs = [_prepare_through_services(services, coordinator, f"sink.{p}", p, [f"v{p}"]) for p in (0, 1)]
    driver = coordinator.init_producer_id(transactional_id=DRIVER, transaction_timeout_ms=None)
    coordinator.begin(DRIVER, driver.producer_id, driver.producer_epoch)

    view = coordinator.end_transaction(DRIVER, driver.producer_id, driver.producer_epoch, commit=True, prepared=refs)

    assert view.meta.state.value == "PrepareCommit"
    assert [coordinator.listing.describe(r.transactional_id).meta.state.value for r in refs] == ["PrepareCommit"] * 2
    counts = CoordinatorWorker(coordinator, services.clock, ChoreConfig(interval_ms=50)).run_once(services.clock())
    assert counts.completed_commits == 3
    assert [_read_committed(services, "out", p) for p in (0, 1)] == [["v0"], ["v1"]]


# --- Under concurrency ----------------------------------------------------------------------------

PARTITIONS = 4
ROUNDS = 30


def _prepare_through_services(services: Services, coordinator: TransactionCoordinator, tid: str,
                              partition: int | list[int], vals: list[str]) -> PreparedTxnRef:
    p = coordinator.init_producer_id(transactional_id=tid, transaction_timeout_ms=None)
    txn = coordinator.begin(tid, p.producer_id, p.producer_epoch).meta.txn_id
    parts = partition if isinstance(partition, list) else [partition]
    services.log.send(
        [SendBatch("out", q, [RecordToAppend(None, json.dumps(v), None, services.clock()) for v in vals], 0) for q in parts],
        producer_id=p.producer_id, producer_epoch=p.producer_epoch, transactional_id=tid,
    )
    coordinator.prepare(tid, p.producer_id, p.producer_epoch)
    assert txn is not None
    return PreparedTxnRef(tid, txn)


def _read_committed(services: Services, topic: str, partition: int, conn: Any = None) -> list[str]:
    def committed(c: Any) -> list[str]:
        t = topics.get_topic(c, topic)
        page = read.fetch(c, topic_id=t.topic_id, partition=partition, offset=0, max_records=100_000,
                         isolation=IsolationLevel.READ_COMMITTED)
        return [json.loads(r.value) for r in page.records]
    if conn is not None:
        return committed(conn)
    with services.db.read() as c:
        return committed(c)


def test_joint_commits_beside_appenders_never_deadlock_and_show_each_batch_whole(services: Services) -> None:
    """Each round, writer transactions in partitions 3, 2, 1, 0 (named in that order, so that
    completing them one after another would lock the partitions downwards) are committed by
    one joint commit, while a plain producer appends to every partition upwards in one Send and
    a reader takes snapshots. No deadlock, no error; every snapshot shows each round in all
    four partitions or in none."""
    coordinator = services.coordinator
    services.topics.create("out", PARTITIONS)
    done = threading.Event()
    errors: list[BaseException] = []
    torn: list[str] = []

    def appender() -> None:
        try:
            while not done.is_set():
                services.log.send([SendBatch("out", q, [RecordToAppend(None, json.dumps("plain"), None, services.clock())], None)
                                   for q in range(PARTITIONS)], producer_id=None, producer_epoch=None, transactional_id=None)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    def reader() -> None:
        try:
            while not done.is_set():
                with services.db.read() as conn:
                    seen = [{v for v in _read_committed(services, "out", q, conn) if v != "plain"} for q in range(PARTITIONS)]
                if any(s != seen[0] for s in seen):
                    torn.append(f"rounds per partition: {[sorted(s) for s in seen]}")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=appender), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    try:
        for n in range(ROUNDS):
            refs = [_prepare_through_services(services, coordinator, f"w{q}", q, [f"round {n}"])
                    for q in reversed(range(PARTITIONS))]
            d = coordinator.init_producer_id(transactional_id=DRIVER, transaction_timeout_ms=None)
            coordinator.begin(DRIVER, d.producer_id, d.producer_epoch)
            coordinator.add_offsets(DRIVER, d.producer_id, d.producer_epoch, "sink",
                                    [OffsetToStage("out", 0, n + 1, f"batch {n}", NO_LEADER_EPOCH, ReadOrder.COMMIT)])
            coordinator.end_transaction(DRIVER, d.producer_id, d.producer_epoch, commit=True, prepared=refs)
    finally:
        done.set()
        for t in threads:
            t.join(timeout=60)

    assert errors == [] and torn == []
    assert [sorted({v for v in _read_committed(services, "out", q) if v != "plain"}) for q in range(PARTITIONS)] == \
        [sorted(f"round {n}" for n in range(ROUNDS))] * PARTITIONS


def test_a_commit_naming_more_prepared_transactions_than_max_joint_commit_is_refused_and_writes_nothing(
        services: Services, db_url: str) -> None:
    # The service's own bound, for every caller: the HTTP schema states it, the in-database
    # and Python callers reach the service without it.
    from app.domain.errors import InvalidRequest
    from app.domain.transaction import MAX_JOINT_COMMIT
    from tests.fuzz.stored import StoredTables, diff

    coordinator = services.coordinator
    driver = coordinator.init_producer_id(transactional_id=DRIVER, transaction_timeout_ms=None)
    coordinator.begin(DRIVER, driver.producer_id, driver.producer_epoch)
    refs = [PreparedTxnRef(f"sink.{i}", 0) for i in range(MAX_JOINT_COMMIT + 1)]
    stored = StoredTables(db_url)
    try:
        before = stored.snapshot()
        with pytest.raises(InvalidRequest) as refused:
            coordinator.end_transaction(DRIVER, driver.producer_id, driver.producer_epoch, commit=True, prepared=refs)
        assert refused.value.error_code == "INVALID_REQUEST"
        assert f"at most {MAX_JOINT_COMMIT:,} other prepared transactions" in refused.value.message
        assert diff(before, stored.snapshot()) == []
    finally:
        stored.dispose()
