"""Durability "commit" (docs/GUARANTEES.md#durability-commit): a version 2 producer that opts in
at InitProducerId has its transactional Sends answered before they are durable, and its Commit
(durable) makes them so. The Commit says how many records the producer was acknowledged in the
transaction; one that differs from what the transaction holds (a database crash lost the last
Sends) aborts the transaction and answers TRANSACTION_INCOMPLETE. On SQLite and PostgreSQL,
except where a test says PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from sqlalchemy import delete, select

from app.client.errors import AbortableError
from app.client.producer import Producer
from app.domain.errors import TransactionIncomplete
from app.domain.records import RecordToAppend, SendBatch
from app.domain.types import Durability, IsolationLevel, TransactionState, TransactionVersion
from app.services.transaction_coordinator import TransactionCoordinator
from app.services import log_service, transaction_coordinator
from app.services.long_poll import LongPoll
from app.services.spool import SpoolBytes
from app.services.waiting import WaitingRequests
from app.storage.changes import LogChanges
from app.storage.tables import record_batches, records
from tests.helpers import batch, create_topic, fetch, ident, init_producer, send, statements_run, values

# Each test's own database, as new, and one app for the module's tests: an app per test was
# a large part of a test's time here.
pytestmark = pytest.mark.shared_app


TID = "durable"


@pytest.fixture
def topic(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "out", 1)


def _init(client, durability: str | None = "commit", **extra: Any) -> dict:  # type: ignore[no-untyped-def]
    if durability is not None:
        extra["durability"] = durability
    return init_producer(client, TID, transaction_version=2, **extra)


def _commit(client, producer: dict, **extra: Any):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/transactions/{TID}/commit", json={**ident(producer), **extra})


def _ok(r) -> dict:  # type: ignore[no-untyped-def]
    assert r.status_code == 200, r.text
    return r.json()


def _error(r, status: int, code: str) -> dict:  # type: ignore[no-untyped-def]
    assert r.status_code == status, r.text
    assert r.json()["error_code"] == code
    return r.json()


def _state(client) -> str:  # type: ignore[no-untyped-def]
    return _ok(client.get(f"/v1/transactions/{TID}"))["state"]


def _two_sends(client, p: dict) -> None:  # type: ignore[no-untyped-def]
    """Records a, b, c (offsets 0-2), then d, e (3-4), in one transaction."""
    _ok(send(client, [batch("out", 0, ["a", "b", "c"], 0)], p, TID))
    _ok(send(client, [batch("out", 0, ["d", "e"], 3)], p, TID))


# --- the opt-in ---------------------------------------------------------------------------------


def test_init_producer_id_answers_the_durability_chosen(client) -> None:  # type: ignore[no-untyped-def]
    assert _init(client)["durability"] == "commit"
    assert _init(client, durability=None)["durability"] == "send"


def test_durability_commit_needs_transaction_version_2(client) -> None:  # type: ignore[no-untyped-def]
    r = client.post("/v1/producers", json={"transactional_id": TID, "transaction_version": 1, "durability": "commit"})
    _error(r, 400, "INVALID_REQUEST")


def test_durability_commit_needs_a_transactional_id(client) -> None:  # type: ignore[no-untyped-def]
    _error(client.post("/v1/producers", json={"durability": "commit"}), 400, "INVALID_REQUEST")


def test_an_unknown_durability_is_refused_with_a_code(client) -> None:  # type: ignore[no-untyped-def]
    r = client.post("/v1/producers", json={"transactional_id": TID, "transaction_version": 2, "durability": "disk"})
    _error(r, 422, "INVALID_REQUEST")


def test_a_later_init_producer_id_without_it_goes_back_to_durable_sends(client, topic) -> None:  # type: ignore[no-untyped-def]
    _init(client)
    p = _init(client, durability=None)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))
    _ok(_commit(client, p))  # no count asked
    assert values(fetch(client, "out", 0)) == ["a"]


# --- the count ------------------------------------------------------------------------------------


def test_a_commit_whose_count_matches_commits_every_record(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _two_sends(client, p)

    answer = _ok(_commit(client, p, acknowledged_records=5))

    assert answer["state"] == "CompleteCommit"
    assert values(fetch(client, "out", 0)) == ["a", "b", "c", "d", "e"]


def test_a_commit_carrying_the_last_send_counts_its_records_too(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a", "b", "c"], 0)], p, TID))

    answer = _ok(_commit(client, p, acknowledged_records=5, batches=[batch("out", 0, ["d", "e"], 3)]))

    assert [(r["base_offset"], r["record_count"]) for r in answer["results"]] == [(3, 2)]
    assert values(fetch(client, "out", 0)) == ["a", "b", "c", "d", "e"]


def test_a_commit_carrying_a_whole_transaction_counts_only_its_batches(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _ok(_commit(client, p, acknowledged_records=2, batches=[batch("out", 0, ["a", "b"], 0)]))
    assert values(fetch(client, "out", 0)) == ["a", "b"]


def test_a_commit_carrying_a_whole_transaction_with_a_count_beyond_it_appends_nothing(  # type: ignore[no-untyped-def]
        client, topic) -> None:
    p = _init(client)

    refused = _error(_commit(client, p, acknowledged_records=3, batches=[batch("out", 0, ["a", "b"], 0)]),
                     409, "TRANSACTION_INCOMPLETE")

    assert refused["details"] == {"acknowledged_records": 3, "held_records": 2}
    assert refused["message"].endswith("Nothing was appended; send the whole transaction again")
    assert values(fetch(client, "out", 0, isolation="read_uncommitted")) == []
    assert _state(client) == "Empty"


@pytest.mark.parametrize("told", [6, 4])
def test_a_count_other_than_the_transaction_holds_aborts_it(client, topic, told: int) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _two_sends(client, p)

    refused = _error(_commit(client, p, acknowledged_records=told), 409, "TRANSACTION_INCOMPLETE")

    assert refused["details"] == {"acknowledged_records": told, "held_records": 5}
    assert refused["message"].endswith("The transaction is aborted; send it again")
    assert _state(client) == "CompleteAbort"
    assert values(fetch(client, "out", 0)) == []
    page = fetch(client, "out", 0, isolation="read_uncommitted")
    assert values(page) == ["a", "b", "c", "d", "e"]  # appended, and aborted: never readable committed


def test_after_an_incomplete_commit_the_abort_answers_the_next_epoch_and_the_next_transaction_commits(  # type: ignore[no-untyped-def]
        client, topic) -> None:
    p = _init(client)
    _two_sends(client, p)
    _error(_commit(client, p, acknowledged_records=6), 409, "TRANSACTION_INCOMPLETE")

    nxt = _ok(client.post(f"/v1/transactions/{TID}/abort", json=ident(p)))  # answered as the abort's retry
    assert nxt["producer_epoch"] == p["producer_epoch"] + 1
    _ok(send(client, [batch("out", 0, ["f"], 0)], nxt, TID))
    _ok(_commit(client, nxt, acknowledged_records=1))

    assert values(fetch(client, "out", 0)) == ["f"]


def test_a_commit_without_the_count_from_a_producer_that_opted_in_is_refused_and_changes_nothing(  # type: ignore[no-untyped-def]
        client, topic) -> None:
    p = _init(client)
    _two_sends(client, p)

    _error(_commit(client, p), 400, "INVALID_REQUEST")

    assert _state(client) == "Ongoing"
    _ok(_commit(client, p, acknowledged_records=5))
    assert values(fetch(client, "out", 0)) == ["a", "b", "c", "d", "e"]


def test_a_commit_of_records_acknowledged_when_no_transaction_is_open_is_incomplete(  # type: ignore[no-untyped-def]
        client, topic) -> None:
    """What a crash that lost every Send of a transaction (and so its Begin) leaves."""
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))
    nxt = _ok(_commit(client, p, acknowledged_records=1))

    refused = _error(_commit(client, nxt, acknowledged_records=2), 409, "TRANSACTION_INCOMPLETE")

    assert refused["details"] == {"acknowledged_records": 2, "held_records": 0}
    assert refused["message"].endswith("Nothing was aborted, as nothing is open; send the whole transaction again")
    assert values(fetch(client, "out", 0)) == ["a"]


def test_a_producer_that_did_not_opt_in_commits_without_a_count(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client, durability=None)
    _two_sends(client, p)
    _ok(_commit(client, p))
    assert values(fetch(client, "out", 0)) == ["a", "b", "c", "d", "e"]


def test_a_producer_that_did_not_opt_in_has_a_count_it_gives_checked(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client, durability=None)
    _two_sends(client, p)
    _error(_commit(client, p, acknowledged_records=6), 409, "TRANSACTION_INCOMPLETE")
    assert values(fetch(client, "out", 0)) == []


@pytest.mark.parametrize("count", [-1, "5", 2.5, True])
def test_a_count_that_is_not_a_whole_number_of_zero_or_more_is_refused_with_a_code(  # type: ignore[no-untyped-def]
        client, topic, count: Any) -> None:
    p = _init(client)
    _two_sends(client, p)
    _error(_commit(client, p, acknowledged_records=count), 422, "INVALID_REQUEST")
    assert _state(client) == "Ongoing"


def test_a_prepare_counts_too_and_its_transaction_commits_without_a_count(client, topic) -> None:  # type: ignore[no-untyped-def]
    p = _init(client)
    _two_sends(client, p)
    prepare = f"/v1/transactions/{TID}/prepare"

    refused = _error(client.post(prepare, json={**ident(p), "acknowledged_records": 6}), 409, "TRANSACTION_INCOMPLETE")
    assert refused["message"].startswith("the Prepare counts 6 acknowledged records")
    assert refused["message"].endswith("Nothing changed: the transaction is still Ongoing; abort it and send it again")
    assert _state(client) == "Ongoing"
    _error(client.post(prepare, json=ident(p)), 400, "INVALID_REQUEST")
    _ok(client.post(prepare, json={**ident(p), "acknowledged_records": 5}))
    _ok(_commit(client, p))

    assert values(fetch(client, "out", 0)) == ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize("told", [0, 6])
def test_the_commit_of_a_prepared_transaction_does_not_check_a_count_it_carries(  # type: ignore[no-untyped-def]
        client, topic, told: int) -> None:
    p = _init(client)
    _two_sends(client, p)
    _ok(client.post(f"/v1/transactions/{TID}/prepare", json={**ident(p), "acknowledged_records": 5}))

    answer = _ok(_commit(client, p, acknowledged_records=told))

    assert answer["state"] == "CompleteCommit"
    assert values(fetch(client, "out", 0)) == ["a", "b", "c", "d", "e"]


def test_a_new_instance_that_keeps_the_prepared_transaction_commits_it_with_its_own_count(  # type: ignore[no-untyped-def]
        client, topic) -> None:
    p = _init(client)
    _two_sends(client, p)
    _ok(client.post(f"/v1/transactions/{TID}/prepare", json={**ident(p), "acknowledged_records": 5}))
    taken = _init(client, keep_prepared_txn=True)

    answer = _ok(_commit(client, taken, txn_id=taken["prepared_txn_id"], acknowledged_records=0))

    assert answer["state"] == "CompleteCommit"
    assert values(fetch(client, "out", 0)) == ["a", "b", "c", "d", "e"]


def test_an_incomplete_commit_left_to_the_worker_is_decided_aborted_and_the_worker_completes_the_abort(  # type: ignore[no-untyped-def]
        services) -> None:
    services.topics.create("out", 1)
    coordinator = TransactionCoordinator(
        services.db, services.settings.model_copy(update={"complete_inline": False}), services.clock)
    p = coordinator.init_producer_id(transactional_id=TID, transaction_timeout_ms=None,
                                     transaction_version=TransactionVersion.V2, durability=Durability.COMMIT)
    record = [RecordToAppend(None, '"a"', None, services.clock())]
    services.log.send([SendBatch("out", 0, record, 0)], producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                      transactional_id=TID)

    with pytest.raises(TransactionIncomplete):
        coordinator.end_transaction(TID, p.producer_id, p.producer_epoch, commit=True, acknowledged_records=2)

    assert coordinator.listing.describe(TID).meta.state is TransactionState.PREPARE_ABORT
    assert coordinator.completion.complete_pending(coordinator.pass_work(coordinator.clock()).prepared) == (0, 1)  # (commits, aborts)
    assert coordinator.listing.describe(TID).meta.state is TransactionState.COMPLETE_ABORT
    _, read = services.log.fetch("out", 0, offset=0, max_records=10, isolation=IsolationLevel.READ_COMMITTED)
    assert read.records == []


# --- PostgreSQL: the Send's database transaction, and a lost Send --------------------------------


def _postgresql_only(database) -> None:  # type: ignore[no-untyped-def]
    if database.dialect != "postgresql":
        pytest.skip("synchronous_commit is PostgreSQL's; SQLite's Sends stay durable (docs/GUARANTEES.md)")


def _synchronous_commit(conn) -> str:  # type: ignore[no-untyped-def]
    return conn.exec_driver_sql("SELECT current_setting('synchronous_commit')").scalar_one()


def _synchronous_commit_seen_by(monkeypatch, module: Any, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    """`module.name`, a function whose first argument is the request's connection, made to note
    the connection's synchronous_commit once each call has returned (what the request's
    transaction commits with: a Send that joins in the statement taking its offsets relaxes it
    there): the list it notes into."""
    seen: list[str] = []
    function = getattr(module, name)

    def observed(conn, *args: Any, **kwargs: Any):  # type: ignore[no-untyped-def]
        answer = function(conn, *args, **kwargs)
        seen.append(_synchronous_commit(conn))
        return answer

    monkeypatch.setattr(module, name, observed)
    return seen


@pytest.mark.parametrize(("durability", "expected"), [("commit", "off"), (None, "on")])
def test_a_transactional_send_commits_without_waiting_for_the_disk_only_when_opted_in(  # type: ignore[no-untyped-def]
        client, topic, database, monkeypatch, durability: str | None, expected: str) -> None:
    _postgresql_only(database)
    seen = _synchronous_commit_seen_by(monkeypatch, log_service, "append_sent")
    p = _init(client, durability=durability)
    _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))  # begins the transaction
    _ok(send(client, [batch("out", 0, ["b"], 1)], p, TID))  # joins it
    _ok(send(client, [batch("out", 0, ["plain"])]))  # a plain Send: durable whatever the producers chose

    assert seen == [expected, expected, "on"]


def test_the_commit_of_a_producer_that_opted_in_waits_for_the_disk(  # type: ignore[no-untyped-def]
        client, topic, database, monkeypatch) -> None:
    _postgresql_only(database)
    seen = _synchronous_commit_seen_by(monkeypatch, transaction_coordinator, "complete_decided")
    p = _init(client)
    _two_sends(client, p)
    _ok(_commit(client, p, acknowledged_records=5))

    assert seen == ["on"]


@pytest.mark.raw_records
def test_a_transaction_whose_last_send_was_lost_is_aborted_and_never_read_committed(  # type: ignore[no-untyped-def]
        client, topic, database) -> None:
    """The rows of the last Send deleted: what a database crash before its WAL was flushed leaves."""
    _postgresql_only(database)
    p = _init(client)
    _two_sends(client, p)
    with database.write() as conn:
        conn.execute(delete(records).where(records.c.offset >= 3))
        conn.execute(delete(record_batches).where(record_batches.c.base_offset == 3))

    refused = _error(_commit(client, p, acknowledged_records=5), 409, "TRANSACTION_INCOMPLETE")

    assert refused["details"] == {"acknowledged_records": 5, "held_records": 3}
    assert _state(client) == "CompleteAbort"
    assert values(fetch(client, "out", 0)) == []
    with database.read() as conn:
        controls = conn.execute(select(record_batches.c.base_offset, record_batches.c.control_type)
                                .where(record_batches.c.control_type.is_not(None))).all()
    assert [tuple(c) for c in controls] == [(5, "ABORT")]


# --- PostgreSQL: how far readers read while such a transaction is open ----------------------------
# Its Sends may be lost in a database crash, and their offsets handed out again: no reader may be
# told it read past its first offset until its Prepare, Commit or Abort (durable) flushed them.


def _open_between_plain_records(client) -> dict:  # type: ignore[no-untyped-def]
    """x (offset 0, plain), the open transaction's a, b, c (1-3), y (4, plain): x and y durable."""
    _ok(send(client, [batch("out", 0, ["x"])]))
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a", "b", "c"], 0)], p, TID))
    _ok(send(client, [batch("out", 0, ["y"])]))
    return p


def _uncommitted(client, offset: int = 0) -> tuple[list[Any], int, int]:  # type: ignore[no-untyped-def]
    got = fetch(client, "out", 0, offset=offset, isolation="read_uncommitted")
    return values(got), got["next_offset"], got["high_watermark"]


def test_a_read_uncommitted_fetch_stops_before_an_open_transaction_whose_sends_are_not_durable(  # type: ignore[no-untyped-def]
        client, topic, database) -> None:
    _postgresql_only(database)
    _open_between_plain_records(client)

    assert _uncommitted(client) == (["x"], 1, 1)
    assert _uncommitted(client, offset=1) == ([], 1, 1)


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_once_that_transaction_ends_read_uncommitted_reads_to_the_log_end(  # type: ignore[no-untyped-def]
        client, topic, database, end: str) -> None:
    _postgresql_only(database)
    p = _open_between_plain_records(client)

    extra = {"acknowledged_records": 3} if end == "commit" else {}
    _ok(client.post(f"/v1/transactions/{TID}/{end}", json={**ident(p), **extra}))

    assert _uncommitted(client) == (["x", "a", "b", "c", "y"], 6, 6)  # the marker at 5


def test_once_that_transaction_is_prepared_read_uncommitted_reads_to_the_log_end(  # type: ignore[no-untyped-def]
        client, topic, database) -> None:
    _postgresql_only(database)
    p = _open_between_plain_records(client)

    _ok(client.post(f"/v1/transactions/{TID}/prepare", json={**ident(p), "acknowledged_records": 3}))

    assert _uncommitted(client) == (["x", "a", "b", "c", "y"], 5, 5)


def test_an_open_transaction_of_durable_sends_does_not_stop_read_uncommitted(  # type: ignore[no-untyped-def]
        client, topic) -> None:
    _ok(send(client, [batch("out", 0, ["x"])]))
    p = _init(client, durability=None)
    _ok(send(client, [batch("out", 0, ["a", "b", "c"], 0)], p, TID))
    _ok(send(client, [batch("out", 0, ["y"])]))

    assert _uncommitted(client) == (["x", "a", "b", "c", "y"], 5, 5)


def test_on_sqlite_an_open_transaction_of_durability_commit_does_not_stop_read_uncommitted(  # type: ignore[no-untyped-def]
        client, topic, database) -> None:
    if database.dialect != "sqlite":
        pytest.skip("SQLite's Sends all wait for the disk")
    _open_between_plain_records(client)

    assert _uncommitted(client) == (["x", "a", "b", "c", "y"], 5, 5)


def test_read_committed_reads_the_durable_records_after_that_transaction(  # type: ignore[no-untyped-def]
        client, topic, database) -> None:
    _open_between_plain_records(client)

    got = fetch(client, "out", 0)

    assert (values(got), got["next_offset"]) == (["x", "y"], 5)


def test_read_committed_that_finds_nothing_more_resumes_at_that_transaction_not_past_it(  # type: ignore[no-untyped-def]
        client, topic, database) -> None:
    _postgresql_only(database)
    _ok(send(client, [batch("out", 0, ["x"])]))
    p = _init(client)
    _ok(send(client, [batch("out", 0, ["a", "b", "c"], 0)], p, TID))

    got = fetch(client, "out", 0)

    assert (values(got), got["next_offset"], got["high_watermark"]) == (["x"], 1, 1)


def test_a_stream_goes_on_to_the_durable_records_after_that_transaction_without_waiting(  # type: ignore[no-untyped-def]
        services, client, topic, database) -> None:
    """One commit point a read (max_records 1): after x the stream is at the high watermark, yet
    y, committed, is there to read at once. No commit wakes it here (no listener)."""
    _postgresql_only(database)
    _open_between_plain_records(client)

    async def scenario() -> list[tuple[list[int], int]]:
        changes = LogChanges("sqlite:///:memory:")
        changes.start(asyncio.get_running_loop())
        long_poll = LongPoll(services.log, changes, 30_000, WaitingRequests(10, 10), SpoolBytes(1 << 30, max_waiting=5))
        stream = await long_poll.open_stream("out", 0, 0, max_records=1, max_bytes=1 << 20, principal="p",
                                             encode=lambda records: orjson.dumps([r.offset for r in records]))
        points = aiter(stream)
        try:
            return [(orjson.loads(p.data), p.next_position)
                    for p in [await asyncio.wait_for(anext(points), 10) for _ in range(2)]]
        finally:
            stream.close()

    assert asyncio.run(scenario()) == [([0], 1), ([4], 5)]  # x, then y


def test_the_topic_description_shows_the_high_watermark_at_that_transaction(  # type: ignore[no-untyped-def]
        client, topic, database) -> None:
    _open_between_plain_records(client)

    (described,) = _ok(client.get("/v1/topics/out"))["partitions"]

    high_watermark = 1 if database.dialect == "postgresql" else 5  # SQLite's Sends are durable
    assert (described["log_end_offset"], described["last_stable_offset"], described["high_watermark"]) == (
        5, 1, high_watermark)


def test_a_groups_lag_shows_that_high_watermark_and_counts_the_committed_records_past_it(  # type: ignore[no-untyped-def]
        client, topic, database) -> None:
    _postgresql_only(database)
    _open_between_plain_records(client)
    _ok(client.post("/v1/groups/g/offsets", json={"offsets": [{"topic": "out", "partition": 0, "offset": 0}]}))

    (lag,) = _ok(client.get("/v1/groups/g/lag"))["partitions"]

    assert (lag["high_watermark"], lag["lag"]) == (1, 2)  # x and y


def test_a_group_reset_to_latest_is_placed_no_further_than_that_transaction(  # type: ignore[no-untyped-def]
        client, topic, database) -> None:
    _postgresql_only(database)
    _open_between_plain_records(client)

    r = client.post("/v1/groups/g/offsets/reset", json={"topic": "out", "to": "latest"})

    assert r.status_code == 200, r.text
    assert [(o["partition"], o["new_offset"]) for o in r.json()["offsets"]] == [(0, 1)]


# --- what the opt-in costs: no statement more ----------------------------------------------------


def _statements(during) -> int:  # type: ignore[no-untyped-def]
    """The SQL statements every engine of this process runs during `during()`."""
    with statements_run() as seen:
        during()
    return len(seen)


def test_a_send_and_a_commit_with_durability_commit_run_as_many_statements_as_durable_ones(  # type: ignore[no-untyped-def]
        client, topic) -> None:
    counts = {}
    for durability in ("commit", None):
        p = _init(client, durability=durability)
        _ok(send(client, [batch("out", 0, ["a"], 0)], p, TID))  # the transaction begun, untimed
        sent = _statements(lambda: _ok(send(client, [batch("out", 0, ["b"], 1)], p, TID)))
        committed = _statements(lambda: _ok(_commit(client, p, acknowledged_records=2)))
        counts[durability] = (sent, committed)
    assert counts["commit"] == counts[None]


# --- the Python client ------------------------------------------------------------------------


def test_the_python_client_that_asks_for_durability_commit_counts_what_it_was_acknowledged(  # type: ignore[no-untyped-def]
        client, topic) -> None:
    producer = Producer(str(client.base_url), TID, client=client, batch_records=2, durability="commit")
    producer.init_transactions()
    assert producer.durability == "commit"
    producer.begin_transaction()
    for v in ("a", "b", "c", "d", "e"):  # two Sends of 2, the last record carried by the Commit
        producer.send("out", v, partition=0)
    producer.commit_transaction()

    assert _ok(client.get(f"/v1/transactions/{TID}"))["state"] == "CompleteCommit"
    assert values(fetch(client, "out", 0)) == ["a", "b", "c", "d", "e"]


@pytest.mark.raw_records
def test_the_python_client_after_an_incomplete_commit_asks_for_the_abort_and_then_goes_on(  # type: ignore[no-untyped-def]
        client, topic, database) -> None:
    producer = Producer(str(client.base_url), TID, client=client, durability="commit")
    producer.init_transactions()
    producer.begin_transaction()
    for v in ("a", "b"):  # two Sends, answered; the Commit below carries none
        producer.send("out", v, partition=0)
        producer.flush()
    with database.write() as conn:  # the last Send lost, as a database crash can lose it
        conn.execute(delete(records).where(records.c.offset == 1))
        conn.execute(delete(record_batches).where(record_batches.c.base_offset == 1))

    with pytest.raises(AbortableError) as first:
        producer.commit_transaction()
    with pytest.raises(AbortableError) as again:  # not a fenced producer: the same refusal
        producer.commit_transaction()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("out", "c", partition=0)
    producer.flush()
    producer.commit_transaction()

    assert (first.value.error_code, again.value.error_code) == ("TRANSACTION_INCOMPLETE", "TRANSACTION_INCOMPLETE")
    assert values(fetch(client, "out", 0)) == ["c"]


def test_the_python_client_keeps_durable_sends_unless_asked(client, topic) -> None:  # type: ignore[no-untyped-def]
    producer = Producer(str(client.base_url), TID, client=client)
    producer.init_transactions()

    assert (producer.transaction_version, producer.durability) == (2, "send")
    # The service took "send" too: it accepts the Commit without a count.
    producer.begin_transaction()
    producer.send("out", "a", partition=0)
    producer.commit_transaction()
    assert values(fetch(client, "out", 0)) == ["a"]


@pytest.mark.parametrize("kwargs", [{"transaction_version": 1}, {"transactional_id": None}])
def test_the_python_client_refuses_durability_commit_without_version_2_and_a_transactional_id(  # type: ignore[no-untyped-def]
        client, kwargs: dict) -> None:
    args = {"transactional_id": TID, **kwargs}
    with pytest.raises(ValueError, match="durability"):
        Producer(str(client.base_url), args.pop("transactional_id"), client=client, durability="commit", **args)
