"""Fetch limits by bytes (Kafka's fetch.max.bytes and max.partition.fetch.bytes), on SQLite and
PostgreSQL: which records come back, where the next fetch starts, the commit point that comes
back whole whatever its size, the refusals, and the answer sent as it is read."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.services import fetch_answer
from app.settings import Settings
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

TEN = "x" * 8  # a record of 10 bytes: "xxxxxxxx" with its quotes
RC, RU = "read_committed", "read_uncommitted"


def _get(client: Any, topic: str, partition: int = 0, **params: Any) -> Any:
    return client.get(f"/v1/topics/{topic}/partitions/{partition}/records", params=params)


def _fetch(client: Any, topic: str, partition: int = 0, **params: Any) -> dict:
    r = _get(client, topic, partition, **params)
    assert r.status_code == 200, r.text
    return r.json()


def _offsets(page: dict) -> list[int]:
    return [r["offset"] for r in page["records"]]


def _transaction(client: Any, topic: str, values: list[Any], tid: str = "tx") -> None:
    producer = init_producer(client, tid)
    begin(client, tid, producer)
    assert send(client, [batch(topic, 0, values, base_sequence=0)], producer, tid).status_code == 200
    assert client.post(f"/v1/transactions/{tid}/commit", json=ident(producer)).status_code == 200


def _multi(client: Any, partitions: list[tuple[str, int, int]], **body: Any) -> Any:
    return client.post("/v1/fetch", json={"partitions": [{"topic": t, "partition": p, "offset": o}
                                                         for t, p, o in partitions], **body})


@pytest.mark.parametrize("isolation", [RC, RU])
def test_a_fetch_returns_the_records_that_fit_in_max_bytes_and_the_next_starts_after_them(
        client: Any, isolation: str) -> None:
    create_topic(client, "t")
    send(client, [batch("t", 0, [TEN] * 5)])

    page = _fetch(client, "t", max_bytes=25, isolation=isolation)
    rest = _fetch(client, "t", offset=page["next_offset"], max_bytes=25, isolation=isolation)

    assert (_offsets(page), page["next_offset"]) == ([0, 1], 2)
    assert (_offsets(rest), rest["next_offset"]) == ([2, 3], 4)


@pytest.mark.parametrize("isolation", [RC, RU])
def test_a_fetch_returns_its_first_record_whole_however_far_over_max_bytes(client: Any, isolation: str) -> None:
    create_topic(client, "t")
    send(client, [batch("t", 0, ["x" * 100, TEN])])

    page = _fetch(client, "t", max_bytes=5, isolation=isolation)

    assert (_offsets(page), page["next_offset"]) == ([0], 1)


def test_read_committed_returns_a_transaction_over_max_bytes_whole_and_alone(client: Any) -> None:
    create_topic(client, "t")
    _transaction(client, "t", [TEN, TEN, TEN])  # offsets 0-2, COMMIT marker at 3
    send(client, [batch("t", 0, [TEN])])  # offset 4

    page = _fetch(client, "t", max_bytes=5)

    assert (_offsets(page), {r["commit_position"] for r in page["records"]}, page["next_offset"]) == (
        [0, 1, 2], {3}, 4)


def test_read_committed_stops_before_a_transaction_that_would_pass_max_bytes(client: Any) -> None:
    create_topic(client, "t")
    send(client, [batch("t", 0, [TEN])])  # offset 0
    _transaction(client, "t", [TEN, TEN, TEN])  # offsets 1-3, COMMIT marker at 4

    page = _fetch(client, "t", max_bytes=39)
    whole = _fetch(client, "t", max_bytes=40)

    assert (_offsets(page), page["next_offset"]) == ([0], 1)
    assert (_offsets(whole), whole["next_offset"]) == ([0, 1, 2, 3], 5)


def test_a_fetch_without_max_bytes_takes_the_services_partition_default(settings: Settings, clock: Any) -> None:
    small = settings.model_copy(update={"fetch_max_partition_bytes_default": 25})
    with TestClient(create_app(small, clock)) as client:
        create_topic(client, "t")
        send(client, [batch("t", 0, [TEN] * 5)])
        page = _fetch(client, "t")

    assert (_offsets(page), page["next_offset"]) == ([0, 1], 2)


def test_the_multi_partition_fetch_gives_each_partition_at_most_max_partition_bytes(client: Any) -> None:
    create_topic(client, "t", 2)
    send(client, [batch("t", 0, [TEN] * 3), batch("t", 1, [TEN] * 3)])

    r = _multi(client, [("t", 0, 0), ("t", 1, 0)], max_partition_bytes=20)

    assert r.status_code == 200, r.text
    assert [(_offsets(p), p["next_offset"]) for p in r.json()["partitions"]] == [([0, 1], 2), ([0, 1], 2)]


def test_the_multi_partition_fetch_shares_max_bytes_in_the_order_asked(client: Any) -> None:
    create_topic(client, "t", 2)
    send(client, [batch("t", 0, [TEN] * 3), batch("t", 1, [TEN] * 3)])

    r = _multi(client, [("t", 1, 0), ("t", 0, 0)], max_bytes=30, max_partition_bytes=20)

    assert [(p["partition"], _offsets(p), p["next_offset"]) for p in r.json()["partitions"]] == [
        (1, [0, 1], 2), (0, [0], 1)]


def test_the_multi_partition_fetch_without_max_bytes_takes_the_services_default(
        settings: Settings, clock: Any) -> None:
    small = settings.model_copy(update={"fetch_max_bytes_default": 30})
    with TestClient(create_app(small, clock)) as client:
        create_topic(client, "t", 2)
        send(client, [batch("t", 0, [TEN] * 3), batch("t", 1, [TEN] * 3)])
        r = _multi(client, [("t", 0, 0), ("t", 1, 0)])

    assert [(_offsets(p), p["next_offset"]) for p in r.json()["partitions"]] == [([0, 1, 2], 3), ([], 0)]


def test_only_the_first_partition_with_records_gets_a_commit_point_over_the_limits(client: Any) -> None:
    create_topic(client, "t", 3)
    send(client, [batch("t", 1, ["x" * 100, TEN]), batch("t", 2, ["x" * 100])])

    r = _multi(client, [("t", 0, 0), ("t", 1, 0), ("t", 2, 0)], max_partition_bytes=20)

    assert [(_offsets(p), p["next_offset"]) for p in r.json()["partitions"]] == [
        ([], 0), ([0], 1), ([], 0)]


@pytest.mark.parametrize("params", [{"max_bytes": 57_671_681}])
def test_a_fetch_asking_more_than_the_maximum_bytes_is_refused(client: Any, params: dict) -> None:
    create_topic(client, "t")

    r = _get(client, "t", **params)

    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")
    assert r.json()["message"] == ("max_bytes must be in 1..57671680 (OUTBOX_FETCH_MAX_BYTES_LIMIT, "
                                   "OUTBOX_FETCH_MAX_PARTITION_BYTES_LIMIT); got 57671681")


@pytest.mark.parametrize(("field", "setting"), [("max_bytes", "OUTBOX_FETCH_MAX_BYTES_LIMIT"),
                                                ("max_partition_bytes", "OUTBOX_FETCH_MAX_PARTITION_BYTES_LIMIT")])
def test_a_multi_partition_fetch_asking_more_than_the_maximum_bytes_is_refused(
        settings: Settings, clock: Any, field: str, setting: str) -> None:
    limited = settings.model_copy(update={"fetch_max_bytes_limit": 5000, "fetch_max_bytes_default": 5000,
                                          "fetch_max_partition_bytes_limit": 5000,
                                          "fetch_max_partition_bytes_default": 5000})
    with TestClient(create_app(limited, clock)) as client:
        create_topic(client, "t")
        r = _multi(client, [("t", 0, 0)], **{field: 5001})

    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")
    assert r.json()["message"] == f"{field} must be in 1..5000 ({setting}); got 5001"


def _mixed_log(client: Any) -> None:
    """Plain records, small transactions and one transaction larger than a chunk, interleaved."""
    create_topic(client, "t", 2)
    send(client, [batch("t", 0, [TEN, {"k": [1, 2]}, None]), batch("t", 1, [TEN])])
    _transaction(client, "t", [TEN, "é" * 5], "a")
    producer = init_producer(client, "big")
    begin(client, "big", producer)
    for i in range(3):
        assert send(client, [batch("t", 0, [f"{i}-{j}" + "y" * 20 for j in range(7)], base_sequence=7 * i)],
                    producer, "big").status_code == 200
        send(client, [batch("t", 0, [TEN])])
    assert client.post("/v1/transactions/big/commit", json=ident(producer)).status_code == 200
    send(client, [batch("t", 0, [TEN, TEN])])


@pytest.mark.parametrize("isolation", [RC, RU])
def test_an_answer_sent_as_it_is_read_is_the_same_json_as_the_answer_built_whole(
        client: Any, monkeypatch: pytest.MonkeyPatch, isolation: str) -> None:
    _mixed_log(client)
    single = {"isolation": isolation, "max_bytes": 10_000}
    multi = {"partitions": [{"topic": "t", "partition": 1}, {"topic": "t", "partition": 0}], "isolation": isolation}
    built = (_get(client, "t", **single), client.post("/v1/fetch", json=multi))

    monkeypatch.setattr(fetch_answer, "STREAM_ABOVE_BYTES", 0)
    monkeypatch.setattr(fetch_answer, "CHUNK_BYTES", 40)
    streamed = (_get(client, "t", **single), client.post("/v1/fetch", json=multi))

    assert [r.headers.get("content-length") for r in streamed] == [None, None]  # sent in chunks
    assert [r.content for r in streamed] == [r.content for r in built]
    assert len(built[0].json()["records"]) == 3 + 2 + 21 + 3 + 2 if isolation == RC else 31


def test_an_answer_spooled_one_frame_at_a_time_within_the_spool_bound_is_the_same_json(
        settings: Settings, clock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.services import spool

    tight = settings.model_copy(update={"fetch_spool_max_bytes": 1})
    with TestClient(create_app(tight, clock)) as client:
        _mixed_log(client)
        built = _get(client, "t", max_bytes=10_000)
        monkeypatch.setattr(fetch_answer, "STREAM_ABOVE_BYTES", 0)
        monkeypatch.setattr(fetch_answer, "CHUNK_BYTES", 40)
        monkeypatch.setattr(spool, "SPOOL_MEMORY_BYTES", 0)  # every frame through the file
        streamed = _get(client, "t", max_bytes=10_000)
        files = client.app.state.services.long_poll.spool_bytes  # type: ignore[attr-defined]

    assert (files.max_bytes, files.used) == (1, 0)
    assert streamed.headers.get("content-length") is None and streamed.content == built.content


def test_the_consumer_gets_a_record_over_its_partition_byte_limit_at_its_turn_first(client: Any) -> None:
    from app.client import Consumer

    create_topic(client, "t", 2)
    send(client, [batch("t", 0, [TEN] * 6), batch("t", 1, ["x" * 100])])
    consumer = Consumer("http://testserver", client=client, max_partition_fetch_bytes=20)
    consumer.assign([("t", 0), ("t", 1)])

    polls = [[(r.partition, r.offset) for r in consumer.poll(0)] for _ in range(2)]

    assert polls == [[(0, 0), (0, 1)], [(1, 0), (0, 2), (0, 3)]]


@pytest.mark.parametrize("isolation", [RC, RU])
@pytest.mark.parametrize(("prefetch_bytes", "whole"), [(0, {RC: [], RU: []}),
                                                       (2560, {RC: [], RU: [0, 2, 3, 4, 6, 7, 8]}),
                                                       (1 << 20, {RC: [], RU: [0, 1, 2, 3, 4, 6, 7, 8]})],
                         ids=["none", "small records only", "all"])
def test_a_plan_brings_records_whole_only_within_its_prefetch_bytes_and_reads_the_rest_the_same(
        services: Any, client: Any, isolation: str, prefetch_bytes: int, whole: dict[str, list[int]]) -> None:
    """A read_uncommitted plan's page brings a record whole when it is at most prefetch_bytes
    over the page's length (max_records), so that a page of large records hands over their
    sizes, not their values; a read_committed plan's pages are batch rows, counted and sized,
    and bring none. Whatever a plan did not bring is read after, and the fetch is the same
    records either way."""
    from app.domain.types import IsolationLevel
    from app.storage import read

    create_topic(client, "t")
    send(client, [batch("t", 0, [TEN, "y" * 60, TEN])])  # offsets 0-2, the 62-byte one at 1
    _transaction(client, "t", [TEN, TEN])  # 3, 4, its marker 5
    send(client, [batch("t", 0, [TEN] * 3)])  # 6-8
    with services.log.db.read() as conn:
        topic_id = conn.exec_driver_sql("SELECT topic_id FROM topics WHERE name = 't'").scalar_one()
        plan = read.plan_fetch(conn, topic_id=topic_id, partition=0, offset=0, max_records=100,
                              isolation=IsolationLevel(isolation), prefetch_bytes=prefetch_bytes)
        records = [r for chunk in read.read_planned(conn, plan) for r in chunk]

    assert sorted(plan.rows) == whole[isolation]
    assert plan.prefetched_bytes <= prefetch_bytes
    assert [(r.offset, json.loads(r.value)) for r in records] == [
        (r["offset"], r["value"]) for r in _fetch(client, "t", isolation=isolation, max_records=100)["records"]]
    assert [r.offset for r in records] == ([0, 1, 2, 3, 4, 6, 7, 8])


@pytest.mark.parametrize("isolation", [RC, RU])
def test_a_plain_batch_larger_than_a_chunk_is_read_in_chunks_of_whole_records(
        services: Any, client: Any, isolation: str) -> None:
    """A read_committed plan takes a plain batch that fits as one point; read in chunks, it is
    cut between its records (each a position of its own), never inside one."""
    from app.domain.types import IsolationLevel
    from app.storage import read

    create_topic(client, "t")
    values = [f"{i}" + "x" * 18 for i in range(10)]  # 10 records of 21 bytes (the JSON string's quotes)
    send(client, [batch("t", 0, values)])
    with services.log.db.read() as conn:
        topic_id = conn.exec_driver_sql("SELECT topic_id FROM topics WHERE name = 't'").scalar_one()
        plan = read.plan_fetch(conn, topic_id=topic_id, partition=0, offset=0, max_records=100,
                               isolation=IsolationLevel(isolation), prefetch_bytes=0)
        chunks = [[(r.offset, json.loads(r.value)) for r in chunk]
                  for chunk in read.read_planned(conn, plan, chunk_bytes=50)]

    assert [len(c) for c in chunks] == [2, 2, 2, 2, 2]
    assert [r for c in chunks for r in c] == list(enumerate(values))
