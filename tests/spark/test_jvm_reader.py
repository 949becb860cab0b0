"""The JVM read (read_outbox with reader="jvm": the data source's plan read by Spark's JDBC
reader) returns exactly the rows, columns and errors of the Python data source (reader=
"python") for the same options, on SQLite and PostgreSQL; reader="auto" takes it when the
JDBC driver is loaded."""

from __future__ import annotations

import json

import pytest

from spark_jobs.datasource import read_outbox
from spark_jobs.errors import OutboxSourceError
from tests.e2e.api import ok
from tests.spark.logbuilder import LogBuilder
from tests.spark.test_datasource import _api_rows, _spark_rows
from tests.spark.test_reader import PARTITIONS, TOPIC, _mixed_log


def _reads_with_jdbc(df) -> bool:  # type: ignore[no-untyped-def]
    """The DataFrame scans Spark's JDBC relation (else the Python data source)."""
    return "JDBCRelation" in df._jdf.queryExecution().optimizedPlan().toString()


def _both(spark, **options: str):  # type: ignore[no-untyped-def]
    jvm = read_outbox(spark, reader="jvm", **options)
    python = read_outbox(spark, reader="python", **options)
    assert _reads_with_jdbc(jvm) and not _reads_with_jdbc(python)
    return jvm, python


def test_the_jvm_read_returns_the_data_sources_rows_and_schema_for_the_same_positions(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    """Every read_committed record up to the ends, none of aborted or open transactions, for
    each kind of starting and ending positions; the same schema."""
    log = LogBuilder(client, TOPIC)
    _mixed_log(log)
    ends = log.log_ends()
    ok(client.post("/v1/groups/spark-readers/offsets", json={"offsets": [
        {"topic": TOPIC, "partition": 0, "offset": 4}, {"topic": TOPIC, "partition": 2, "offset": 9}]}))
    cases = {
        "earliest to latest": ({}, {p: (0, e) for p, e in ends.items()}),
        "latest": ({"startingPositions": "latest"}, {}),
        "json, earliest and an end": ({"startingPositions": json.dumps({TOPIC: {"0": 7, "1": -2}}),
                                       "endingPositions": json.dumps({TOPIC: {"1": 6, "2": -1}})},
                                      {0: (7, ends[0]), 1: (0, 6), 2: (0, ends[2])}),
        "a group's offsets": ({"startingPositions": "group", "group": "spark-readers"},
                              {0: (4, ends[0]), 1: (0, ends[1]), 2: (9, ends[2])}),
        "small splits": ({"positionsPerSplit": "4"}, {p: (0, e) for p, e in ends.items()}),
    }
    for name, (options, ranges) in cases.items():
        jvm, python = _both(spark, url=url, databaseUrl=backend.url, topics=TOPIC, **options)
        expected = _api_rows(client, TOPIC, ranges)
        assert _spark_rows(jvm) == _spark_rows(python) == expected, name
        assert jvm.schema == python.schema, name
    assert {json.loads(r[6])["tag"] for r in expected} == {"plain", "x1", "x2", "idempotent"}
    # One Spark task per planned split, as the data source's; an empty read is one empty task.
    jvm, python = _both(spark, url=url, databaseUrl=backend.url, topics=TOPIC, positionsPerSplit="4")
    assert jvm.rdd.getNumPartitions() == python.rdd.getNumPartitions() == sum(-(-e // 4) for e in ends.values())
    assert read_outbox(spark, reader="jvm", url=url, databaseUrl=backend.url, topics=TOPIC,
                       startingPositions="latest").rdd.getNumPartitions() == 1


def test_filters_keep_the_same_rows_and_reach_every_splits_query(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    log = LogBuilder(client, TOPIC)
    _mixed_log(log)
    jvm, python = _both(spark, url=url, databaseUrl=backend.url, topics=TOPIC)
    conditions = ["partition = 1", "partition IN (0, 2) AND commit_position >= 5 AND commit_position < 12",
                  "partition = 0 AND offset >= 8", "commit_position = 13", "topic = 'other'"]
    for condition in conditions:
        assert _spark_rows(jvm.where(condition)) == _spark_rows(python.where(condition)), condition
    assert _spark_rows(jvm.where("partition = 1")) != []
    # Spark's JDBC pushdown puts the condition into each split's query, beside the split's bounds.
    plan = jvm.where("partition = 1 AND offset >= 8")._jdf.queryExecution().executedPlan().toString()
    assert "EqualTo(partition,1)" in plan and "GreaterThanOrEqual(offset,8)" in plan, plan


def test_a_value_schema_headers_and_their_absence_are_the_data_sources(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    ok(client.post("/v1/topics", json={"name": "orders", "partitions": 1}), 201)
    ok(client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [
        {"key": "o-1", "value": {"order_id": 1, "meal": "Pizza", "value": 9.5, "extra": [1]},
         "headers": {"src": "till-1", "trace": "t-1"}},
        {"key": "o-2", "value": {"order_id": 2, "meal": "Salad"}},
        {"key": "o-3", "value": "not an object"},
        {"key": "o-4", "value": [1, 2]},
        {"key": "o-4b", "value": {"order_id": "not a number", "meal": "Pasta"}},
        {"key": "o-5", "value": None},  # JSON null
        {"key": "o-6"},  # no value: a tombstone
        {"value": {"order_id": 7, "meal": "Pasta", "value": 12}},
    ]}]}))
    for options in ({"valueSchema": "order_id BIGINT, meal STRING, value DOUBLE"}, {"includeHeaders": "false"},
                    {"valueSchema": "order_id BIGINT, value DECIMAL(18,2)", "includeHeaders": "false"}, {}):
        jvm, python = _both(spark, url=url, databaseUrl=backend.url, topics="orders", **options)
        assert jvm.schema == python.schema, options
        assert jvm.orderBy("offset").collect() == python.orderBy("offset").collect(), options


def test_the_jvm_reads_schema_is_the_data_sources_for_every_option_that_shapes_it(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    """The same names, types, order, nullability (topic, partition, offset, commit_position and
    timestamp NOT NULL, where Spark's JDBC reader would make every column nullable) and no
    column metadata (Spark's JDBC reader gives each column its own), with a value schema or
    none, headers or none, and once filtered and pruned to some columns."""
    from pyspark.sql.types import StructType, _parse_datatype_string

    ok(client.post("/v1/topics", json={"name": "orders", "partitions": 2}), 201)
    ok(client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 1, "records": [
        {"key": "o-1", "value": {"order_id": 1, "meal": "Pizza"}, "headers": {"src": "till-1"}}]}]}))
    record = ("topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL, "
              "commit_position BIGINT NOT NULL, `timestamp` TIMESTAMP NOT NULL, key STRING")
    cases = [
        ({}, "value STRING, headers MAP<STRING, STRING>"),
        ({"includeHeaders": "false"}, "value STRING"),
        ({"valueSchema": "order_id BIGINT, meal STRING"}, "value STRUCT<order_id: BIGINT, meal: STRING>, "
                                                          "headers MAP<STRING, STRING>"),
        ({"valueSchema": "order_id BIGINT, total DECIMAL(18,2)", "includeHeaders": "false"},
         "value STRUCT<order_id: BIGINT, total: DECIMAL(18,2)>"),
    ]
    for options, rest in cases:
        expected = _parse_datatype_string(f"{record}, {rest}")
        assert isinstance(expected, StructType)
        jvm, python = _both(spark, url=url, databaseUrl=backend.url, topics="orders", **options)
        assert jvm.schema == python.schema == expected, options
        assert all(f.metadata == {} for f in jvm.schema.fields), options
        narrowed = [df.where("partition = 1 AND offset >= 0").select("value", "offset", "topic", "timestamp")
                    for df in (jvm, python)]
        assert narrowed[0].schema == narrowed[1].schema, options
        assert [(f.name, f.nullable) for f in narrowed[0].schema.fields] == [
            ("value", True), ("offset", False), ("topic", False), ("timestamp", False)], options
        assert narrowed[0].collect() == narrowed[1].collect() != [], options


def test_a_bytes_topic_is_the_data_sources_one_line_error(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    ok(client.post("/v1/topics", json={"name": "raw", "config": {"value_format": "bytes"}}), 201)
    for reader in ("jvm", "python"):
        with pytest.raises(OutboxSourceError) as caught:
            read_outbox(spark, reader=reader, url=url, databaseUrl=backend.url, topics="raw")
        assert str(caught.value) == ("topic 'raw' is a bytes topic: the outbox data source reads json topics only "
                                     "(option topics)"), reader


def test_auto_reads_with_jdbc_when_the_driver_is_loaded_unless_a_python_only_option_is_given(spark, backend, url, client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = LogBuilder(client, TOPIC)
    log.create(PARTITIONS)
    log.plain(1, 3)
    base = {"url": url, "databaseUrl": backend.url, "topics": TOPIC}
    assert _reads_with_jdbc(read_outbox(spark, **base))
    assert not _reads_with_jdbc(read_outbox(spark, **base, queryLog=str(tmp_path / "q.jsonl")))
    assert [r["offset"] for r in read_outbox(spark, **base).orderBy("offset").collect()] == [0, 1, 2]
    with pytest.raises(OutboxSourceError, match=r"^option queryLog is the Python data source's: reader=jvm"):
        read_outbox(spark, reader="jvm", **base, queryLog=str(tmp_path / "q.jsonl"))
    with pytest.raises(OutboxSourceError, match=r"^reader: expected auto, jvm, python, not 'jdbc'$"):
        read_outbox(spark, reader="jdbc", **base)


def test_auto_reads_with_the_data_source_when_the_sessions_jvm_cannot_load_the_jdbc_driver(spark, backend, url, client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """auto's choice is the session JVM's own answer (driver_on_classpath asks it to load the
    class), not a setting: the same session, its driver class renamed to one no jar holds,
    reads with the Python data source, the same rows; reader=jvm names the missing driver."""
    import dataclasses

    from spark_jobs.reader import jvm

    log = LogBuilder(client, TOPIC)
    log.create(PARTITIONS)
    log.plain(1, 3)
    base = {"url": url, "databaseUrl": backend.url, "topics": TOPIC}
    loaded = read_outbox(spark, **base)
    assert _reads_with_jdbc(loaded)
    for database, driver in list(jvm.DRIVERS.items()):
        monkeypatch.setitem(jvm.DRIVERS, database, dataclasses.replace(driver, driver_class="org.outbox.NoSuchDriver"))
    df = read_outbox(spark, **base)
    assert not _reads_with_jdbc(df)
    assert _spark_rows(df) == _spark_rows(loaded)
    assert [r["offset"] for r in df.orderBy("offset").collect()] == [0, 1, 2]
    with pytest.raises(OutboxSourceError, match=r"^reader=jvm needs the (postgresql|sqlite) JDBC driver "
                                                r"\(org\.outbox\.NoSuchDriver\)"):
        read_outbox(spark, reader="jvm", **base)


def test_auto_reads_with_the_data_source_where_the_jdbc_relation_cannot_declare_the_schema(spark, backend, url, client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from spark_jobs import datasource

    log = LogBuilder(client, TOPIC)
    log.create(PARTITIONS)
    log.plain(1, 2)
    monkeypatch.setattr(datasource, "relation_declarable", lambda spark: False)
    df = read_outbox(spark, url=url, databaseUrl=backend.url, topics=TOPIC)
    assert not _reads_with_jdbc(df)
    assert [(r["partition"], r["offset"]) for r in df.orderBy("offset").collect()] == [(1, 0), (1, 1)]
    with pytest.raises(OutboxSourceError, match=r"^reader=jvm cannot declare the data source's schema on this Spark"):
        read_outbox(spark, reader="jvm", url=url, databaseUrl=backend.url, topics=TOPIC)


def test_this_sparks_jdbc_relation_can_declare_the_schema(spark) -> None:  # type: ignore[no-untyped-def]
    from spark_jobs.reader.jvm import relation_declarable

    assert relation_declarable(spark) is True


# --- Without Spark running anything ---------------------------------------------------------------


def test_auto_takes_the_python_data_source_without_the_driver_and_jvm_says_what_is_missing() -> None:
    from spark_jobs.reader.jvm import choose_reader

    assert choose_reader("auto", ["url", "topics"], driver_loaded=True, database="sqlite") == "jvm"
    assert choose_reader("auto", ["url", "topics"], driver_loaded=False, database="sqlite") == "python"
    assert choose_reader("auto", ["DRIVER"], driver_loaded=True, database="postgresql") == "python"
    assert choose_reader("python", [], driver_loaded=True, database="sqlite") == "python"
    with pytest.raises(OutboxSourceError, match=r"^reader=jvm needs the postgresql JDBC driver \(org.postgresql.Driver\)"):
        choose_reader("jvm", [], driver_loaded=False, database="postgresql")


def test_a_spark_whose_jdbc_relation_cannot_declare_the_schema_reads_with_the_data_source() -> None:
    from spark_jobs.reader.jvm import choose_reader

    assert choose_reader("auto", [], driver_loaded=True, database="sqlite", declarable=False) == "python"
    with pytest.raises(OutboxSourceError) as caught:
        choose_reader("jvm", [], driver_loaded=True, database="sqlite", declarable=False)
    assert str(caught.value) == (
        "reader=jvm cannot declare the data source's schema on this Spark: its JDBC relation "
        "(org.apache.spark.sql.execution.datasources.jdbc.JDBCRelation) is not the case class the JVM read copies; "
        "read with reader=auto or reader=python")


def test_both_reads_bound_a_split_with_the_same_condition_its_topic_quoted() -> None:
    from spark_jobs.common.positions import TopicRange
    from spark_jobs.reader.jvm import predicates
    from spark_jobs.reader.planning import Bounds, Split
    from spark_jobs.reader.statement import positions_predicate, select_statement

    split = Split(TopicRange("it's", 2, 10, 20), offsets=Bounds(12, None), timestamps_ms=Bounds(None, 99))
    for database in ("sqlite", "postgresql"):
        condition = " AND ".join([*positions_predicate("it's", 2, 10, 20, database), "\"offset\" >= 12", "timestamp_ms < 99"])
        assert predicates([split], database) == [condition]
        assert f"WHERE {condition} ORDER BY" in select_statement(split, database, include_headers=False)
    assert predicates([], "postgresql") == ["1 = 0"]


def test_a_session_without_a_jvm_of_its_own_has_no_jdbc_driver_so_auto_takes_the_data_source() -> None:
    from spark_jobs.reader.jvm import driver_on_classpath

    class ConnectSession:  # Spark Connect: no SparkContext in the client
        @property
        def sparkContext(self):  # type: ignore[no-untyped-def]  # noqa: N802 - Spark's name
            raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext is not supported in Spark Connect")

    assert driver_on_classpath(ConnectSession(), "postgresql") is False
