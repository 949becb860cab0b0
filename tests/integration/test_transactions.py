"""Transactions through the HTTP API (docs/GUARANTEES.md#atomicity, docs/GUARANTEES.md#commit-order, docs/GUARANTEES.md#fencing, docs/GUARANTEES.md#timeouts, docs/GUARANTEES.md#recovery, docs/GUARANTEES.md#offsets-in-the-transaction), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.worker.chore import ChoreConfig
from app.worker.coordinator import CoordinatorWorker
from tests.helpers import (
    batch,
    begin,
    create_topic,
    fetch,
    ident,
    init_producer,
    read_all,
    send,
    values,
)

# Each test's own database, as new, and one app for the module's tests: an app per test was
# a large part of a test's time here.
pytestmark = pytest.mark.shared_app


@pytest.fixture
def worker(services, clock) -> CoordinatorWorker:  # type: ignore[no-untyped-def]
    return CoordinatorWorker(services.coordinator, clock, ChoreConfig(interval_ms=50))


def _end(client, tid: str, producer: dict, action: str, **extra) -> dict:  # type: ignore[no-untyped-def]
    r = client.post(f"/v1/transactions/{tid}/{action}", json={**ident(producer), **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _offsets(client, group: str, **params) -> dict:  # type: ignore[no-untyped-def]
    return client.get(f"/v1/groups/{group}/offsets", params=params)


def _stage_offsets(client, tid: str, producer: dict, group: str, offsets: list[tuple[str, int, int]]):  # type: ignore[no-untyped-def]
    r = client.post(
        f"/v1/transactions/{tid}/offsets",
        json={**ident(producer), "group_id": group,
              "offsets": [{"topic": t, "partition": p, "offset": o} for t, p, o in offsets]},
    )
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def two_topics(client):  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 2)
    create_topic(client, "income", 3)
    create_topic(client, "audit", 2)


def _open_transaction(client) -> dict:  # type: ignore[no-untyped-def]
    """A transaction over income/0, income/2 and audit/1 with offsets for group g."""
    p = init_producer(client, "copier")
    begin(client, "copier", p)
    r = send(client, [batch("income", 0, ["i0a", "i0b"], 0), batch("income", 2, ["i2a"], 0),
                      batch("audit", 1, ["a1"], 0)], p, "copier")
    assert r.status_code == 200, r.text
    _stage_offsets(client, "copier", p, "g", [("orders", 0, 5), ("orders", 1, 7)])
    return p


def test_committed_transaction_is_invisible_until_commit_then_visible_with_its_offsets(client, two_topics):  # type: ignore[no-untyped-def]
    p = _open_transaction(client)
    for topic, partition in [("income", 0), ("income", 2), ("audit", 1)]:
        assert fetch(client, topic, partition)["records"] == []
    assert _offsets(client, "g", require_stable=False).json()["offsets"] == []

    state = _end(client, "copier", p, "commit")

    assert state["state"] == "CompleteCommit"
    assert state["partitions"] == [] and state["pending_offsets"] == []
    assert values(fetch(client, "income", 0)) == ["i0a", "i0b"]
    assert values(fetch(client, "income", 2)) == ["i2a"]
    assert values(fetch(client, "audit", 1)) == ["a1"]
    committed = _offsets(client, "g").json()["offsets"]
    assert [(o["topic"], o["partition"], o["offset"]) for o in committed] == [("orders", 0, 5), ("orders", 1, 7)]


def test_aborted_transaction_is_never_visible_and_leaves_offsets_unchanged(client, two_topics):  # type: ignore[no-untyped-def]
    r = client.post("/v1/groups/g/offsets", json={"offsets": [{"topic": "orders", "partition": 0, "offset": 1}]})
    assert r.status_code == 200
    p = _open_transaction(client)

    state = _end(client, "copier", p, "abort")

    assert state["state"] == "CompleteAbort"
    for topic, partition in [("income", 0), ("income", 2), ("audit", 1)]:
        page = fetch(client, topic, partition)
        assert page["records"] == []
        assert page["next_offset"] == page["high_watermark"]  # readers move past the aborted data
    assert values(fetch(client, "income", 0, isolation="read_uncommitted")) == ["i0a", "i0b"]
    committed = _offsets(client, "g").json()["offsets"]
    assert [(o["topic"], o["partition"], o["offset"]) for o in committed] == [("orders", 0, 1)]


def test_each_partition_gets_one_control_marker_that_takes_an_offset(client, two_topics):  # type: ignore[no-untyped-def]
    p = _open_transaction(client)
    _end(client, "copier", p, "commit")
    ends = {d["partition"]: d for d in client.get("/v1/topics/income").json()["partitions"]}
    assert ends[0]["log_end_offset"] == 3  # two records and the COMMIT marker
    assert ends[1]["log_end_offset"] == 0
    assert ends[2]["log_end_offset"] == 2
    assert all(d["last_stable_offset"] == d["log_end_offset"] for d in ends.values())


def test_last_stable_offset_is_the_first_offset_of_the_open_transaction(client, two_topics):  # type: ignore[no-untyped-def]
    send(client, [batch("income", 0, ["plain"])])
    _open_transaction(client)
    send(client, [batch("income", 0, ["plain2"])])
    part0 = client.get("/v1/topics/income").json()["partitions"][0]
    assert (part0["last_stable_offset"], part0["log_end_offset"]) == (1, 4)
    page = fetch(client, "income", 0)
    assert values(page) == ["plain", "plain2"]
    assert page["last_stable_offset"] == 1


def test_group_offset_fetch_is_unstable_while_offsets_are_pending(client, two_topics):  # type: ignore[no-untyped-def]
    p = _open_transaction(client)
    r = _offsets(client, "g")
    assert r.status_code == 409
    assert r.json()["error_code"] == "UNSTABLE_OFFSET_COMMIT" and r.json()["retriable"] is True
    assert _offsets(client, "other-group").status_code == 200
    _end(client, "copier", p, "commit")
    assert _offsets(client, "g").status_code == 200


def test_seed_000_transactions_are_exposed_in_commit_order(client):  # type: ignore[no-untyped-def]
    """X1 and X2 interleave on p0 and p1 with plain records; X2 commits first."""
    create_topic(client, "t", 2)
    x1, x2 = init_producer(client, "X1"), init_producer(client, "X2")
    begin(client, "X1", x1)
    assert send(client, [batch("t", 0, ["x1-p0-a"], 0), batch("t", 1, ["x1-p1-a"], 0)], x1, "X1").status_code == 200
    begin(client, "X2", x2)
    assert send(client, [batch("t", 0, ["x2-p0-a"], 0), batch("t", 1, ["x2-p1-a"], 0)], x2, "X2").status_code == 200
    assert send(client, [batch("t", 0, ["n-p0"]), batch("t", 1, ["n-p1"])]).status_code == 200
    assert send(client, [batch("t", 0, ["x1-p0-b"], 1), batch("t", 1, ["x1-p1-b"], 1)], x1, "X1").status_code == 200
    assert send(client, [batch("t", 0, ["x2-p0-b"], 1)], x2, "X2").status_code == 200

    _end(client, "X2", x2, "commit")
    _end(client, "X1", x1, "commit")

    # p0 log: 0 x1a, 1 x2a, 2 n, 3 x1b, 4 x2b, 5 COMMIT(X2), 6 COMMIT(X1)
    p0 = fetch(client, "t", 0)
    assert values(p0) == ["n-p0", "x2-p0-a", "x2-p0-b", "x1-p0-a", "x1-p0-b"]
    assert [r["offset"] for r in p0["records"]] == [2, 1, 4, 0, 3]
    assert [r["commit_position"] for r in p0["records"]] == [2, 5, 5, 6, 6]
    assert p0["next_offset"] == 7 == p0["high_watermark"]
    # p1 log: 0 x1a, 1 x2a, 2 n, 3 x1b, 4 COMMIT(X2), 5 COMMIT(X1)
    p1 = fetch(client, "t", 1)
    assert values(p1) == ["n-p1", "x2-p1-a", "x1-p1-a", "x1-p1-b"]
    assert [r["commit_position"] for r in p1["records"]] == [2, 4, 5, 5]
    assert p1["next_offset"] == 6
    # Reading from a position returns the commit points at or after it.
    assert values(fetch(client, "t", 0, offset=3)) == ["x2-p0-a", "x2-p0-b", "x1-p0-a", "x1-p0-b"]
    assert values(fetch(client, "t", 0, offset=6)) == ["x1-p0-a", "x1-p0-b"]
    assert fetch(client, "t", 0, offset=7)["records"] == []
    # read_uncommitted: offset order, no markers.
    ru = fetch(client, "t", 0, isolation="read_uncommitted")
    assert [r["offset"] for r in ru["records"]] == [0, 1, 2, 3, 4]
    assert ru["next_offset"] == 7


def test_a_fetch_never_splits_a_transaction(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    send(client, [batch("t", 0, ["n0"])])
    x = init_producer(client, "X")
    begin(client, "X", x)
    send(client, [batch("t", 0, [f"x{i}" for i in range(5)], 0)], x, "X")
    _end(client, "X", x, "commit")
    send(client, [batch("t", 0, ["n1"])])

    first = fetch(client, "t", 0, max_records=2)
    assert values(first) == ["n0", "x0", "x1", "x2", "x3", "x4"]
    assert first["next_offset"] == 7  # one past the COMMIT marker at offset 6
    second = fetch(client, "t", 0, offset=first["next_offset"], max_records=2)
    assert values(second) == ["n1"] and second["next_offset"] == 8


def test_read_committed_pages_through_a_long_log_without_loss(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    expected = []
    for round_ in range(5):
        plain = [f"n{round_}-{i}" for i in range(7)]
        send(client, [batch("t", 0, plain)])
        expected += plain
        x = init_producer(client, f"X{round_}")
        begin(client, f"X{round_}", x)
        txn = [f"x{round_}-{i}" for i in range(4)]
        send(client, [batch("t", 0, txn, 0)], x, f"X{round_}")
        commit = round_ % 2 == 0
        _end(client, f"X{round_}", x, "commit" if commit else "abort")
        if commit:
            expected += txn
    got = [r["value"] for r in read_all(client, "t", 0)]
    assert got == expected
    paged, offset = [], 0
    while True:
        page = fetch(client, "t", 0, offset=offset, max_records=3)
        paged += values(page)
        if page["next_offset"] >= page["high_watermark"]:
            break
        offset = page["next_offset"]
    assert paged == expected


def test_init_producer_id_fences_the_previous_instance_and_aborts_its_transaction(client, two_topics):  # type: ignore[no-untyped-def]
    old = _open_transaction(client)
    new = init_producer(client, "copier")
    assert new["producer_id"] == old["producer_id"]
    assert new["producer_epoch"] > old["producer_epoch"]

    described = client.get("/v1/transactions/copier").json()
    assert described["state"] == "Empty" and described["producer_epoch"] == new["producer_epoch"]
    assert fetch(client, "income", 0)["records"] == []
    assert values(fetch(client, "income", 0, isolation="read_uncommitted")) == ["i0a", "i0b"]
    assert _offsets(client, "g").json()["offsets"] == []

    r = send(client, [batch("income", 0, ["zombie"], 2)], old, "copier")
    assert (r.status_code, r.json()["error_code"]) == (409, "PRODUCER_FENCED")
    r = client.post("/v1/transactions/copier/commit", json=ident(old))
    assert (r.status_code, r.json()["error_code"]) == (409, "PRODUCER_FENCED")
    r = client.post("/v1/transactions/copier/begin", json=ident(old))
    assert (r.status_code, r.json()["error_code"]) == (409, "PRODUCER_FENCED")
    assert values(fetch(client, "income", 0, isolation="read_uncommitted")) == ["i0a", "i0b"]

    begin(client, "copier", new)
    assert send(client, [batch("income", 0, ["fresh"], 0)], new, "copier").status_code == 200
    _end(client, "copier", new, "commit")
    assert values(fetch(client, "income", 0)) == ["fresh"]


def test_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(client, clock, worker):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "slow", transaction_timeout_ms=1000)
    begin(client, "slow", p)
    send(client, [batch("t", 0, ["late"], 0)], p, "slow")

    clock.advance(1000)
    assert worker.run_once().timed_out == 0  # exactly at the timeout it is still open
    clock.advance(1)
    result = worker.run_once()

    assert result.timed_out == 1
    described = client.get("/v1/transactions/slow").json()
    assert described["state"] == "CompleteAbort"
    assert described["producer_epoch"] == p["producer_epoch"] + 1
    r = client.post("/v1/transactions/slow/commit", json=ident(p))
    assert (r.status_code, r.json()["error_code"]) == (409, "PRODUCER_FENCED")
    assert fetch(client, "t", 0)["records"] == []
    assert client.get("/v1/topics/t").json()["partitions"][0]["log_end_offset"] == 2


def test_commit_retry_answers_the_same_and_writes_no_second_marker(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    txn = begin(client, "X", p)
    send(client, [batch("t", 0, ["a"], 0)], p, "X")
    first = _end(client, "X", p, "commit", txn_id=txn["txn_id"])
    again = _end(client, "X", p, "commit", txn_id=txn["txn_id"])
    assert first["state"] == again["state"] == "CompleteCommit"
    assert client.get("/v1/topics/t").json()["partitions"][0]["log_end_offset"] == 2


def test_a_delayed_commit_naming_an_earlier_txn_id_is_refused(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    first = begin(client, "X", p)
    _end(client, "X", p, "commit", txn_id=first["txn_id"])
    second = begin(client, "X", p)
    assert second["txn_id"] != first["txn_id"]
    r = client.post("/v1/transactions/X/commit", json={**ident(p), "txn_id": first["txn_id"]})
    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")
    assert client.get("/v1/transactions/X").json()["state"] == "Ongoing"


def test_commit_after_abort_is_an_invalid_state(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    begin(client, "X", p)
    _end(client, "X", p, "abort")
    r = client.post("/v1/transactions/X/commit", json=ident(p))
    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")


def test_begin_twice_is_an_invalid_state(client):  # type: ignore[no-untyped-def]
    p = init_producer(client, "X")
    begin(client, "X", p)
    r = client.post("/v1/transactions/X/begin", json=ident(p))
    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")


def test_a_refused_begin_spends_no_txn_id(client):  # type: ignore[no-untyped-def]
    p = init_producer(client, "X")
    first = begin(client, "X", p)["txn_id"]
    assert client.post("/v1/transactions/X/begin", json=ident(p)).status_code == 409
    _end(client, "X", p, "commit")
    assert begin(client, "X", p)["txn_id"] == first + 1


def test_empty_transaction_commits_without_markers(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    begin(client, "X", p)
    assert _end(client, "X", p, "commit")["state"] == "CompleteCommit"
    assert client.get("/v1/topics/t").json()["partitions"][0]["log_end_offset"] == 0


@pytest.fixture
def deferred_client(settings, clock):  # type: ignore[no-untyped-def]
    """A service whose Commit only records PrepareCommit and leaves the markers to the worker."""
    deferred = settings.model_copy(update={"complete_inline": False})
    with TestClient(create_app(deferred, clock)) as c:
        yield c


def test_hanging_lists_a_commit_left_uncompleted_past_the_maximum_timeout(deferred_client, clock, settings):  # type: ignore[no-untyped-def]
    c = deferred_client
    create_topic(c, "t", 1)
    p = init_producer(c, "X")
    begin(c, "X", p)
    send(c, [batch("t", 0, ["a"], 0)], p, "X")
    assert _end(c, "X", p, "commit")["state"] == "PrepareCommit"
    assert c.get("/v1/transactions", params={"hanging": True}).json()["transactions"] == []
    assert "outbox_transactions_hanging 0.0" in c.get("/metrics").text
    clock.advance(settings.max_transaction_timeout_ms + 1)  # no worker ran
    hanging = c.get("/v1/transactions", params={"hanging": True}).json()["transactions"]
    assert [(t["transactional_id"], t["state"]) for t in hanging] == [("X", "PrepareCommit")]
    assert "outbox_transactions_hanging 1.0" in c.get("/metrics").text


def test_commit_is_durable_at_prepare_commit_and_the_worker_completes_it(deferred_client, worker):  # type: ignore[no-untyped-def]
    c = deferred_client
    create_topic(c, "t", 2)
    p = init_producer(c, "X")
    begin(c, "X", p)
    send(c, [batch("t", 0, ["a"], 0), batch("t", 1, ["b"], 0)], p, "X")
    assert _end(c, "X", p, "commit")["state"] == "PrepareCommit"
    assert fetch(c, "t", 0)["records"] == []

    assert worker.run_once().completed_commits == 1
    assert worker.run_once().completed_commits == 0  # nothing left: no second marker
    assert values(fetch(c, "t", 0)) == ["a"] and values(fetch(c, "t", 1)) == ["b"]
    assert [d["log_end_offset"] for d in c.get("/v1/topics/t").json()["partitions"]] == [2, 2]


def test_init_producer_id_answers_concurrent_transactions_while_the_previous_one_completes(deferred_client, worker):  # type: ignore[no-untyped-def]
    c = deferred_client
    create_topic(c, "t", 1)
    p = init_producer(c, "X")
    begin(c, "X", p)
    send(c, [batch("t", 0, ["a"], 0)], p, "X")
    _end(c, "X", p, "commit")

    r = c.post("/v1/producers", json={"transactional_id": "X"})
    assert r.status_code == 409
    assert r.json()["error_code"] == "CONCURRENT_TRANSACTIONS" and r.json()["retriable"] is True
    r = c.post("/v1/transactions/X/begin", json=ident(p))
    assert r.json()["error_code"] == "CONCURRENT_TRANSACTIONS"

    worker.run_once()
    again = init_producer(c, "X")
    assert again["producer_epoch"] == p["producer_epoch"] + 1
    assert values(fetch(c, "t", 0)) == ["a"]


def test_fencing_an_open_transaction_with_deferred_completion_aborts_it_via_the_worker(deferred_client, worker):  # type: ignore[no-untyped-def]
    c = deferred_client
    create_topic(c, "t", 1)
    p = init_producer(c, "X")
    begin(c, "X", p)
    send(c, [batch("t", 0, ["a"], 0)], p, "X")

    r = c.post("/v1/producers", json={"transactional_id": "X"})
    assert r.json()["error_code"] == "CONCURRENT_TRANSACTIONS"
    assert c.get("/v1/transactions/X").json()["state"] == "PrepareAbort"
    r = send(c, [batch("t", 0, ["zombie"], 1)], p, "X")
    assert r.json()["error_code"] == "PRODUCER_FENCED"

    assert worker.run_once().completed_aborts == 1
    new = init_producer(c, "X")
    assert new["producer_epoch"] == p["producer_epoch"] + 2
    assert values(fetch(c, "t", 0, isolation="read_uncommitted")) == ["a"]
    assert fetch(c, "t", 0)["records"] == []
