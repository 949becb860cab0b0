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
from spark_jobs.common.positions import LogBounds, TopicPartition
from tests.e2e.api import ok
from tests.spark.test_datasource import _api_rows, _spark_rows

TOPIC = "stream"
T0, T1, T2 = (TopicPartition(TOPIC, p) for p in range(3))
RUN_TIMEOUT_S = 120


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
                                                      "maxOffsetsPerTrigger": "25"},
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
    options = {"url": url, "databaseUrl": backend.url, "topics": TOPIC, "maxOffsetsPerTrigger": "3"}

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
    from spark_jobs.reader.options import parse_options
    from spark_jobs.reader.stream import OutboxStreamReader

    reader = OutboxStreamReader(parse_options({**options, "failOnDataLoss": "false"}), None)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="spark_jobs.reader.planning"):
        (split,) = [p.split for p in reader.partitions({"short": {"0": 10}}, {"short": {"0": 20}})]
    assert (split.range.start, split.range.end) == (15, 20)
    # The reader's warnings only: the INFO lines of the HTTP calls above are captured too where an
    # earlier test in this process left the root logger at INFO, and so are the warnings of a
    # Kafka client an earlier test in this process left reconnecting in its own thread.
    assert [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and r.name.startswith("spark_jobs.")] == [
        "data loss: short/0: committed position 10 is below the log start 15, so records in [10, 15) were "
        "deleted before the group read them; starting at the log start"]


def test_commit_group_shows_the_querys_end_positions_as_the_groups_offsets_with_no_lag(spark, backend, url, client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _create(client, TOPIC, 2)
    _plain(client, TOPIC, 0, [1, 2, 3])
    _plain(client, TOPIC, 1, [4, 5])
    _available_now(spark, tmp_path / "checkpoint", url=url, databaseUrl=backend.url, topics=TOPIC,
                   maxOffsetsPerTrigger="2", commitGroup="lake-loader")

    offsets = ok(client.get("/v1/groups/lake-loader/offsets", params={"topic": TOPIC}))["offsets"]
    assert {(o["partition"], o["offset"]) for o in offsets} == {(0, 3), (1, 2)}
    lag = ok(client.get("/v1/groups/lake-loader/lag"))
    assert lag["total_lag"] == 0


# --- Offsets and admission control, without Spark -----------------------------------------------


def test_admit_takes_everything_that_fits_in_the_limit() -> None:
    from spark_jobs.reader.stream import admit

    assert admit({T0: 10, T1: 0, T2: 5}, None) == {T0: 10, T1: 0, T2: 5}
    assert admit({T0: 10, T1: 0, T2: 5}, 15) == {T0: 10, T1: 0, T2: 5}


def test_admit_shares_the_limit_in_proportion_to_what_each_partition_has_waiting() -> None:
    from spark_jobs.reader.stream import admit

    # 7 of 40: 1.75, 5.25 and 0; the one position left over goes to the largest remainder
    assert admit({T0: 10, T1: 30, T2: 0}, 7) == {T0: 2, T1: 5, T2: 0}
    # ties go to the first partitions; never more than a partition has, exactly the limit in all
    assert admit({T0: 1, T1: 1, T2: 1}, 2) == {T0: 1, T1: 1, T2: 0}
    for waiting in ({T0: 1, T1: 1000, T2: 3}, {T0: 999, T1: 1, T2: 0}, {T0: 7, T1: 7, T2: 7}):
        for limit in (1, 2, 5, 20):
            taken = admit(waiting, limit)
            assert sum(taken.values()) == min(limit, sum(waiting.values()))
            assert all(0 <= taken[tp] <= waiting[tp] for tp in waiting)


def test_next_end_moves_each_partition_up_by_its_share_from_where_it_is() -> None:
    from spark_jobs.reader.stream import next_end

    bounds = {T0: LogBounds(0, 20), T1: LogBounds(0, 5)}
    assert next_end({T0: 5, T1: 5}, bounds, None) == {T0: 20, T1: 5}
    assert next_end({T0: 5, T1: 5}, bounds, 4) == {T0: 9, T1: 5}
    assert next_end({T0: 20, T1: 5}, bounds, 4) == {T0: 20, T1: 5}, "nothing new: the start again"


def test_next_end_starts_new_partitions_at_their_log_start_and_keeps_vanished_ones() -> None:
    from spark_jobs.reader.stream import next_end

    other = TopicPartition("gone", 0)
    assert next_end({T0: 4, other: 9}, {T0: LogBounds(0, 4), T1: LogBounds(3, 10)}, None) == {
        T0: 4, T1: 10, other: 9}
    assert next_end({T0: 4}, {T0: LogBounds(0, 4), T1: LogBounds(3, 10)}, 2) == {T0: 4, T1: 5}


def test_next_end_past_deleted_records_counts_from_the_log_start() -> None:
    """A start below the log start: the limit is spent from the log start on, and the end is at
    least the log start, so that a micro-batch comes and its planning reports the loss."""
    from spark_jobs.reader.stream import next_end

    assert next_end({T0: 2}, {T0: LogBounds(50, 100)}, 10) == {T0: 60}
    assert next_end({T0: 2}, {T0: LogBounds(50, 50)}, 10) == {T0: 50}


def test_read_limits_are_positions_per_micro_batch() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    from spark_jobs.errors import OutboxSourceError
    from spark_jobs.reader.stream import max_positions

    assert max_positions(ReadMaxRows(250)) == 250
    assert max_positions(ReadAllAvailable()) is None
    with pytest.raises(OutboxSourceError, match="not ReadMinRows"):
        max_positions(ReadMinRows(5))


def _reader(**options: str):  # type: ignore[no-untyped-def]
    from spark_jobs.reader.options import parse_options
    from spark_jobs.reader.stream import OutboxStreamReader

    return OutboxStreamReader(parse_options({"url": "http://outbox", "databaseUrl": "sqlite:///x.db",
                                             "topics": TOPIC, **options}), None)  # type: ignore[arg-type]


def test_stream_options_are_checked_with_one_line_errors() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from spark_jobs.errors import OutboxSourceError

    assert _reader().getDefaultReadLimit() == ReadAllAvailable()
    assert _reader(maxOffsetsPerTrigger="500").getDefaultReadLimit() == ReadMaxRows(500)
    with pytest.raises(OutboxSourceError, match=r"^option maxOffsetsPerTrigger: expected a positive whole number, not '0'$"):
        _reader(maxOffsetsPerTrigger="0")
    with pytest.raises(OutboxSourceError, match=r"^option endingPositions is for batch reads"):
        _reader(endingPositions='{"stream": {"0": 5}}')


def test_the_old_name_max_records_per_trigger_still_limits_positions_with_a_deprecation_warning() -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    with pytest.deprecated_call(match="maxRecordsPerTrigger .* is now called maxOffsetsPerTrigger"):
        reader = _reader(maxrecordspertrigger="500")
    assert reader.getDefaultReadLimit() == ReadMaxRows(500)


def test_the_old_and_the_new_name_of_the_trigger_limit_together_are_refused() -> None:
    from spark_jobs.errors import OutboxSourceError

    with pytest.raises(OutboxSourceError, match=r"^option maxRecordsPerTrigger is the deprecated name of "
                                                r"maxOffsetsPerTrigger: give only maxOffsetsPerTrigger$"):
        _reader(maxRecordsPerTrigger="5", maxOffsetsPerTrigger="5")


def test_the_deprecated_option_name_is_not_listed_as_known() -> None:
    from spark_jobs.errors import OutboxSourceError

    with pytest.raises(OutboxSourceError, match="known: .*maxOffsetsPerTrigger") as refused:
        _reader(maxRowsPerTrigger="5")
    assert "maxRecordsPerTrigger" not in str(refused.value)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_initial_offsets_follow_starting_positions_and_latest_offsets_the_log_ends(backend, url, client) -> None:  # type: ignore[no-untyped-def]
    """The reader's offsets against a real service, without Spark: startingPositions earliest,
    latest, JSON and group as the initial offset; latestOffset's end with and without the
    limit; with availableNow, nothing past the log ends when the query started."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    _create(client, TOPIC, 2)
    _plain(client, TOPIC, 0, list(range(6)))
    _plain(client, TOPIC, 1, list(range(2)))
    _delete_records(client, TOPIC, 0, 1)
    base = {"url": url, "databaseUrl": backend.url}
    assert _reader(**base).initialOffset() == {TOPIC: {"0": 1, "1": 0}}
    assert _reader(**base, startingPositions="latest").initialOffset() == {TOPIC: {"0": 6, "1": 2}}
    assert _reader(**base, startingPositions='{"stream": {"1": 1}}').initialOffset() == {TOPIC: {"0": 1, "1": 1}}
    ok(client.post("/v1/groups/g/offsets", json={"offsets": [{"topic": TOPIC, "partition": 0, "offset": 4}]}))
    assert _reader(**base, startingPositions="group", group="g").initialOffset() == {TOPIC: {"0": 4, "1": 0}}

    reader = _reader(**base)
    assert reader.latestOffset({TOPIC: {"0": 1, "1": 0}}, ReadMaxRows(4)) == {TOPIC: {"0": 4, "1": 1}}
    assert reader.latestOffset({TOPIC: {"0": 4, "1": 1}}, ReadAllAvailable()) == {TOPIC: {"0": 6, "1": 2}}
    assert reader.reportLatestOffset() == {TOPIC: {"0": 6, "1": 2}}
    reader.prepareForTriggerAvailableNow()
    _plain(client, TOPIC, 1, [7])
    assert reader.latestOffset({TOPIC: {"0": 6, "1": 2}}, ReadAllAvailable()) == {TOPIC: {"0": 6, "1": 2}}
    assert _reader(**base).latestOffset({TOPIC: {"0": 6, "1": 2}}, ReadAllAvailable()) == {TOPIC: {"0": 6, "1": 3}}
    # A micro-batch's tasks: its ranges, cut into splits of positionsPerSplit.
    splits = [p.split.range for p in _reader(**base, positionsPerSplit="2").partitions(
        {TOPIC: {"0": 1, "1": 2}}, {TOPIC: {"0": 6, "1": 3}})]
    assert [(r.partition, r.start, r.end) for r in splits] == [(0, 1, 2), (0, 2, 4), (0, 4, 6), (1, 2, 3)]


def _counting_snapshots(monkeypatch, bounds):  # type: ignore[no-untyped-def]
    """The stream reader's snapshots answered from `bounds`, each call recorded."""
    from spark_jobs.reader import stream

    taken: list[object] = []

    def snapshot(options, topics_wanted, **kwargs):  # type: ignore[no-untyped-def]
        taken.append(topics_wanted)
        return dict(bounds)

    monkeypatch.setattr(stream, "snapshot", snapshot)
    return taken


def test_a_micro_batch_describes_its_topics_once_for_its_end_its_report_and_its_plan(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    taken = _counting_snapshots(monkeypatch, {TopicPartition(TOPIC, 0): LogBounds(0, 10)})
    reader = _reader()
    start = {TOPIC: {"0": 4}}

    end = reader.latestOffset(start, ReadAllAvailable())
    reader.reportLatestOffset()
    splits = [p.split for p in reader.partitions(start, end)]

    assert len(taken) == 1
    assert [(s.range.start, s.range.end) for s in splits] == [(4, 10)]


def test_a_micro_batch_planned_from_the_checkpoint_describes_its_topics_anew(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    taken = _counting_snapshots(monkeypatch, {TopicPartition(TOPIC, 0): LogBounds(0, 10)})
    reader = _reader()
    reader.latestOffset({TOPIC: {"0": 4}}, ReadAllAvailable())

    # Another end than the one latestOffset chose: a restarted query's logged micro-batch.
    splits = [p.split for p in reader.partitions({TOPIC: {"0": 0}}, {TOPIC: {"0": 3}})]

    assert len(taken) == 2
    assert [(s.range.start, s.range.end) for s in splits] == [(0, 3)]
