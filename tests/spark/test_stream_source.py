"""The `outbox` data source as a stream (spark.readStream.format("outbox")): exactly the
committed records, in commit order, once, across micro-batches and restarts from the
checkpoint; admission control; data loss; the commitGroup's offsets. On SQLite and
PostgreSQL, against a real `serve`; the offset arithmetic without Spark."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import httpx
import pytest

from app.client.producer import Producer
from spark_jobs.datasource import register
from spark_jobs.positions import LogBounds, TopicPartition
from tests.e2e.api import ok
from tests.spark.test_datasource import _api_rows, _spark_rows

TOPIC = "stream"
T0, T1, T2 = (TopicPartition(TOPIC, p) for p in range(3))
RUN_TIMEOUT_S = 120


@pytest.fixture
def url(launcher):  # type: ignore[no-untyped-def]
    return launcher.server().url


@pytest.fixture
def client(url):  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=url, timeout=30) as c:
        yield c


def _create(client: httpx.Client, topic: str, partitions: int) -> None:
    ok(client.post("/v1/topics", json={"name": topic, "partitions": partitions}), 201)


def _plain(client: httpx.Client, topic: str, partition: int, values: list[int]) -> None:
    ok(client.post("/v1/records", json={"batches": [
        {"topic": topic, "partition": partition, "records": [{"value": {"n": n}} for n in values]}]}))


def _ends(client: httpx.Client, topic: str) -> dict[int, int]:
    return {p["partition"]: p["log_end_offset"] for p in ok(client.get(f"/v1/topics/{topic}"))["partitions"]}


def _committed(client: httpx.Client, topic: str) -> list[tuple]:
    """The whole topic as a read_committed consumer gets it now."""
    return _api_rows(client, topic, {p: (0, e) for p, e in _ends(client, topic).items()})


def _start(spark, checkpoint: Path, options: dict[str, str], batches: list, **trigger):  # type: ignore[no-untyped-def]
    """A streaming query whose foreachBatch sink appends (batch id, the batch's rows) to
    `batches`."""
    register(spark)
    stream = spark.readStream.format("outbox").options(**options).load()
    return (stream.writeStream.foreachBatch(lambda df, batch_id: batches.append((batch_id, _spark_rows(df))))
            .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())


def _available_now(spark, checkpoint: Path, **options: str) -> list[tuple[int, list[tuple]]]:  # type: ignore[no-untyped-def]
    """One availableNow run: every micro-batch's (id, rows)."""
    batches: list = []
    query = _start(spark, checkpoint, options, batches, availableNow=True)
    assert query.awaitTermination(RUN_TIMEOUT_S), "the availableNow run did not end"
    if query.exception() is not None:
        raise query.exception()
    return batches


def _rows(batches: list[tuple[int, list[tuple]]]) -> list[tuple]:
    return sorted(r for _id, rows in batches for r in rows)


# --- Streaming queries ------------------------------------------------------------------------


def test_a_stream_outputs_exactly_the_committed_records_once_in_commit_order_while_producers_write(
        spark, backend, url, client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Transactional producers commit and abort, an idempotent producer sends plain records,
    all three partitions, while a processingTime query reads in micro-batches of at most 25
    positions. The union of the micro-batches is the read_committed fetch of the whole topic
    (aborted and still-open transactions left out, nothing twice), and within a partition each
    micro-batch's commit positions all come after the previous one's."""
    _create(client, TOPIC, 3)
    batches: list = []
    query = _start(spark, tmp_path / "checkpoint", {"url": url, "databaseUrl": backend.url, "topics": TOPIC,
                                                      "maxRecordsPerTrigger": "25"},
                   batches, processingTime="0 seconds")

    def produce() -> None:
        txn = Producer(url, "stream-txn")
        txn.init_transactions()
        plain = Producer(url)
        for i in range(12):
            txn.begin_transaction()
            for p in range(3):
                txn.send(TOPIC, {"n": i, "p": p, "from": "txn"}, key=f"k{i}", partition=p)
                plain.send(TOPIC, {"n": i, "p": p, "from": "plain"}, partition=p, headers={"i": str(i)})
            plain.flush()
            txn.send(TOPIC, {"n": i, "from": "txn", "last": True}, partition=i % 3)
            (txn.commit_transaction if i % 3 else txn.abort_transaction)()
        txn.begin_transaction()  # left open: never output
        txn.send(TOPIC, {"open": True}, partition=0)
        txn.flush()
        plain.close()

    writer = threading.Thread(target=produce)
    writer.start()
    writer.join(RUN_TIMEOUT_S)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None

    expected = _committed(client, TOPIC)
    assert _rows(batches) == expected
    assert len(expected) == 12 * 3 + 8 * 4  # 12 rounds of plain records, 8 of 12 transactions
    assert len(batches) >= sum(_ends(client, TOPIC).values()) // 25, "several micro-batches"
    for p in range(3):
        per_batch = [[r[3] for r in rows if r[1] == p] for _id, rows in sorted(batches)]
        positions = [c for b in per_batch if b for c in (min(b), max(b))]
        assert positions == sorted(positions), f"partition {p}: micro-batches out of commit order"


def test_a_restarted_query_outputs_only_what_was_committed_after_its_checkpoint(spark, backend, url, client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """availableNow, more records (and a transaction open across the runs commits), availableNow
    again from the same checkpoint: the second run has only the new records, the two runs
    together have the whole topic once."""
    _create(client, TOPIC, 2)
    _plain(client, TOPIC, 0, [1, 2, 3])
    _plain(client, TOPIC, 1, [4])
    txn = Producer(url, "across")
    txn.init_transactions()
    txn.begin_transaction()
    txn.send(TOPIC, {"n": 5}, partition=1)
    txn.flush()
    options = {"url": url, "databaseUrl": backend.url, "topics": TOPIC, "maxRecordsPerTrigger": "3"}

    first = _rows(_available_now(spark, tmp_path / "checkpoint", **options))
    assert first == _committed(client, TOPIC)
    assert sorted(json.loads(r[6])["n"] for r in first) == [1, 2, 3, 4]

    txn.commit_transaction()
    _plain(client, TOPIC, 0, [6])
    second = _rows(_available_now(spark, tmp_path / "checkpoint", **options))
    assert sorted(json.loads(r[6])["n"] for r in second) == [5, 6]
    assert sorted(first + second) == _committed(client, TOPIC)


def _delete_records(client: httpx.Client, topic: str, partition: int, offset: int) -> None:
    ok(client.post(f"/v1/topics/{topic}/partitions/{partition}/delete-records", json={"offset": offset}))


def test_records_deleted_below_the_querys_position_stop_it_or_with_failOnDataLoss_false_it_goes_on_from_the_log_start(
        spark, backend, url, client, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    _create(client, "short", 1)
    _plain(client, "short", 0, list(range(10)))
    options = {"url": url, "databaseUrl": backend.url, "topics": "short"}
    checkpoint = tmp_path / "checkpoint"
    assert len(_rows(_available_now(spark, checkpoint, **options))) == 10
    _plain(client, "short", 0, list(range(10, 20)))
    _delete_records(client, "short", 0, 15)  # the query is at 10: 10..14 deleted unread

    with pytest.raises(Exception) as caught:
        _available_now(spark, checkpoint, **options)
    line = "DataLossError: data loss: short/0: committed position 10 is below the log start 15"
    assert line in str(caught.value)
    (said,) = [s for s in str(caught.value).splitlines() if line in s]
    assert said.strip().endswith("(failOnDataLoss=false starts at the log start instead)")

    rows = _rows(_available_now(spark, checkpoint, **options, failOnDataLoss="false"))
    assert [r[2] for r in rows] == [15, 16, 17, 18, 19]

    # The WARNING comes from the reader's planning (in Spark's Python planner process; here
    # in this one, to see it).
    from spark_jobs.source_options import parse_options
    from spark_jobs.stream_source import OutboxStreamReader

    reader = OutboxStreamReader(parse_options({**options, "failOnDataLoss": "false"}), None)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="spark_jobs.datasource"):
        (split,) = [p.split for p in reader.partitions({"short": {"0": 10}}, {"short": {"0": 20}})]
    assert (split.range.start, split.range.end) == (15, 20)
    assert [r.getMessage() for r in caplog.records] == [
        "data loss: short/0: committed position 10 is below the log start 15, so records in [10, 15) were "
        "deleted before the group read them; starting at the log start"]


def test_commit_group_shows_the_querys_end_positions_as_the_groups_offsets_with_no_lag(spark, backend, url, client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _create(client, TOPIC, 2)
    _plain(client, TOPIC, 0, [1, 2, 3])
    _plain(client, TOPIC, 1, [4, 5])
    _available_now(spark, tmp_path / "checkpoint", url=url, databaseUrl=backend.url, topics=TOPIC,
                   maxRecordsPerTrigger="2", commitGroup="lake-loader")

    offsets = ok(client.get("/v1/groups/lake-loader/offsets", params={"topic": TOPIC}))["offsets"]
    assert {(o["partition"], o["offset"]) for o in offsets} == {(0, 3), (1, 2)}
    lag = ok(client.get("/v1/groups/lake-loader/lag"))
    assert lag["total_lag"] == 0
