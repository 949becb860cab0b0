"""The sink stores a string value's JSON text and a row's headers as a Send (POST /v1/records)
of the same text and headers stores them: the text as given without the white space around it
(never parsed and written again: a large integer keeps its digits, "1.10" its zero, an escape
stays an escape, a repeated key stays), an empty map of headers as {}, a null map as no headers.
So a record read by the data source and written back by the sink is stored unchanged; a struct
value (valueSchema) is written as to_json writes it. What the sink sends is decided in Spark,
before the database: one backend is enough."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from spark_jobs.datasource import read_outbox, write_outbox
from spark_jobs.errors import OutboxSinkError
from spark_jobs.writer.columns import check_columns
from spark_jobs.writer.commit import commit_batch
from spark_jobs.writer.options import parse_sink_options
from spark_jobs.writer.task import write_partition
from tests.e2e.api import ok, unfinished_transactions

# JSON texts a parse and a new encoding would change, and one with white space around it.
TEXTS = ["123456789012345678901234567890", "1.10", '"\\u00e9"', '{"a":1,"a":2}', "-0", "1E2",
         '[1, {"b": [true, null]}]', ' \n {"c": "é"}\t ']
STORED = [t.strip(" \t\n\r") for t in TEXTS]


def stored(url: str, topic: str) -> list[tuple[str | None, str, str | None]]:
    """(key, value, headers) of each committed record of the topic, as the database holds them."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(
                'SELECT key, value, headers FROM committed_records WHERE topic = :t ORDER BY partition, "offset"'),
                {"t": topic})]
    finally:
        engine.dispose()


def create(client: httpx.Client, *topics: str) -> None:
    for topic in topics:
        ok(client.post("/v1/topics", json={"name": topic, "partitions": 1}), 201)


def send_texts(client: httpx.Client, topic: str, records: list[tuple[str, str, str | None]]) -> None:
    """A Send of (key, value's JSON text, headers' JSON text or None) records, each text in the
    body as it is."""
    body = '{"batches":[{"topic":"%s","partition":0,"records":[%s]}]}' % (topic, ",".join(
        '{"key":"%s","value":%s%s}' % (k, v, "" if h is None else f',"headers":{h}') for k, v, h in records))
    ok(client.post("/v1/records", content=body, headers={"content-type": "application/json"}))


def sink(url: str, topic: str, schema: Any, batch: Any, sink_id: str) -> None:
    """One task's rows (an Arrow record batch) written and committed as the sink does."""
    options = parse_sink_options({"url": url, "topic": topic, "sinkId": sink_id}, streaming=False)
    message = write_partition(options, check_columns(schema, options), schema, 0, [batch])
    assert commit_batch(options, [message], None).committed


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_string_value_is_stored_as_the_send_stores_the_same_json_text(backend, url, client) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    create(client, "via_send", "via_sink")
    send_texts(client, "via_send", [(f"k{i}", t, None) for i, t in enumerate(TEXTS)] + [("null", "null", None)])
    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    keys = [f"k{i}" for i in range(len(TEXTS))] + ["null"]
    sink(url, "via_sink", schema, pa.record_batch([pa.array(keys), pa.array([*TEXTS, None])], names=["key", "value"]),
         "texts")

    expected = [(k, v, None) for k, v in zip(keys, [*STORED, "null"], strict=True)]
    assert stored(backend.url, "via_send") == expected
    assert stored(backend.url, "via_sink") == expected


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_headers_are_stored_as_the_send_stores_them_an_empty_map_as_an_empty_object(backend, url, client) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    from pyspark.sql.types import MapType, StringType, StructField, StructType

    create(client, "via_send", "via_sink")
    send_texts(client, "via_send", [("empty", "1", "{}"), ("none", "2", None), ("one", "3", '{"h":"1"}')])
    schema = StructType([StructField("key", StringType()), StructField("value", StringType()),
                         StructField("headers", MapType(StringType(), StringType()))])
    sink(url, "via_sink", schema, pa.record_batch(
        [pa.array(["empty", "none", "one"]), pa.array(["1", "2", "3"]),
         pa.array([[], None, [("h", "1")]], type=pa.map_(pa.string(), pa.string()))],
        names=["key", "value", "headers"]), "headers")

    expected = [("empty", "1", "{}"), ("none", "2", None), ("one", "3", '{"h":"1"}')]
    assert stored(backend.url, "via_send") == expected
    assert stored(backend.url, "via_sink") == expected


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_record_read_by_the_data_source_and_written_back_by_the_sink_is_stored_unchanged(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    """Through Spark, both ways: the data source's value is the stored text and its headers a
    map (empty for {}, null for none); the sink stores them back as they were."""
    create(client, "source", "copy")
    headers = ["{}", None, '{"h":"1","g":"2"}']
    send_texts(client, "source", [(f"k{i}", t, headers[i % 3]) for i, t in enumerate(TEXTS)])
    df = read_outbox(spark, url=url, databaseUrl=backend.url, topics="source")
    write_outbox(df.select("key", "value", "headers").coalesce(1), url=url, topic="copy", sinkId="copy")

    assert stored(backend.url, "copy") == stored(backend.url, "source") == [
        (f"k{i}", v, headers[i % 3]) for i, v in enumerate(STORED)]
    assert unfinished_transactions(client) == {}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_struct_value_read_with_a_value_schema_is_written_back_as_to_json_writes_it(spark, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    create(client, "orders", "copy")
    send_texts(client, "orders", [("1", '{"id": 1, "meal": "margherita", "price": 9.50, "extra": [1]}', None),
                                  ("2", '{"id": 2}', "{}"), ("3", "null", None)])
    df = read_outbox(spark, url=url, databaseUrl=backend.url, topics="orders",
                     valueSchema="id BIGINT, meal STRING, price DECIMAL(4,2)")
    write_outbox(df.select("key", "value", "headers").coalesce(1), url=url, topic="copy", sinkId="structs")

    assert stored(backend.url, "copy") == [
        ("1", '{"id":1,"meal":"margherita","price":9.5}', None),
        ("2", '{"id":2,"meal":null,"price":null}', "{}"),
        ("3", "null", None),
    ]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_text_that_is_not_one_json_value_fails_the_task_and_adds_no_record(backend, url, client) -> None:  # type: ignore[no-untyped-def]
    """Sent as it is, `1},{"value":2` would end its value early and add a record of its own to
    the Send: it is refused before anything of its batch is sent, and the task's transaction
    is aborted."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    create(client, "out")
    schema = StructType([StructField("value", StringType())])
    options = parse_sink_options({"url": url, "topic": "out", "sinkId": "injected"}, streaming=False)
    with pytest.raises(OutboxSinkError, match=r"^column value holds text that is not JSON .*to_json\(\) it first$"):
        write_partition(options, check_columns(schema, options), schema, 0,
                        [pa.record_batch([pa.array(["1", '1},{"value":2'])], names=["value"])])
    assert stored(backend.url, "out") == []
    assert ok(client.get("/v1/topics/out"))["partitions"][0]["log_end_offset"] == 0
    assert unfinished_transactions(client) == {}
