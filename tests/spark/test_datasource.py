"""The `outbox` data source (spark.read.format("outbox")): exactly the read_committed records,
positions, topics, pruning seen in the queries it runs, value schemas, and its errors. On
SQLite and PostgreSQL, against a real `serve`."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from spark_jobs import datasource
from spark_jobs.errors import DataLossError, OutboxSourceError
from spark_jobs.common.positions import TopicPartition, TopicRange, positions_to_json
from tests.conftest import ADMIN_URL, require_postgres
from tests.e2e.api import ok
from tests.log_start import move_log_start
from tests.spark.logbuilder import LogBuilder, read_committed_api
from tests.spark.test_reader import PARTITIONS, TOPIC, _mixed_log


def read_outbox(spark, **options: str):  # type: ignore[no-untyped-def]
    """This file holds the Python data source to its behaviour: every read here is its
    (tests/spark/test_jvm_reader.py holds the JVM read to the same rows)."""
    return datasource.read_outbox(spark, reader="python", **options)


def _api_rows(client: httpx.Client, topic: str, ranges: dict[int, tuple[int, int]]) -> list[tuple]:
    """What read_committed Fetches return for each partition's [start, end), as rows of the
    data source's columns."""
    out = []
    for partition, (start, end) in sorted(ranges.items()):
        for r in read_committed_api(client, topic, partition, start, end):
            out.append((topic, partition, r["offset"], r["commit_position"], r["timestamp_ms"], r["key"],
                        json.dumps(r["value"], sort_keys=True), tuple(sorted((r["headers"] or {}).items()))))
    return sorted(out)


def _spark_rows(df) -> list[tuple]:  # type: ignore[no-untyped-def]
    out = []
    for row in df.collect():
        millis = round(row["timestamp"].replace(tzinfo=timezone.utc).timestamp() * 1000)
        out.append((row["topic"], row["partition"], row["offset"], row["commit_position"], millis, row["key"],
                    json.dumps(json.loads(row["value"]), sort_keys=True),
                    tuple(sorted((row["headers"] or {}).items()))))
    return sorted(out)


def _queries(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_reads_exactly_the_read_committed_records_up_to_the_ending_positions(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    """Plain, idempotent and committed transactional records, each at its commit position;
    nothing of aborted or open transactions, no control markers; a transaction that commits
    after the snapshot of the ends is left out whole although its records sit below them."""
    log = LogBuilder(client, TOPIC)
    _mixed_log(log)
    ends = log.log_ends()
    expected = _api_rows(client, TOPIC, {p: (0, e) for p, e in ends.items()})
    log.commit("late")  # its COMMIT marker lands past `ends`, its records below
    for p in range(PARTITIONS):
        log.plain(p, 2, tag="after-snapshot")

    ending = positions_to_json({TopicPartition(TOPIC, p): e for p, e in ends.items()})
    df = read_outbox(spark, url=url, databaseUrl=backend.url, topics=TOPIC, endingPositions=ending)

    assert _spark_rows(df) == expected
    tags = {json.loads(r[6])["tag"] for r in expected}
    assert tags == {"plain", "x1", "x2", "idempotent"}, "no aborted, open, late or later records"
    # With the ends at the log end now (the default, latest), the late transaction is there.
    now = _spark_rows(read_outbox(spark, url=url, databaseUrl=backend.url, topics=TOPIC))
    assert now == _api_rows(client, TOPIC, {p: (0, e) for p, e in log.log_ends().items()})
    assert {json.loads(r[6])["tag"] for r in now} == tags | {"late", "after-snapshot"}


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_adbc_driver_reads_the_same_records_as_psycopg(spark, backend, url, client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = LogBuilder(client, TOPIC)
    _mixed_log(log)
    queries = tmp_path / "queries.jsonl"
    expected = _api_rows(client, TOPIC, {p: (0, e) for p, e in log.log_ends().items()})
    for driver in ("psycopg", "adbc"):
        df = read_outbox(spark, url=url, databaseUrl=backend.url, topics=TOPIC, driver=driver, queryLog=str(queries))
        assert _spark_rows(df) == expected, driver
        assert _spark_rows(df.where("partition = 2 AND offset >= 10 AND offset < 12")) == [
            r for r in expected if r[1] == 2 and 10 <= r[2] < 12]
    parsed = read_outbox(spark, url=url, databaseUrl=backend.url, topics=TOPIC, driver="adbc", valueSchema="n INT, tag STRING")
    assert sorted(r["value"]["n"] for r in parsed.collect()) == sorted(json.loads(r[6])["n"] for r in expected)


def test_starting_positions_earliest_latest_json_and_a_groups_committed_offsets(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    log = LogBuilder(client, TOPIC)
    _mixed_log(log)
    ends = log.log_ends()
    read = lambda **o: _spark_rows(read_outbox(spark, url=url, databaseUrl=backend.url, topics=TOPIC, **o))  # noqa: E731

    assert read(startingPositions="earliest") == _api_rows(client, TOPIC, {p: (0, e) for p, e in ends.items()})
    assert read(startingPositions="latest") == []
    # JSON: an offset, -2 (earliest), and a partition left out (earliest too).
    starts = {0: 7, 1: 0}
    assert read(startingPositions=json.dumps({TOPIC: {"0": 7, "1": -2}})) == _api_rows(
        client, TOPIC, {p: (starts.get(p, 0), e) for p, e in ends.items()})
    # A group's committed offsets; a partition it never committed starts at the log start.
    ok(client.post("/v1/groups/spark-readers/offsets", json={"offsets": [
        {"topic": TOPIC, "partition": 0, "offset": 4}, {"topic": TOPIC, "partition": 2, "offset": 9}]}))
    assert read(startingPositions="group", group="spark-readers") == _api_rows(
        client, TOPIC, {0: (4, ends[0]), 1: (0, ends[1]), 2: (9, ends[2])})
    # Ending positions as JSON, with -1 for the log end.
    assert read(startingPositions=json.dumps({TOPIC: {"1": 3}}),
                endingPositions=json.dumps({TOPIC: {"0": 6, "1": -1, "2": 0}})) == _api_rows(
        client, TOPIC, {0: (0, 6), 1: (3, ends[1]), 2: (0, 0)})


def test_a_start_below_the_log_start_is_data_loss_unless_asked_to_go_on(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    log = LogBuilder(client, "short")
    log.create(1)
    log.plain(0, 10)
    move_log_start(backend.engine, "short", 0, 6)  # as retention or DeleteRecords would
    below = json.dumps({"short": {"0": 2}})
    with pytest.raises(DataLossError, match=r"short/0: committed position 2 is below the log start 6"):
        read_outbox(spark, url=url, databaseUrl=backend.url, topics="short", startingPositions=below)
    rows = read_outbox(spark, url=url, databaseUrl=backend.url, topics="short", startingPositions=below,
                       failOnDataLoss="false").collect()
    assert [r["offset"] for r in rows] == [6, 7, 8, 9]


def test_topics_by_list_or_by_pattern(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    for name in ("orders-eu", "orders-us", "refunds"):
        log = LogBuilder(client, name)
        log.create(2)
        log.plain(0, 2, tag=name)
        log.plain(1, 1, tag=name)

    def topics(**o: str) -> dict[str, int]:
        df = read_outbox(spark, url=url, databaseUrl=backend.url, **o)
        return {r["topic"]: r["count"] for r in df.groupBy("topic").count().collect()}

    assert topics(topics="orders-us,refunds") == {"orders-us": 3, "refunds": 3}
    assert topics(topicPattern=r"orders-.*") == {"orders-eu": 3, "orders-us": 3}
    assert topics(topicPattern=r"orders") == {}  # the whole name must match, as in Kafka


def test_filters_keep_exactly_their_rows_and_reach_no_query(spark, backend, url, client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Spark applies the filters to what the data source reads: the rows are those the same
    filter keeps of a whole read, and every partition is queried for its whole range (the
    reader takes no filters: spark_jobs.reader.batch)."""
    log = LogBuilder(client, TOPIC)
    _mixed_log(log)
    other = LogBuilder(client, "other")
    other.create(2)
    other.plain(0, 3)
    ends = log.log_ends()
    queries = tmp_path / "queries.jsonl"
    df = read_outbox(spark, url=url, databaseUrl=backend.url, topics=f"{TOPIC},other", queryLog=str(queries))
    whole = _spark_rows(df)

    for condition in (f"topic = '{TOPIC}' AND partition = 1", "partition IN (0, 2) AND topic = 'other'",
                      f"topic = '{TOPIC}' AND partition >= 1 AND commit_position >= 5 AND commit_position < 12",
                      f"topic = '{TOPIC}' AND partition = 0 AND offset >= 8",
                      f"topic = '{TOPIC}' AND commit_position > {max(ends.values())}"):
        queries.unlink(missing_ok=True)
        assert _spark_rows(df.where(condition)) == sorted(r for r in whole if _keeps(condition, r)), condition
        ran = _queries(queries)
        assert sorted({(q["topic"], q["partition"]) for q in ran}) == (
            [(TOPIC, p) for p in range(PARTITIONS)] + [("other", 0)]), condition
        where = [q["sql"].split(" WHERE ", 1)[1] for q in ran]
        assert not [w for w in where if '"offset" >=' in w or "timestamp_ms" in w], condition


def test_a_dataframe_read_again_after_a_filtered_query_of_it_reads_every_partition(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    """A filter belongs to its query: the same DataFrame read after a filtered query of it, or
    filtered another way, reads what it would have read first."""
    log = LogBuilder(client, TOPIC)
    _mixed_log(log)
    ends = log.log_ends()
    every = _api_rows(client, TOPIC, {p: (0, e) for p, e in ends.items()})
    df = read_outbox(spark, url=url, databaseUrl=backend.url, topics=TOPIC)

    assert _spark_rows(df.where("partition = 1")) == [r for r in every if r[1] == 1]
    assert _spark_rows(df) == every
    assert _spark_rows(df.where("partition = 0")) == [r for r in every if r[1] == 0]
    assert _spark_rows(df.where("partition = 2")) == [r for r in every if r[1] == 2]


def _keeps(condition: str, row: tuple) -> bool:
    """The test's filters, in Python, on a row (topic, partition, offset, commit_position, …)."""
    env = {"topic": row[0], "partition": row[1], "offset": row[2], "commit_position": row[3]}
    expr = (condition.replace(" AND ", " and ").replace(" = ", " == ").replace(" IN ", " in "))
    return bool(eval(expr, {}, env))  # noqa: S307 - the test's own literals


def test_position_ranges_are_cut_into_splits_that_tile_them(spark, backend, url, client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = LogBuilder(client, TOPIC)
    _mixed_log(log)
    ends = log.log_ends()
    queries = tmp_path / "queries.jsonl"
    df = read_outbox(spark, url=url, databaseUrl=backend.url, topics=TOPIC, positionsPerSplit="5",
                     queryLog=str(queries))
    assert df.rdd.getNumPartitions() == sum(-(-e // 5) for e in ends.values())
    assert _spark_rows(df) == _api_rows(client, TOPIC, {p: (0, e) for p, e in ends.items()})
    for p, end in ends.items():
        cuts = sorted((int(q["sql"].split("commit_position >= ")[1].split()[0]),
                       int(q["sql"].split("commit_position < ")[1].split()[0]))
                      for q in _queries(queries) if q["partition"] == p)
        assert cuts[0][0] == 0 and cuts[-1][1] == end
        assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:])) and all(0 < hi - lo <= 5 for lo, hi in cuts)


def test_value_parsed_with_a_schema_and_headers_left_out(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    ok(client.post("/v1/topics", json={"name": "orders", "partitions": 1}), 201)
    ok(client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [
        {"key": "o-1", "value": {"order_id": 1, "meal": "Pizza", "value": 9.5, "extra": [1]}, "headers": {"src": "till-1"}},
        {"key": "o-2", "value": {"order_id": 2, "meal": "Salad"}},
        {"key": "o-3", "value": "not an object"},
        {"key": "o-4", "value": {"order_id": "not a number", "meal": "Pasta"}},
        {"key": "o-5"},  # no value: a tombstone
    ]}]}))
    schema = "order_id BIGINT, meal STRING, value DOUBLE"

    df = read_outbox(spark, url=url, databaseUrl=backend.url, topics="orders", valueSchema=schema)
    assert df.schema["value"].dataType.simpleString() == "struct<order_id:bigint,meal:string,value:double>"
    values = [r["value"] and r["value"].asDict() for r in df.orderBy("offset").collect()]
    assert values == [
        {"order_id": 1, "meal": "Pizza", "value": 9.5},
        {"order_id": 2, "meal": "Salad", "value": None},  # a field the object lacks: null
        {"order_id": None, "meal": None, "value": None},  # not an object: every field null
        {"order_id": None, "meal": None, "value": None},  # not of the schema: every field null
        None,  # a tombstone: no value at all
    ]
    assert df.where("value.meal = 'Pizza'").count() == 1

    bare = read_outbox(spark, url=url, databaseUrl=backend.url, topics="orders", includeHeaders="false")
    assert bare.columns == ["topic", "partition", "offset", "commit_position", "timestamp", "key", "value"]
    assert [r["value"] for r in bare.orderBy("offset").collect()][:1] == [
        '{"order_id":1,"meal":"Pizza","value":9.5,"extra":[1]}']


def test_registered_data_source_reads_through_spark_read_format(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    """register(spark) once; then plain spark.read.format("outbox") works, options in any case."""
    from spark_jobs.datasource import register

    log = LogBuilder(client, TOPIC)
    log.create(1)
    log.plain(0, 3)
    register(spark)
    df = (spark.read.format("outbox").option("URL", url).option("databaseurl", backend.url)
          .option("topics", TOPIC).load())
    assert [r["offset"] for r in df.orderBy("offset").collect()] == [0, 1, 2]


# --- Errors: one line each, before Spark runs anything --------------------------------------


def _error(spark, **options: str) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(OutboxSourceError) as caught:
        read_outbox(spark, **options)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def test_option_mistakes_are_one_line_errors(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = f"sqlite:///{tmp_path}/none.db"
    base = {"url": "http://127.0.0.1:9", "databaseUrl": db, "topics": "orders"}
    assert "unknown option 'startingOffsets'" in _error(spark, **base, startingOffsets="earliest")
    assert "option url is required" in _error(spark, databaseUrl=db, topics="orders")
    assert "exactly one of the options topics" in _error(spark, **{**base, "topicPattern": "o.*"})
    assert "option startingPositions: not JSON" in _error(spark, **base, startingPositions="{orders: 1}")
    assert "position 'x' is not an offset" in _error(spark, **base, startingPositions='{"orders": {"0": "x"}}')
    assert "names topics this read does not read: refunds" in _error(
        spark, **base, endingPositions='{"refunds": {"0": 5}}')
    assert "option group is required" in _error(spark, **base, startingPositions="group")
    assert "option failOnDataLoss: expected true or false" in _error(spark, **base, failOnDataLoss="maybe")
    assert "option driver: expected adbc or psycopg, not 'jdbc'" in _error(spark, **base, driver="jdbc")
    assert "option valueSchema" in _error(spark, **base, valueSchema="order_id BIGGINT,")


def test_unreachable_missing_or_unmigrated_databases_and_services_are_one_line_errors(spark, tmp_path, migrated_sqlite) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    no_service = "http://127.0.0.1:9"
    assert f"no SQLite database at {tmp_path}/none.db" in _error(
        spark, url=no_service, databaseUrl=f"sqlite:///{tmp_path}/none.db", topics="t")
    sqlite3.connect(tmp_path / "empty.db").close()
    assert "has no committed_records view with batch_position: it is not an outbox database migrated to 0020" in _error(
        spark, url=no_service, databaseUrl=f"sqlite:///{tmp_path}/empty.db", topics="t")
    assert "cannot read the database postgresql://postgres@127.0.0.1:9/outbox" in _error(
        spark, url=no_service, databaseUrl="postgresql://postgres@127.0.0.1:9/outbox", topics="t")
    require_postgres()
    from sqlalchemy.engine import make_url

    missing = make_url(ADMIN_URL).set(database="outbox_no_such_database").render_as_string(hide_password=False)
    assert 'database "outbox_no_such_database" does not exist' in _error(
        spark, url=no_service, databaseUrl=missing, topics="t")
    # the server's maintenance database: reachable, but not an outbox database
    assert "has no committed_records view" in _error(spark, url=no_service, databaseUrl=ADMIN_URL, topics="t")

    assert "cannot reach the outbox service at http://127.0.0.1:9" in _error(
        spark, url=no_service, databaseUrl=f"sqlite:///{migrated_sqlite}", topics="t")


def test_a_database_that_is_not_the_services_own_is_a_one_line_error(spark, backend, url, client, migrated_sqlite) -> None:  # type: ignore[no-untyped-def]
    """Another outbox database (migrated, the same topic, fewer records): the positions would
    come from the service and the records from that database. Refused before any read."""
    ok(client.post("/v1/topics", json={"name": "mine", "partitions": 1}), 201)
    from app.client import Producer

    producer = Producer(url)
    producer.send("mine", 1, partition=0)
    producer.send("mine", 2, partition=0)
    producer.flush()
    producer.close()
    other = f"sqlite:///{migrated_sqlite}"
    assert (f"option databaseUrl: {migrated_sqlite} is not the database of the service at {url}: the "
            "service's mine/0 ends at 2, the database has no such partition") in _error(spark, url=url, databaseUrl=other,
                                                                          topics="mine")
    assert read_outbox(spark, url=url, databaseUrl=backend.url, topics="mine").count() == 2


def test_an_unknown_topic_is_a_one_line_error(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    assert "topic 'nope' does not exist" in _error(spark, url=url, databaseUrl=backend.url, topics="nope")
    # Through Spark alone, the same line, when Spark plans the read.
    from spark_jobs.datasource import register

    register(spark)
    df = spark.read.format("outbox").options(url=url, databaseUrl=backend.url, topics="nope").load()
    with pytest.raises(Exception, match=r"OutboxSourceError: topic 'nope' does not exist"):
        df.collect()


def test_a_bytes_topic_is_a_one_line_error(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    ok(client.post("/v1/topics", json={"name": "raw", "config": {"value_format": "bytes"}}), 201)

    assert _error(spark, url=url, databaseUrl=backend.url, topics="raw") == (
        "topic 'raw' is a bytes topic: the outbox data source reads json topics only (option topics)")


def test_errors_through_spark_read_format_name_the_problem(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Without the helper, Spark wraps the error, but its line is there at load(), before any job."""
    from pyspark.errors import AnalysisException

    from spark_jobs.datasource import register

    register(spark)
    with pytest.raises(AnalysisException, match=r"OutboxSourceError: unknown option 'subscribe'"):
        spark.read.format("outbox").option("subscribe", "orders").load()


def test_positions_json_round_trips_in_the_kafka_sources_form() -> None:
    from spark_jobs.common.positions import positions_from_json

    positions = {TopicPartition("orders", 1): 23, TopicPartition("orders", 0): -2, TopicPartition("b", 3): -1}
    text = positions_to_json(positions)
    assert text == '{"b":{"3":-1},"orders":{"0":-2,"1":23}}'
    assert positions_from_json(text) == positions
    assert TopicRange("orders", 0, 5, 3).size == 0


# --- Planning, without Spark running anything --------------------------------------------------


def _plan(filters: list, committed: dict[TopicPartition, int] | None = None,  # type: ignore[type-arg]
          **options: str) -> list[tuple]:  # type: ignore[type-arg]
    from spark_jobs.reader.planning import plan_ranges, prune
    from spark_jobs.common.positions import LogBounds
    from spark_jobs.reader.options import parse_options

    parsed = parse_options({"url": "http://outbox", "databaseUrl": "sqlite:///x.db", "topics": "a,b", **options})
    bounds = {TopicPartition(t, p): LogBounds(10, 100) for t in ("a", "b") for p in range(3)}
    pruning, _rest = prune(filters)
    return [(r.topic, r.partition, r.start, r.end)
            for r in plan_ranges(parsed, bounds, committed or {}, pruning).ranges]


def test_a_group_position_past_the_high_watermark_reads_nothing_there() -> None:
    """An HTTP consumer may commit a position past the high watermark (the commit points past it
    are handed out while a transaction whose Sends are not durable yet holds it back): the read
    from the group's offsets reads nothing in that partition, as a Kafka consumer there waits,
    and the others as usual."""
    committed = {TopicPartition("a", 0): 105, TopicPartition("a", 1): 40}
    assert _plan([], committed, startingPositions="group", group="g") == [
        ("a", 1, 40, 100), ("a", 2, 10, 100), ("b", 0, 10, 100), ("b", 1, 10, 100), ("b", 2, 10, 100)]


def test_planning_prunes_partitions_and_narrows_ranges_by_the_pushed_filters() -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

    everything = [(t, p, 10, 100) for t in ("a", "b") for p in range(3)]
    assert _plan([]) == everything
    assert _plan([EqualTo(("topic",), "b"), In(("partition",), (0, 2, 7))]) == [("b", 0, 10, 100), ("b", 2, 10, 100)]
    assert _plan([GreaterThan(("partition",), 0), LessThanOrEqual(("partition",), 1), EqualTo(("topic",), "a")]) == [
        ("a", 1, 10, 100)]
    assert _plan([EqualTo(("topic",), "a"), EqualTo(("partition",), 0), GreaterThanOrEqual(("commit_position",), 40),
                  LessThan(("commit_position",), 50)]) == [("a", 0, 40, 50)]
    # offset >= x bounds commit positions from below; offset < y does not bound them above
    assert _plan([EqualTo(("topic",), "a"), EqualTo(("partition",), 0), GreaterThan(("offset",), 60),
                  LessThan(("offset",), 70)]) == [("a", 0, 61, 100)]
    # ranges that the filters empty get no split at all
    assert _plan([GreaterThanOrEqual(("commit_position",), 100)]) == []
    assert _plan([EqualTo(("topic",), "c")]) == []


def test_timestamp_filters_become_millisecond_bounds_that_spark_still_checks() -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual

    from spark_jobs.reader.planning import prune

    at = datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=timezone.utc)  # not a whole millisecond
    ms = int(at.timestamp() * 1000)  # floor
    cases = {GreaterThan: (ms + 1, None), GreaterThanOrEqual: (ms + 1, None), LessThan: (None, ms + 1),
             LessThanOrEqual: (None, ms + 1), EqualTo: (ms + 1, ms + 1)}
    for kind, (low, high) in cases.items():
        f = kind(("timestamp",), at)
        pruning, rest = prune([f])
        assert (pruning.timestamps_ms.low, pruning.timestamps_ms.high) == (low, high), kind.__name__
        assert rest == [f]
    whole = at.replace(microsecond=678_000)
    assert prune([GreaterThan(("timestamp",), whole)])[0].timestamps_ms.low == ms + 1
    assert prune([GreaterThanOrEqual(("timestamp",), whole)])[0].timestamps_ms.low == ms


def test_planning_refuses_positions_outside_the_log() -> None:
    with pytest.raises(DataLossError, match=r"a/1: committed position 3 is below the log start 10"):
        _plan([], startingPositions='{"a": {"1": 3}}')
    assert ("a", 1, 10, 100) in _plan([], startingPositions='{"a": {"1": 3}}', failOnDataLoss="false")
    with pytest.raises(OutboxSourceError, match=r"endingPositions: b/2 ends at 101, past its high watermark 100"):
        _plan([], endingPositions='{"b": {"2": 101}}')
    with pytest.raises(OutboxSourceError, match=r"a/0: the start 50 is past the end 40"):
        _plan([], startingPositions='{"a": {"0": 50}}', endingPositions='{"a": {"0": 40}}')


def test_a_range_of_no_position_is_planned_whatever_the_bounds() -> None:
    """Nothing to read claims no position: a micro-batch's partition with nothing new, whose
    start may be a group's offset past the high watermark, is left out, not refused."""
    at = '{"b": {"2": 101}}'
    assert ("b", 2) not in [(t, p) for t, p, _, _ in _plan([], startingPositions=at, endingPositions=at)]
