"""The option headersFormat of the `outbox` data source: `map` (the default) makes `headers` a
map<string,string>, `json` leaves it the stored JSON object's text, a string, on every read
path (the JVM read, the Python data source with each PostgreSQL driver, a stream);
includeHeaders=false leaves the column out, and headersFormat given with it is refused, as is
any other value, in one line. On SQLite and PostgreSQL, against a real `serve`."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import text

from spark_jobs.datasource import read_outbox, register
from spark_jobs.errors import OutboxSourceError
from tests.e2e.api import ok

TOPIC = "orders"
RECORD_COLUMNS = ["topic", "partition", "offset", "commit_position", "timestamp", "key", "value"]
# What the service stores for the records _send writes, by offset: JSON text, or null for a
# record sent without headers.
STORED = [
    (0, '{"src":"till-1","trace":"t-1"}'),
    (1, None),
    (2, '{"note":"a \\"quoted\\" caf\u00e9"}'),
]
# Text a Send would not write (spaces, keys ordered by length: jsonb's print, which rows appended
# in-database before migration 0013 keep on PostgreSQL), given to offset 0 by _make_non_canonical:
# only the stored text itself can match it, not a map written back out as JSON.
NON_CANONICAL = '{"a": "2", "bb": "1"}'
STORED_WITH_NON_CANONICAL = [(0, NON_CANONICAL), *STORED[1:]]


def _send(client) -> None:  # type: ignore[no-untyped-def]
    ok(client.post("/v1/topics", json={"name": TOPIC, "partitions": 1}), 201)
    ok(client.post("/v1/records", json={"batches": [{"topic": TOPIC, "partition": 0, "records": [
        {"key": "o-1", "value": {"n": 1}, "headers": {"src": "till-1", "trace": "t-1"}},
        {"key": "o-2", "value": {"n": 2}},
        {"key": "o-3", "value": {"n": 3}, "headers": {"note": 'a "quoted" café'}},
    ]}]}))


def _make_non_canonical(backend) -> None:  # type: ignore[no-untyped-def]
    with backend.engine.begin() as conn:
        conn.execute(text('UPDATE records SET headers = :headers WHERE "offset" = 0'), {"headers": NON_CANONICAL})


def _reads(spark, backend, url, **options: str) -> dict:  # type: ignore[no-untyped-def]
    """The same read by every batch path the data source has on this database, by name."""
    base = {"url": url, "databaseUrl": backend.url, "topics": TOPIC, **options}
    reads = {"jvm": read_outbox(spark, reader="jvm", **base), "python": read_outbox(spark, reader="python", **base)}
    if backend.url.startswith("postgresql"):
        reads["python, psycopg"] = read_outbox(spark, reader="python", driver="psycopg", **base)
    register(spark)
    reads["spark.read.format"] = spark.read.format("outbox").options(**base).load()
    return reads


def _headers(df) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [(r["offset"], r["headers"]) for r in df.orderBy("offset").collect()]


def test_json_headers_are_the_stored_text_on_every_read_path(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    _send(client)
    with backend.engine.connect() as conn:
        stored = conn.execute(text('SELECT "offset", headers FROM records ORDER BY "offset"')).all()
    assert [tuple(r) for r in stored] == STORED
    _make_non_canonical(backend)
    for path, df in _reads(spark, backend, url, headersFormat="json").items():
        assert df.schema["headers"].dataType.simpleString() == "string", path
        assert _headers(df) == STORED_WITH_NON_CANONICAL, path


def test_map_headers_are_the_default_and_are_parsed_as_before(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    _send(client)
    expected = [(0, {"src": "till-1", "trace": "t-1"}), (1, None), (2, {"note": 'a "quoted" café'})]
    for options in ({}, {"headersFormat": "map"}, {"headersFormat": "MAP"}):
        for path, df in _reads(spark, backend, url, **options).items():
            assert df.schema["headers"].dataType.simpleString() == "map<string,string>", (options, path)
            assert _headers(df) == expected, (options, path)


def test_include_headers_false_leaves_the_column_out(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    _send(client)
    for path, df in _reads(spark, backend, url, includeHeaders="false").items():
        assert df.columns == RECORD_COLUMNS, path
        assert [r["offset"] for r in df.orderBy("offset").collect()] == [0, 1, 2], path


@pytest.mark.parametrize("form", ["map", "json"])
def test_headers_format_with_include_headers_false_is_refused_on_every_path(spark, tmp_path, form) -> None:  # type: ignore[no-untyped-def]
    # Even map, the default: a setting given for a column left out would do nothing.
    from pyspark.errors import AnalysisException

    refusal = "option headersFormat is only read with includeHeaders=true"
    options = {"url": "http://127.0.0.1:9", "databaseUrl": "sqlite:///nowhere.db", "topics": TOPIC,
               "includeHeaders": "false", "headersFormat": form}
    for reader in ("auto", "jvm", "python"):
        with pytest.raises(OutboxSourceError) as caught:
            read_outbox(spark, reader=reader, **options)
        assert str(caught.value) == refusal, reader
    register(spark)
    with pytest.raises(AnalysisException, match=f"OutboxSourceError: {refusal}"):
        spark.read.format("outbox").options(**options).load()
    with pytest.raises(AnalysisException, match=f"OutboxSourceError: {refusal}"):
        spark.readStream.format("outbox").options(**options).load()


def test_a_stream_reads_headers_in_the_form_asked(spark, backend, url, client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _send(client)
    _make_non_canonical(backend)
    register(spark)
    for form, expected in (("json", STORED_WITH_NON_CANONICAL),
                           ("map", [(0, {"a": "2", "bb": "1"}), (1, None), (2, {"note": 'a "quoted" café'})])):
        got: list[tuple] = []
        stream = (spark.readStream.format("outbox")
                  .options(url=url, databaseUrl=backend.url, topics=TOPIC, headersFormat=form).load())
        query = (stream.writeStream.foreachBatch(lambda df, _id: got.extend(_headers(df)))
                 .option("checkpointLocation", str(tmp_path / form)).trigger(availableNow=True).start())
        assert query.awaitTermination(120), "the availableNow run did not end"
        assert query.exception() is None, query.exception()
        assert sorted(got, key=lambda r: r[0]) == expected, form


@pytest.mark.parametrize(("form", "given", "made"), [("json", "map<string,string>", "string"),
                                                    ("map", "string", "map<string,string>")])
def test_a_given_schema_whose_headers_type_is_not_the_forms_is_refused_naming_both(  # type: ignore[no-untyped-def]
        spark, backend, url, client, tmp_path, form, given, made) -> None:
    _send(client)
    register(spark)
    ddl = ("topic STRING NOT NULL, partition INT NOT NULL, offset BIGINT NOT NULL, commit_position BIGINT NOT NULL, "
           f"timestamp TIMESTAMP NOT NULL, key STRING, value STRING, headers {given}")
    options = {"url": url, "databaseUrl": backend.url, "topics": TOPIC, "headersFormat": form}
    refusal = f"OutboxSourceError: the schema given has headers {given}; headersFormat={form} makes them {made}"
    with pytest.raises(Exception, match=re.escape(refusal)):
        spark.read.format("outbox").schema(ddl).options(**options).load().collect()
    stream = spark.readStream.format("outbox").schema(ddl).options(**options).load()
    with pytest.raises(Exception, match=re.escape(refusal)):
        query = (stream.writeStream.foreachBatch(lambda df, _id: df.collect())
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination(120)


def test_an_unknown_headers_format_is_refused_in_one_line_naming_the_accepted_values(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.errors import AnalysisException

    options = {"url": "http://127.0.0.1:9", "databaseUrl": "sqlite:///nowhere.db", "topics": TOPIC,
               "headersFormat": "xml"}
    for reader in ("auto", "jvm", "python"):
        with pytest.raises(OutboxSourceError) as caught:
            read_outbox(spark, reader=reader, **options)
        assert str(caught.value) == "option headersFormat: expected map or json, not 'xml'", reader
    register(spark)
    with pytest.raises(AnalysisException, match=r"OutboxSourceError: option headersFormat: expected map or json, "
                                                r"not 'xml'"):
        spark.read.format("outbox").options(**options).load()
