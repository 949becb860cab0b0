"""Transaction protocol version 2 over HTTP (docs/GUARANTEES.md#fencing): the first transactional
Send or AddOffsets after InitProducerId, Commit or Abort begins the transaction; every Commit
and Abort bumps the epoch, and a Send with the previous epoch never joins the next transaction.
On SQLite and PostgreSQL."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import event, select, update

from app.domain.records import RecordToAppend, SendBatch
from app.domain.types import IsolationLevel, TransactionVersion
from app.services.transaction_coordinator import TransactionCoordinator
from app.storage.tables import producers, record_batches, records, transaction_partitions, transactions
from tests.helpers import batch, begin, create_topic, fetch, ident, init_producer, records_with_batches, send, values

# Each test's own database, as new, and one app for the module's tests: an app per test was
# a large part of a test's time here.
pytestmark = pytest.mark.shared_app


TID = "v2"


@pytest.fixture
def topic(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "out", 2)


def _init(client, tid: str = TID, **extra) -> dict:  # type: ignore[no-untyped-def]
    p = init_producer(client, tid, transaction_version=2, **extra)
    assert p["transaction_version"] == 2
    return p


def _end(client, producer: dict, action: str = "commit", tid: str = TID, **extra):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/transactions/{tid}/{action}", json={**ident(producer), **extra})


def _ok(r) -> dict:  # type: ignore[no-untyped-def]
    assert r.status_code == 200, r.text
    return r.json()


def _describe(client, tid: str = TID) -> dict:  # type: ignore[no-untyped-def]
    return _ok(client.get(f"/v1/transactions/{tid}"))


def _error(r, status: int, code: str) -> None:  # type: ignore[no-untyped-def]
    assert r.status_code == status, r.text
    assert r.json()["error_code"] == code


def _all(client, isolation: str = "read_committed") -> list:  # type: ignore[no-untyped-def]
    return [v for p in (0, 1) for v in values(fetch(client, "out", p, isolation=isolation))]


def _markers(database) -> list[tuple[int, int, int, int]]:  # type: ignore[no-untyped-def]
    """Every control marker: (partition, offset, producer_id, producer_epoch)."""
    with database.read() as conn:
        return [tuple(r) for r in conn.execute(
            select(records.c.partition, records.c.offset, record_batches.c.producer_id,
                   record_batches.c.producer_epoch)
            .select_from(records_with_batches())
            .where(records.c.control_type.is_not(None)).order_by(records.c.partition, records.c.offset))]


def test_a_send_to_an_idle_transactional_id_begins_its_transaction(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)

    answer = _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))

    described = _describe(client)
    assert described["state"] == "Ongoing"
    assert answer["txn_id"] == described["txn_id"] is not None
    assert described["transaction_version"] == 2
    assert [(x["topic"], x["partition"]) for x in described["partitions"]] == [("out", 0)]
    assert _all(client) == []


def test_a_second_send_joins_the_transaction_the_first_began(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    first = _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))
    second = _ok(send(client, [batch("out", 1, ["b"], 0)], p, TID))
    assert first["txn_id"] == second["txn_id"]
    _ok(_end(client, p))
    assert _all(client) == ["a", "b"]


def test_a_retried_first_send_to_a_partition_adds_it_once_at_the_first_attempts_offset(client, topic) -> None:  # type: ignore[no-untyped-def]
    """The first batch of a transaction in a partition adds the partition (on PostgreSQL in the
    statement that takes its offsets); its retry is a duplicate, which adds nothing."""
    p = _init(client)
    _ok(send(client, [batch("out", 1, ["x"], 0)], p, TID))
    p2 = {**p, **ident(_ok(_end(client, p)))}
    _ok(send(client, [batch("out", 0, ["a"], 0)], p2, TID))

    retried = _ok(send(client, [batch("out", 1, ["b", "c"], 0)], p2, TID))
    again = _ok(send(client, [batch("out", 1, ["b", "c"], 0)], p2, TID))

    assert [(b["partition"], b["base_offset"], b["duplicate"]) for b in retried["results"]] == [(1, 2, False)]
    assert [(b["partition"], b["base_offset"], b["duplicate"]) for b in again["results"]] == [(1, 2, True)]
    assert [(x["partition"], x["first_offset"]) for x in _describe(client)["partitions"]] == [(0, 0), (1, 2)]
    _ok(_end(client, p2))
    assert _all(client) == ["a", "x", "b", "c"]


def test_begin_is_still_accepted(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    txn = begin(client, TID, p)
    assert _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))["txn_id"] == txn["txn_id"]


@pytest.mark.parametrize("action", ["commit", "abort"])
def test_commit_and_abort_answer_the_next_epoch(client, topic, action: str) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))

    ended = _ok(_end(client, p, action))

    assert ended["state"] == ("CompleteCommit" if action == "commit" else "CompleteAbort")
    assert (ended["producer_id"], ended["producer_epoch"]) == (p["producer_id"], p["producer_epoch"] + 1)
    assert _all(client) == (["a"] if action == "commit" else [])


def test_the_next_transaction_runs_under_the_new_epoch_with_sequences_from_zero(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a", "b"], 0)], p, TID))
    p2 = {**p, **ident(_ok(_end(client, p)))}

    # The old numbering goes on no more: a new epoch starts at sequence 0.
    _error(send(client, [batch("out", 0, ["c"], 2)], p2, TID), 409, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    _ok(send(client, [batch("out", 0, ["c"], 0)], p2, TID))
    _ok(_end(client, p2))

    assert _all(client) == ["a", "b", "c"]


def test_a_send_with_the_previous_epoch_is_refused_and_never_joins_the_next_transaction(client, topic) -> None:  # type: ignore[no-untyped-def]
    """The delayed Send of a finished transaction: it arrives before the next transaction
    began, and again after, and neither time is any of it written."""
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["first"], 0)], p, TID))
    p2 = {**p, **ident(_ok(_end(client, p)))}

    delayed = [batch("out", 1, ["late"], 1)]
    _error(send(client, delayed, p, TID), 409, "INVALID_PRODUCER_EPOCH")
    assert _describe(client)["state"] == "CompleteCommit"  # it began nothing

    _ok(send(client, [batch("out", 0, ["second"], 0)], p2, TID))
    _error(send(client, delayed, p, TID), 409, "INVALID_PRODUCER_EPOCH")
    assert [x["partition"] for x in _describe(client)["partitions"]] == [0]
    _ok(_end(client, p2))

    assert _all(client) == ["first", "second"]
    assert "late" not in _all(client, "read_uncommitted")


def test_a_retried_commit_is_answered_again_until_the_next_transaction_begins(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))
    first = _ok(_end(client, p))

    again = _ok(_end(client, p))
    assert (again["state"], again["producer_epoch"], again["txn_id"]) == (
        "CompleteCommit", first["producer_epoch"], first["txn_id"])
    # The same epoch cannot abort what it committed.
    _error(_end(client, p, "abort"), 409, "INVALID_PRODUCER_EPOCH")

    p2 = {**p, **ident(first)}
    _ok(send(client, [batch("out", 0, ["b"], 0)], p2, TID))
    _error(_end(client, p), 409, "INVALID_PRODUCER_EPOCH")
    assert _describe(client)["state"] == "Ongoing"  # the retry ended nothing
    assert _all(client) == ["a"]


def _at_epoch(database, p: dict, epoch: int) -> dict:  # type: ignore[no-untyped-def]
    """The producer `p` moved to `epoch`, as many transactions would have moved it."""
    with database.write() as conn:
        conn.execute(update(transactions).where(transactions.c.transactional_id == TID).values(producer_epoch=epoch))
        conn.execute(update(producers).where(producers.c.producer_id == p["producer_id"])
                     .values(producer_epoch=epoch))
    return {**p, "producer_epoch": epoch}


def test_the_epoch_before_the_exhausted_one_is_bumped_under_the_same_producer_id(  # type: ignore[no-untyped-def]
    client, topic, database
) -> None:
    old = _at_epoch(database, _init(client), 32765)
    _ok(send(client, [batch("out", 0, ["a"], 0)], old, TID))

    ended = _ok(_end(client, old))

    assert (ended["producer_id"], ended["producer_epoch"]) == (old["producer_id"], 32766)
    assert _markers(database) == [(0, 1, old["producer_id"], 32766)]


def test_an_exhausted_epoch_gets_a_new_producer_id_and_its_commit_can_still_be_retried(  # type: ignore[no-untyped-def]
    client, topic, database
) -> None:
    p = _init(client)
    old = _at_epoch(database, p, 32766)
    _ok(send(client, [batch("out", 0, ["a"], 0)], old, TID))

    ended = _ok(_end(client, old))

    assert ended["producer_id"] == p["producer_id"] + 1 and ended["producer_epoch"] == 0
    # The marker stays with the producer id its batch was written under, at the epoch kept back
    # from every producer, one above the batch's.
    assert _markers(database) == [(0, 1, p["producer_id"], 32767)]
    again = _ok(_end(client, old))
    assert (again["producer_id"], again["producer_epoch"]) == (ended["producer_id"], 0)
    _error(send(client, [batch("out", 0, ["late"], 1)], old, TID), 409, "INVALID_PRODUCER_EPOCH")
    new = {**p, **ident(ended)}
    _ok(send(client, [batch("out", 1, ["b"], 0)], new, TID))
    last = _ok(_end(client, new))
    assert (last["producer_id"], last["producer_epoch"]) == (ended["producer_id"], 1)
    assert _all(client) == ["a", "b"]


def test_add_offsets_begins_the_transaction_too(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    r = client.post(f"/v1/transactions/{TID}/offsets", json={
        **ident(p), "group_id": "g", "offsets": [{"topic": "out", "partition": 0, "offset": 4}]})
    assert _ok(r)["state"] == "Ongoing"
    _ok(_end(client, p))
    committed = _ok(client.get("/v1/groups/g/offsets"))["offsets"]
    assert [(o["topic"], o["partition"], o["offset"]) for o in committed] == [("out", 0, 4)]


def test_version_1_still_needs_begin_and_keeps_its_epoch(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = init_producer(client, TID)
    assert p["transaction_version"] == 1
    _error(send(client, [batch("out", 0, ["a"], 0)], p, TID), 409, "INVALID_TXN_STATE")
    begin(client, TID, p)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))
    assert _ok(_end(client, p))["producer_epoch"] == p["producer_epoch"]
    assert _all(client) == ["a"]


def test_init_producer_id_switches_the_version(client, topic) -> None:  # type: ignore[no-untyped-def]
    init_producer(client, TID)
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))
    assert _describe(client)["transaction_version"] == 2


def test_an_unknown_version_is_refused(client) -> None:  # type: ignore[no-untyped-def]
    r = client.post("/v1/producers", json={"transactional_id": TID, "transaction_version": 3})
    _error(r, 422, "INVALID_REQUEST")


def test_a_commit_left_to_the_worker_answers_the_new_epoch_and_the_next_send_waits_for_completion(  # type: ignore[no-untyped-def]
    services
) -> None:
    services.topics.create("out", 1)
    coordinator = TransactionCoordinator(
        services.db, services.settings.model_copy(update={"complete_inline": False}), services.clock)
    p = coordinator.init_producer_id(transactional_id=TID, transaction_timeout_ms=None, transaction_version=2)
    record = [RecordToAppend(None, '"a"', None, services.clock())]
    services.log.send([SendBatch("out", 0, record, 0)], producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                      transactional_id=TID)

    decided = coordinator.end_transaction(TID, p.producer_id, p.producer_epoch, commit=True).meta

    assert (decided.state.value, decided.producer_epoch) == ("PrepareCommit", p.producer_epoch + 1)
    from app.domain.errors import ConcurrentTransactions

    with pytest.raises(ConcurrentTransactions):
        services.log.send([SendBatch("out", 0, record, 0)], producer_id=p.producer_id,
                          producer_epoch=decided.producer_epoch, transactional_id=TID)
    coordinator.completion.complete_pending(coordinator.pass_work(coordinator.clock()).prepared)
    results = services.log.send([SendBatch("out", 0, record, 0)], producer_id=p.producer_id,
                                producer_epoch=decided.producer_epoch, transactional_id=TID)
    assert results[0].txn_id is not None and results[0].txn_id != decided.txn_id


def test_concurrent_first_sends_all_join_one_transaction(services) -> None:  # type: ignore[no-untyped-def]
    """Sends of one producer racing to begin its transaction (as a Kafka client's pipelined
    produce requests do): each joins the one transaction the first began, none is refused."""
    services.topics.create("out", 8)
    p = services.coordinator.init_producer_id(transactional_id=TID, transaction_timeout_ms=None,
                                              transaction_version=2)
    results: dict[int, list] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def sender(partition: int) -> None:
        try:
            start.wait()
            results[partition] = services.log.send(
                [SendBatch("out", partition, [RecordToAppend(None, str(partition), None, services.clock())], 0)],
                producer_id=p.producer_id, producer_epoch=p.producer_epoch, transactional_id=TID)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=sender, args=(q,)) for q in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    txn_ids = {r[0].txn_id for r in results.values()}
    view = services.coordinator.listing.describe(TID)
    assert txn_ids == {view.meta.txn_id}
    assert sorted(x.partition for x in view.partitions) == list(range(8))


def test_a_refused_first_send_begins_nothing(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _error(send(client, [batch("out", 0, ["a"], 5)], p, TID), 409, "UNKNOWN_PRODUCER_ID")
    described = _describe(client)
    assert (described["state"], described["txn_id"]) == ("Empty", None)
    assert _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))["txn_id"] is not None


def test_add_offsets_refused_for_a_stale_generation_begins_nothing(client, topic) -> None:  # type: ignore[no-untyped-def]
    member = _ok(client.post("/v1/groups/g/members", json={"topics": ["out"], "session_timeout_ms": 10_000}))
    p = _init(client)
    r = client.post(f"/v1/transactions/{TID}/offsets", json={
        **ident(p), "group_id": "g", "offsets": [{"topic": "out", "partition": 0, "offset": 4}],
        "generation_id": member["generation_id"] + 1, "member_id": member["member_id"]})
    _error(r, 409, "ILLEGAL_GENERATION")
    assert _describe(client)["state"] == "Empty"


def test_a_prepared_transaction_commits_with_the_epoch_it_was_prepared_under_and_answers_the_next(  # type: ignore[no-untyped-def]
    client, topic
) -> None:
    p = _init(client)
    txn_id = _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))["txn_id"]
    prepared = _ok(_end(client, p, "prepare", txn_id=txn_id))
    assert (prepared["state"], prepared["producer_epoch"]) == ("Prepared", p["producer_epoch"])

    committed = _ok(_end(client, p, txn_id=txn_id))

    assert (committed["state"], committed["producer_epoch"]) == ("CompleteCommit", p["producer_epoch"] + 1)
    assert _all(client) == ["a"]


def test_a_new_instance_keeps_a_prepared_transaction_and_its_commit_bumps_the_epoch(client, topic) -> None:  # type: ignore[no-untyped-def]
    old = _init(client)
    txn_id = _ok(send(client, [batch("out", 0, ["a"], 0)], old, TID))["txn_id"]
    _ok(_end(client, old, "prepare", txn_id=txn_id))

    new = _init(client, keep_prepared_txn=True)
    assert (new["prepared_txn_id"], new["producer_epoch"]) == (txn_id, old["producer_epoch"] + 1)
    _error(_end(client, old, txn_id=txn_id), 409, "PRODUCER_FENCED")
    committed = _ok(_end(client, new, txn_id=txn_id))

    assert committed["producer_epoch"] == new["producer_epoch"] + 1
    assert _all(client) == ["a"]


# --- a Commit that carries the transaction's last batches ----------------------------------------


def _commit_with(client, producer: dict, batches: list[dict], tid: str = TID, **extra):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/transactions/{tid}/commit", json={**ident(producer), "batches": batches, **extra})


def test_a_commit_carrying_batches_is_a_whole_transaction_in_one_request(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)

    answer = _ok(_commit_with(client, p, [batch("out", 0, ["a", "b"], 0), batch("out", 1, ["c"], 0)]))

    assert (answer["state"], answer["producer_epoch"]) == ("CompleteCommit", p["producer_epoch"] + 1)
    assert [(r["topic"], r["partition"], r["base_offset"], r["record_count"]) for r in answer["results"]] == [
        ("out", 0, 0, 2), ("out", 1, 0, 1)]
    assert _all(client) == ["a", "b", "c"]


def test_a_commit_carrying_a_whole_transaction_writes_each_marker_after_its_records_and_leaves_no_claims(  # type: ignore[no-untyped-def]
    client, topic, database
) -> None:
    p = _init(client)

    answer = _ok(_commit_with(client, p, [batch("out", 0, ["a", "b"], 0), batch("out", 1, ["c"], 0)]))

    with database.read() as conn:
        stored = conn.execute(select(records.c.partition, records.c.offset, record_batches.c.txn_id,
                                     records.c.control_type)
                              .select_from(records_with_batches())
                              .order_by(records.c.partition, records.c.offset)).all()
        claims = conn.execute(select(transaction_partitions)).all()
    txn = answer["txn_id"]
    assert [tuple(r) for r in stored] == [(0, 0, txn, None), (0, 1, txn, None), (0, 2, txn, "COMMIT"),
                                          (1, 0, txn, None), (1, 1, txn, "COMMIT")]
    assert claims == []
    assert [fetch(client, "out", q)["last_stable_offset"] for q in (0, 1)] == [3, 2]


def test_a_commit_carrying_records_that_copy_must_escape_stores_them_as_sent_with_their_markers(  # type: ignore[no-untyped-def]
    client, topic
) -> None:
    p = _init(client)
    escaped = [{"key": "k\tey", "value": "tab\there", "headers": {"h": "new\nline"}},
               {"key": None, "value": {"back": "sla\\sh"}}]
    _ok(_commit_with(client, p, [{"topic": "out", "partition": 0, "base_sequence": 0, "records": escaped},
                                 batch("out", 1, ["a\r\nb"], 0)]))

    stored = [[(r["offset"], r["key"], r["value"], r.get("headers")) for r in fetch(client, "out", q)["records"]]
              for q in (0, 1)]
    assert stored == [[(0, "k\tey", "tab\there", {"h": "new\nline"}), (1, None, {"back": "sla\\sh"}, None)],
                      [(0, None, "a\r\nb", None)]]
    assert [fetch(client, "out", q)["last_stable_offset"] for q in (0, 1)] == [3, 2]


def test_a_commit_carrying_batches_that_names_an_ended_transaction_is_refused_and_appends_nothing(  # type: ignore[no-untyped-def]
    client, topic
) -> None:
    p = _init(client)
    first = _ok(_commit_with(client, p, [batch("out", 0, ["a"], 0)]))
    now = {**p, **ident(first)}

    r = _commit_with(client, now, [batch("out", 0, ["b"], 0)], txn_id=first["txn_id"])

    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE"), r.text
    assert _all(client, "read_uncommitted") == ["a"]
    assert _describe(client)["state"] == "CompleteCommit"


def test_a_commit_carrying_a_whole_transaction_at_an_exhausted_epoch_gets_a_new_producer_id(  # type: ignore[no-untyped-def]
    client, topic, database
) -> None:
    p = _init(client)
    old = _at_epoch(database, p, 32766)

    ended = _ok(_commit_with(client, old, [batch("out", 0, ["a"], 0)]))

    assert ended["producer_id"] == p["producer_id"] + 1 and ended["producer_epoch"] == 0
    assert _markers(database) == [(0, 1, p["producer_id"], 32767)]
    again = _ok(_commit_with(client, old, [batch("out", 0, ["a"], 0)]))
    assert (again["producer_id"], again["producer_epoch"], again["results"][0]["duplicate"]) == (
        ended["producer_id"], 0, True)
    new = {**p, **ident(ended)}
    _ok(_commit_with(client, new, [batch("out", 0, ["b"], 0)]))
    assert _all(client) == ["a", "b"]


def test_a_commit_carrying_batches_left_to_the_worker_is_decided_then_completed(services) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("out", 1)
    coordinator = TransactionCoordinator(
        services.db, services.settings.model_copy(update={"complete_inline": False}), services.clock)
    p = coordinator.init_producer_id(transactional_id=TID, transaction_timeout_ms=None, transaction_version=2)
    record = [RecordToAppend(None, '"a"', None, services.clock())]

    decided = coordinator.end_transaction(TID, p.producer_id, p.producer_epoch, commit=True,
                                          batches=[SendBatch("out", 0, record, 0)])

    assert decided.meta.state.value == "PrepareCommit"
    assert [(x.partition, x.first_offset) for x in decided.partitions] == [(0, 0)]
    assert coordinator.completion.complete_pending(coordinator.pass_work(coordinator.clock()).prepared) == (1, 0)
    fetched = services.log.fetch("out", 0, offset=0, max_records=10, isolation=IsolationLevel.READ_COMMITTED)[1]
    assert [r.value for r in fetched.records] == ['"a"']


def test_a_commit_carrying_batches_commits_them_with_the_transaction_s_earlier_sends(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))
    _ok(_commit_with(client, p, [batch("out", 0, ["b"], 1)]))
    assert _all(client) == ["a", "b"]


def test_a_commit_carrying_a_batch_in_another_partition_marks_both_partitions_after_their_records(  # type: ignore[no-untyped-def]
    client, topic, database
) -> None:
    # The Commit locks the partitions of its batches and of the transaction's earlier Sends
    # together, in one order, before it appends and writes the markers.
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))
    _ok(_commit_with(client, p, [batch("out", 1, ["b"], 0)]))
    assert _all(client) == ["a", "b"]
    assert _markers(database) == [(0, 1, p["producer_id"], 1), (1, 1, p["producer_id"], 1)]


def test_a_plain_commit_answer_has_no_results(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))
    assert "results" not in _ok(_end(client, p))


def test_a_retried_commit_carrying_batches_appends_nothing(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    first = _ok(_commit_with(client, p, [batch("out", 0, ["a"], 0)]))

    again = _ok(_commit_with(client, p, [batch("out", 0, ["a"], 0)]))

    assert (again["state"], again["producer_epoch"], again["txn_id"]) == (
        "CompleteCommit", first["producer_epoch"], first["txn_id"])
    assert [(r["partition"], r["base_offset"], r["duplicate"]) for r in again["results"]] == [(0, 0, True)]
    assert _all(client, "read_uncommitted") == ["a"]


def test_a_commit_whose_batch_is_refused_changes_nothing(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))

    _error(_commit_with(client, p, [batch("out", 1, ["b"], 0), batch("out", 0, ["c"], 7)]), 409,
           "OUT_OF_ORDER_SEQUENCE_NUMBER")

    described = _describe(client)
    assert (described["state"], described["producer_epoch"]) == ("Ongoing", p["producer_epoch"])
    assert [x["partition"] for x in described["partitions"]] == [0]
    assert _all(client, "read_uncommitted") == ["a"]


def test_a_version_1_commit_cannot_carry_batches(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = init_producer(client, TID)
    begin(client, TID, p)
    _error(_commit_with(client, p, [batch("out", 0, ["a"], 0)]), 400, "INVALID_REQUEST")
    assert _describe(client)["state"] == "Ongoing"


def test_a_joint_commit_cannot_carry_batches(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    r = _commit_with(client, p, [batch("out", 0, ["a"], 0)], prepared=[{"transactional_id": "other", "txn_id": 1}])
    _error(r, 400, "INVALID_REQUEST")


def test_a_retried_commit_carrying_other_batches_is_refused_and_acknowledges_nothing(client, topic) -> None:  # type: ignore[no-untyped-def]
    """Not the same Commit again: batches it never appended must not be answered as written."""
    p = _init(client)
    _ok(_commit_with(client, p, [batch("out", 0, ["a"], 0)]))

    _error(_commit_with(client, p, [batch("out", 0, ["a", "b"], 0)]), 409, "INVALID_TXN_STATE")
    _error(_commit_with(client, p, [batch("out", 1, ["c"], 0)]), 409, "INVALID_TXN_STATE")
    again = _ok(_commit_with(client, p, [batch("out", 0, ["a"], 0)]))

    assert [(r["partition"], r["base_offset"], r["duplicate"]) for r in again["results"]] == [(0, 0, True)]
    assert _all(client, "read_uncommitted") == ["a"]


def test_a_retry_of_a_plain_commit_cannot_carry_batches(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))
    _ok(_end(client, p))
    _error(_commit_with(client, p, [batch("out", 1, ["b"], 0)]), 409, "INVALID_TXN_STATE")
    assert _all(client, "read_uncommitted") == ["a"]


def test_an_abort_with_nothing_open_bumps_the_epoch_so_a_request_still_under_way_is_refused(client, topic) -> None:  # type: ignore[no-untyped-def]
    """The producer gave up on a Commit (or Send) whose answer did not come, and aborted: the
    Abort finds nothing open, because that request has not arrived yet. When it does, it must
    not begin and commit a transaction the producer has given up."""
    p = _init(client)

    aborted = _ok(_end(client, p, "abort"))

    assert (aborted["state"], aborted["producer_epoch"]) == ("Empty", p["producer_epoch"] + 1)
    _error(_commit_with(client, p, [batch("out", 0, ["late"], 0)]), 409, "INVALID_PRODUCER_EPOCH")
    _error(send(client, [batch("out", 0, ["late"], 0)], p, TID), 409, "INVALID_PRODUCER_EPOCH")
    assert _ok(_end(client, p, "abort"))["producer_epoch"] == aborted["producer_epoch"]  # its retry
    assert _all(client, "read_uncommitted") == []
    assert _describe(client)["state"] == "Empty"


def test_a_commit_s_marker_carries_the_epoch_its_commit_bumped_to(client, topic, database) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))
    ended = _ok(_end(client, p))
    assert _markers(database) == [(0, 1, p["producer_id"], p["producer_epoch"] + 1)]
    assert ended["producer_epoch"] == p["producer_epoch"] + 1


def test_an_exhausted_epoch_s_decision_completed_by_the_worker_keeps_its_markers_with_the_old_id(  # type: ignore[no-untyped-def]
    services, database
) -> None:
    services.topics.create("out", 1)
    coordinator = TransactionCoordinator(
        services.db, services.settings.model_copy(update={"complete_inline": False}), services.clock)
    p = coordinator.init_producer_id(transactional_id=TID, transaction_timeout_ms=None, transaction_version=2)
    with database.write() as conn:
        conn.execute(update(transactions).where(transactions.c.transactional_id == TID).values(producer_epoch=32766))
    record = [RecordToAppend(None, '"a"', None, services.clock())]
    services.log.send([SendBatch("out", 0, record, 0)], producer_id=p.producer_id,
                      producer_epoch=32766, transactional_id=TID)

    decided = coordinator.end_transaction(TID, p.producer_id, 32766, commit=True)

    assert (decided.meta.state.value, decided.meta.producer_id, decided.meta.producer_epoch) == (
        "PrepareCommit", p.producer_id + 1, 0)
    assert coordinator.completion.complete_pending(coordinator.pass_work(coordinator.clock()).prepared) == (1, 0)
    assert _markers(database) == [(0, 1, p.producer_id, 32767)]


# --- a request speaking the other version: the switch is written with the request's change ---

@contextmanager
def _transaction_updates(db) -> Iterator[list[str]]:  # type: ignore[no-untyped-def]
    """The UPDATEs of the transactions table run inside the block."""
    seen: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if re.match(r"\s*UPDATE transactions\b", statement):
            seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", count)


@pytest.mark.parametrize("complete_inline", [True, False], ids=["inline", "worker"])
@pytest.mark.parametrize(("stored", "spoken"), [(1, 2), (2, 1)], ids=["1_to_2", "2_to_1"])
def test_a_commit_speaking_the_other_version_writes_the_switch_and_the_decision_in_one_update(  # type: ignore[no-untyped-def]
    services, complete_inline: bool, stored: int, spoken: int
) -> None:
    services.topics.create("out", 1)
    coordinator = TransactionCoordinator(
        services.db, services.settings.model_copy(update={"complete_inline": complete_inline}), services.clock)
    p = coordinator.init_producer_id(transactional_id=TID, transaction_timeout_ms=None, transaction_version=stored)
    coordinator.begin(TID, p.producer_id, p.producer_epoch)
    services.log.send([SendBatch("out", 0, [RecordToAppend(None, '"a"', None, services.clock())], 0)],
                      producer_id=p.producer_id, producer_epoch=p.producer_epoch, transactional_id=TID)

    with _transaction_updates(services.db) as updates:
        ended = coordinator.end_transaction(TID, p.producer_id, p.producer_epoch, commit=True,
                                            transaction_version=TransactionVersion(spoken))

    assert len(updates) == 1
    # Version 2's Commit bumps the epoch, version 1's keeps it: the rules of the version spoken.
    expected = ("CompleteCommit" if complete_inline else "PrepareCommit", spoken,
                p.producer_epoch + (1 if spoken == 2 else 0))
    assert (ended.meta.state.value, ended.meta.transaction_version, ended.meta.producer_epoch) == expected
    now = coordinator.listing.describe(TID).meta
    assert (now.state.value, now.transaction_version, now.producer_epoch) == expected


def test_an_abort_with_nothing_open_speaking_version_2_writes_the_switch_and_its_bump_in_one_update(  # type: ignore[no-untyped-def]
    services,
) -> None:
    p = services.coordinator.init_producer_id(transactional_id=TID, transaction_timeout_ms=None, transaction_version=1)

    with _transaction_updates(services.db) as updates:
        ended = services.coordinator.end_transaction(TID, p.producer_id, p.producer_epoch, commit=False,
                                                     transaction_version=TransactionVersion.V2)

    assert len(updates) == 1
    now = services.coordinator.listing.describe(TID).meta
    assert (ended.meta, now.state.value, now.transaction_version, now.producer_epoch) == (
        now, "Empty", 2, p.producer_epoch + 1)
