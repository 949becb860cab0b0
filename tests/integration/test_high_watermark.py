"""The high watermark (storage.topics.high_watermark): how far a reader may read or be placed, the
log end but for the first offset of an Ongoing transaction of a producer of durability "commit"
(PostgreSQL; on SQLite every Send is durable). Read from those transactions' side, whatever
other transactions hold the partition open; and never past such a transaction's first offset,
whenever its first Send commits beside a reader."""

from __future__ import annotations

import threading

import pytest

from app.domain.records import RecordToAppend, SendBatch
from app.domain.types import Durability, IsolationLevel, TransactionVersion
from spark_jobs.common.positions import PositionRange, batch_ranges, committed_offsets, log_bounds, start_positions
from tests.helpers import batch, create_topic, fetch, init_producer, send
from tests.integration.test_metrics import scrape, value

OPEN_ORDINARY = 30


def _producer(services, tid: str, durability: Durability):  # type: ignore[no-untyped-def]
    return services.coordinator.init_producer_id(transactional_id=tid, transaction_timeout_ms=None,
                                                 transaction_version=TransactionVersion.V2, durability=durability)


def _send(services, tid: str, producer, count: int, base_sequence: int) -> int:  # type: ignore[no-untyped-def]
    """A transactional Send of `count` records to out/0 (the first begins the transaction); its base offset."""
    records = [RecordToAppend(None, '"v"', None, 1) for _ in range(count)]
    (sent,) = services.log.send([SendBatch("out", 0, records, base_sequence)], producer_id=producer.producer_id,
                                producer_epoch=producer.producer_epoch, transactional_id=tid)
    return sent.base_offset


def _plain(services, count: int) -> None:  # type: ignore[no-untyped-def]
    records = [RecordToAppend(None, '"p"', None, 1) for _ in range(count)]
    services.log.send([SendBatch("out", 0, records)], producer_id=None, producer_epoch=None, transactional_id=None)


def _high_watermark(services) -> int:  # type: ignore[no-untyped-def]
    return services.log.partition_offsets("out", 0, isolation=IsolationLevel.READ_UNCOMMITTED).high_watermark


def test_many_open_ordinary_transactions_leave_it_at_the_first_offset_of_the_one_not_durable(  # type: ignore[no-untyped-def]
        services, database) -> None:
    """Offsets 0-9 plain, then one record of each of 30 ordinary open transactions (10-39), the
    "commit" producer's transaction (40-41), 30 more ordinary ones (42-71) and a plain record (72)."""
    services.topics.create("out", 1)
    _plain(services, 10)
    for i in range(OPEN_ORDINARY):
        _send(services, f"ordinary-{i}", _producer(services, f"ordinary-{i}", Durability.SEND), 1, 0)
    first = _send(services, "relaxed", _producer(services, "relaxed", Durability.COMMIT), 2, 0)
    for i in range(OPEN_ORDINARY, 2 * OPEN_ORDINARY):
        _send(services, f"ordinary-{i}", _producer(services, f"ordinary-{i}", Durability.SEND), 1, 0)
    _plain(services, 1)

    assert first == 40
    assert _high_watermark(services) == (40 if database.dialect == "postgresql" else 73)


def test_open_ordinary_transactions_alone_leave_it_at_the_log_end(services) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("out", 1)
    _plain(services, 10)
    for i in range(OPEN_ORDINARY):
        _send(services, f"ordinary-{i}", _producer(services, f"ordinary-{i}", Durability.SEND), 1, 0)

    assert _high_watermark(services) == 10 + OPEN_ORDINARY


def test_a_reader_beside_transactions_that_open_and_commit_never_sees_it_inside_one(  # type: ignore[no-untyped-def]
        services, database) -> None:
    """A "commit" producer alone in the partition runs transactions of two Sends of two records
    and a Commit (its marker): each takes offsets 5k to 5k + 4, so the log end is 5k + 2 or 5k + 4
    while one is Ongoing. A reader that reads the high watermark meanwhile may see 5k (Ongoing,
    or idle before it) or 5k + 5 (committed), never the log end of an Ongoing one: the first
    Send's offsets and its transaction's row become visible in one commit, and one statement
    reads both."""
    if database.dialect != "postgresql":
        pytest.skip("SQLite's Sends wait for the disk: its high watermark is the log end")
    services.topics.create("out", 1)
    producer = _producer(services, "relaxed", Durability.COMMIT)
    done = threading.Event()
    seen: list[int] = []
    failed: list[BaseException] = []

    def read() -> None:
        try:
            while not done.is_set():
                seen.append(_high_watermark(services))
        except BaseException as e:  # noqa: BLE001 - reported by the test's thread
            failed.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for k in range(40):
            assert _send(services, "relaxed", producer, 2, 0) == 5 * k
            _send(services, "relaxed", producer, 2, 2)
            producer = services.coordinator.end_transaction(
                "relaxed", producer.producer_id, producer.producer_epoch, commit=True, acknowledged_records=4).meta
    finally:
        done.set()
        reader.join()

    assert failed == []
    assert len(seen) > 40
    assert [h for h in seen if h % 5] == []
    assert _high_watermark(services) == 200


def test_a_groups_lag_counts_what_a_read_committed_fetch_from_its_offset_gives_past_it_too(  # type: ignore[no-untyped-def]
        client, database) -> None:
    """x (offset 0), the Ongoing transaction of a "commit" producer (1-3), y and z (4, 5): the
    high watermark is 1 on PostgreSQL, yet a read_committed fetch gives y and z, durable commit
    points, and so the lag over HTTP and in /metrics counts them, from every committed offset."""
    create_topic(client, "out", 1)
    assert send(client, [batch("out", 0, ["x"])]).status_code == 200
    p = init_producer(client, "relaxed", transaction_version=2, durability="commit")
    assert send(client, [batch("out", 0, ["a", "b", "c"], 0)], p, "relaxed").status_code == 200
    assert send(client, [batch("out", 0, ["y", "z"])]).status_code == 200
    for at in range(7):
        r = client.post(f"/v1/groups/g{at}/offsets", json={"offsets": [{"topic": "out", "partition": 0, "offset": at}]})
        assert r.status_code == 200, r.text

    fetched = [len(fetch(client, "out", 0, offset=at)["records"]) for at in range(7)]
    lags = [client.get(f"/v1/groups/g{at}/lag").json()["partitions"][0] for at in range(7)]
    gauges = scrape(client)

    assert fetched == [3, 2, 2, 2, 2, 1, 0]
    assert [lag["lag"] for lag in lags] == fetched
    assert [value(gauges, "outbox_group_lag", group=f"g{at}", topic="out", partition="0") for at in range(7)] == fetched
    assert {lag["high_watermark"] for lag in lags} == ({1} if database.dialect == "postgresql" else {6})


class _Session:
    """The HTTP door's TestClient as the Spark jobs' session (app.client.http.Session.call)."""

    def __init__(self, client) -> None:  # type: ignore[no-untyped-def]
        self.client = client

    def call(self, method: str, path: str, *, params=None, **_: object):  # type: ignore[no-untyped-def]
        r = self.client.request(method, path, params=params)
        assert r.status_code == 200, r.text
        return r.json()


def test_a_group_position_a_consumer_commits_past_it_is_where_the_spark_job_reads_nothing(  # type: ignore[no-untyped-def]
        client, database) -> None:
    """x (offset 0), the Ongoing transaction of a "commit" producer (1-3), y and z (4, 5): on
    PostgreSQL a read_committed consumer is handed y and z past the high watermark (1) and
    commits the position after them, 6. The Spark job's batch from that group's offsets
    (spark_jobs.common.positions, as pizza_income takes them) reads nothing in the partition
    and ends where the group is, never below it: not a start past its end refused."""
    create_topic(client, "out", 1)
    assert send(client, [batch("out", 0, ["x"])]).status_code == 200
    p = init_producer(client, "relaxed", transaction_version=2, durability="commit")
    assert send(client, [batch("out", 0, ["a", "b", "c"], 0)], p, "relaxed").status_code == 200
    assert send(client, [batch("out", 0, ["y", "z"])]).status_code == 200
    read = fetch(client, "out", 0, offset=0)
    r = client.post("/v1/groups/spark/offsets",
                    json={"offsets": [{"topic": "out", "partition": 0, "offset": read["next_offset"]}]})
    assert r.status_code == 200, r.text

    session = _Session(client)
    bounds = log_bounds(session, "out")  # type: ignore[arg-type]
    starts, lost = start_positions(committed_offsets(session, "spark", "out"),  # type: ignore[arg-type]
                                   {partition: b.log_start for partition, b in bounds.items()})
    ranges = batch_ranges(starts, {partition: b.high_watermark for partition, b in bounds.items()})

    assert (read["next_offset"], bounds[0].high_watermark) == ((6, 1) if database.dialect == "postgresql" else (6, 6))
    assert (ranges, lost) == ([PositionRange(0, 6, 6)], [])


def test_metrics_export_the_high_watermark_beside_the_log_end(client, database) -> None:  # type: ignore[no-untyped-def]
    """x (offset 0), then an Ongoing transaction of a "commit" producer (1-3): on PostgreSQL the
    high watermark (what `outbox groups lag` shows as LOG-END-OFFSET) stays at 1 while the log
    end is 4, and each gauge is what describe answers."""
    create_topic(client, "out", 1)
    assert send(client, [batch("out", 0, ["x"])]).status_code == 200
    p = init_producer(client, "relaxed", transaction_version=2, durability="commit")
    assert send(client, [batch("out", 0, ["a", "b", "c"], 0)], p, "relaxed").status_code == 200

    (described,) = client.get("/v1/topics/out").json()["partitions"]
    gauges = scrape(client)

    assert (value(gauges, "outbox_partition_high_watermark", topic="out", partition="0"),
            value(gauges, "outbox_partition_log_end_offset", topic="out", partition="0")) == (
        (described["high_watermark"], described["log_end_offset"]))
    assert (described["high_watermark"], described["log_end_offset"]) == (
        (1, 4) if database.dialect == "postgresql" else (4, 4))
