"""Record formats (docs/ARCHITECTURE.md#record-formats), on SQLite and PostgreSQL: a bytes
topic's records read back byte for byte through the HTTP Send and Fetch; a JSON topic takes
only what it took before; transactions and compaction on a bytes topic."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from sqlalchemy import select

from app.services import fetch_answer
from app.services.log_cleaner import LogCleaner
from app.storage.tables import records
from tests.helpers import begin, create_topic, fetch, ident, init_producer, send

NUL_AND_INVALID_UTF8 = b"\x00\xff\xfe a\x00"
KEY = b"\xc3\x28\x00k"  # not UTF-8


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def binary(data: bytes) -> dict[str, str]:
    return {"type": "BINARY", "data": b64(data)}


def _batch(topic: str, recs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"topic": topic, "partition": 0, "records": recs, **extra}


def _shown(page: dict[str, Any]) -> list[tuple[Any, Any, Any]]:
    return [(r["key"], r["value"], r["headers"]) for r in page["records"]]


def test_a_topic_is_json_unless_created_bytes(client: Any) -> None:
    assert create_topic(client, "j")["config"]["value_format"] == "json"
    assert create_topic(client, "b", value_format="bytes")["config"]["value_format"] == "bytes"
    assert client.get("/v1/topics/b").json()["config"]["value_format"] == "bytes"


def test_a_topics_format_cannot_change(client: Any) -> None:
    create_topic(client, "b", value_format="bytes")

    r = client.patch("/v1/topics/b", json={"config": {"value_format": "json"}})
    same = client.patch("/v1/topics/b", json={"config": {"value_format": "bytes"}})

    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_CONFIG")
    assert same.status_code == 200, same.text
    assert client.get("/v1/topics/b").json()["config"]["value_format"] == "bytes"


def test_bytes_records_read_back_byte_for_byte(client: Any) -> None:
    create_topic(client, "b", value_format="bytes")
    headers = [{"name": "h", "value": b64(b"\x00\x01")}, {"name": "h", "value": None},
               {"name": "é", "value": b64(b"")}]
    r = send(client, [_batch("b", [
        {"key": binary(KEY), "value": binary(NUL_AND_INVALID_UTF8), "headers": headers, "timestamp_ms": 7},
        {"key": binary(b""), "value": binary(b"")},
        {"key": {"type": "STRING", "data": "ké"}, "value": None},
        {"value": {"type": "STRING", "data": "plain text"}, "headers": {"a": "1"}},
        {"key": "k"},
    ])])
    assert r.status_code == 200, r.text

    page = fetch(client, "b", 0)

    assert _shown(page) == [
        (binary(KEY), binary(NUL_AND_INVALID_UTF8), headers),
        (binary(b""), binary(b""), None),
        (binary("ké".encode()), None, None),
        (None, binary(b"plain text"), [{"name": "a", "value": b64(b"1")}]),
        (binary(b"k"), None, None),
    ]
    assert page["records"][0]["timestamp_ms"] == 7


def test_bytes_are_stored_in_the_binary_columns(client: Any, database: Any) -> None:
    create_topic(client, "b", value_format="bytes")
    send(client, [_batch("b", [{"key": binary(KEY), "value": binary(NUL_AND_INVALID_UTF8)}])])

    with database.read() as conn:
        row = conn.execute(select(records.c.key, records.c.value, records.c.key_bytes, records.c.value_bytes)).one()

    assert tuple(row) == (None, None, KEY, NUL_AND_INVALID_UTF8)


def test_a_bytes_topic_counts_stored_bytes_against_max_message_bytes(client: Any) -> None:
    create_topic(client, "b", value_format="bytes", max_message_bytes=10)

    fits = send(client, [_batch("b", [{"key": binary(b"12345"), "value": binary(b"67890")}])])
    over = send(client, [_batch("b", [{"key": binary(b"12345"), "value": binary(b"678901")}])])

    assert fits.status_code == 200, fits.text
    assert (over.status_code, over.json()["error_code"]) == (413, "MESSAGE_TOO_LARGE")


def test_a_bytes_topic_refuses_a_value_that_is_not_typed_and_writes_nothing(client: Any) -> None:
    create_topic(client, "b", value_format="bytes")
    for bad in ("text", 1, {"type": "BINARY"}, {"type": "BINARY", "data": "not base64!"},
                {"type": "HEX", "data": "00"}, {"type": "BINARY", "data": "", "extra": 1}):
        r = send(client, [_batch("b", [{"value": binary(b"ok")}, {"value": bad}])])
        assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_RECORD"), bad
    bad_header = send(client, [_batch("b", [{"headers": [{"name": "h", "value": "%%"}]}])])
    assert (bad_header.status_code, bad_header.json()["error_code"]) == (400, "INVALID_RECORD")

    assert fetch(client, "b", 0)["records"] == []


def test_a_json_topic_refuses_typed_keys_and_header_lists_and_writes_nothing(client: Any) -> None:
    create_topic(client, "j")
    typed_key = send(client, [_batch("j", [{"key": binary(b"k"), "value": 1}])])
    header_list = send(client, [_batch("j", [{"value": 1, "headers": [{"name": "h", "value": None}]}])])

    assert (typed_key.status_code, typed_key.json()["error_code"]) == (400, "INVALID_RECORD")
    assert (header_list.status_code, header_list.json()["error_code"]) == (400, "INVALID_RECORD")
    assert fetch(client, "j", 0)["records"] == []


def test_a_json_topic_stores_a_typed_looking_value_as_the_json_it_is(client: Any) -> None:
    create_topic(client, "j")
    send(client, [_batch("j", [{"key": "k", "value": binary(b"x"), "headers": {"h": "v"}}])])

    assert _shown(fetch(client, "j", 0)) == [("k", binary(b"x"), {"h": "v"})]


def test_a_bytes_topics_transaction_is_read_committed_at_its_commit(client: Any) -> None:
    create_topic(client, "b", value_format="bytes")
    producer = init_producer(client, "tx")
    begin(client, "tx", producer)
    sent = send(client, [_batch("b", [{"key": binary(b"\x01"), "value": binary(b"\xff")}], base_sequence=0)],
                producer, "tx")
    assert sent.status_code == 200, sent.text
    send(client, [_batch("b", [{"value": binary(b"plain")}])])

    before = fetch(client, "b", 0)
    assert client.post("/v1/transactions/tx/commit", json=ident(producer)).status_code == 200
    after = fetch(client, "b", 0)

    assert _shown(before) == [(None, binary(b"plain"), None)]
    assert [(r["offset"], r["commit_position"], r["value"]) for r in after["records"]] == [
        (1, 1, binary(b"plain")), (0, 2, binary(b"\xff"))]


def test_compaction_keeps_each_bytes_keys_latest_record(client: Any, services: Any, clock: Any) -> None:
    create_topic(client, "c", value_format="bytes", cleanup_policy="compact")
    a, a_again, b = b"\xff\x00", b"\xff\x00", b"\xff\x01"
    send(client, [_batch("c", [{"key": binary(a), "value": binary(b"1")},
                               {"key": binary(b), "value": binary(b"2")},
                               {"key": binary(a_again), "value": binary(b"3")},
                               {"key": binary(b"t"), "value": None},
                               {"key": binary(b"z"), "value": binary(b"4")}])])

    result = LogCleaner(services.db, services.settings, clock, chunk_rows=3).run_once()

    assert result.compaction == 1  # a@0, superseded by a@2: the keys are compared as bytes
    assert [(r["offset"], r["key"], r["value"]) for r in fetch(client, "c", 0)["records"]] == [
        (1, binary(b), binary(b"2")), (2, binary(a), binary(b"3")), (3, binary(b"t"), None),
        (4, binary(b"z"), binary(b"4"))]


def test_a_multi_partition_fetch_shows_each_topic_in_its_format(client: Any) -> None:
    create_topic(client, "b", value_format="bytes")
    create_topic(client, "j")
    send(client, [_batch("b", [{"key": binary(KEY), "value": binary(b"\x00")}]),
                  _batch("j", [{"key": "k", "value": {"a": 1}}])])

    r = client.post("/v1/fetch", json={"partitions": [{"topic": "b", "partition": 0}, {"topic": "j", "partition": 0}]})

    assert r.status_code == 200, r.text
    assert [_shown(p) for p in r.json()["partitions"]] == [[(binary(KEY), binary(b"\x00"), None)],
                                                          [("k", {"a": 1}, None)]]


def test_the_committed_records_view_has_a_bytes_topics_bytes_and_a_json_topics_json(client: Any, database: Any) -> None:
    create_topic(client, "b", value_format="bytes")
    create_topic(client, "j")
    send(client, [_batch("b", [{"key": binary(KEY), "value": binary(NUL_AND_INVALID_UTF8)}]),
                  _batch("j", [{"key": "k", "value": [1, "x"]}])])

    with database.read() as conn:
        rows = conn.exec_driver_sql("SELECT topic, key, value, key_bytes, value_bytes FROM committed_records "
                                    "ORDER BY topic").all()

    assert [tuple(r) for r in rows] == [("b", None, None, KEY, NUL_AND_INVALID_UTF8), ("j", "k", '[1,"x"]', None, None)]


def test_retention_bytes_counts_a_bytes_topics_stored_bytes(client: Any, services: Any) -> None:
    create_topic(client, "b", value_format="bytes", retention_bytes=25)
    for _ in range(3):
        send(client, [_batch("b", [{"key": binary(b"\x00" * 5), "value": binary(b"\xff" * 5)}])])  # 10 bytes each
    assert client.get("/v1/topics/b").json()["partitions"][0]["size_bytes"] == 30

    LogCleaner(services.db, services.settings, services.clock, chunk_rows=3).run_once()

    partition = client.get("/v1/topics/b").json()["partitions"][0]
    assert (partition["log_start_offset"], partition["record_count"], partition["size_bytes"]) == (1, 2, 20)


def test_a_commit_carrying_batches_to_a_bytes_topic_converts_them(client: Any) -> None:
    create_topic(client, "b", value_format="bytes")
    producer = init_producer(client, "tx", transaction_version=2)
    r = client.post("/v1/transactions/tx/commit", json={
        **ident(producer), "batches": [_batch("b", [{"value": binary(b"\x01\x02")}], base_sequence=0)]})
    assert r.status_code == 200, r.text

    assert _shown(fetch(client, "b", 0)) == [(None, binary(b"\x01\x02"), None)]


def test_a_bytes_topics_answer_sent_as_it_is_read_is_the_answer_built_whole(
        client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    create_topic(client, "b", value_format="bytes")
    send(client, [_batch("b", [{"key": binary(bytes([i])), "value": binary(NUL_AND_INVALID_UTF8 * i),
                                "headers": [{"name": "h", "value": b64(b"\x00")}]} for i in range(6)])])
    built = client.get("/v1/topics/b/partitions/0/records")

    monkeypatch.setattr(fetch_answer, "STREAM_ABOVE_BYTES", 0)
    monkeypatch.setattr(fetch_answer, "CHUNK_BYTES", 20)
    streamed = client.get("/v1/topics/b/partitions/0/records")

    assert streamed.headers.get("content-length") is None  # sent in chunks
    assert streamed.content == built.content
    assert [r["value"] for r in built.json()["records"]] == [binary(NUL_AND_INVALID_UTF8 * i) for i in range(6)]


def test_an_empty_header_list_is_refused_by_the_schema_on_every_topic(client: Any) -> None:
    create_topic(client, "b", value_format="bytes")
    create_topic(client, "j")
    for topic in ("b", "j"):
        r = send(client, [_batch(topic, [{"value": binary(b"x"), "headers": []}])])
        assert (r.status_code, r.json()["error_code"]) == (422, "INVALID_REQUEST"), topic
        assert fetch(client, topic, 0)["records"] == []


def test_a_whole_transaction_over_a_bytes_and_a_json_topic_commits_both(client: Any) -> None:
    create_topic(client, "b", value_format="bytes")
    create_topic(client, "j")
    producer = init_producer(client, "tx", transaction_version=2)
    r = client.post("/v1/transactions/tx/commit", json={**ident(producer), "batches": [
        _batch("b", [{"value": binary(b"\xff")}, {"value": binary(b"\x00")}], base_sequence=0),
        _batch("j", [{"value": {"n": 1}}], base_sequence=0)]})
    assert r.status_code == 200, r.text

    b, j = fetch(client, "b", 0, isolation="read_uncommitted"), fetch(client, "j", 0, isolation="read_uncommitted")

    assert [(x["offset"], x["commit_position"], x["value"]) for x in b["records"]] == [
        (0, 2, binary(b"\xff")), (1, 2, binary(b"\x00"))]
    assert [(x["offset"], x["commit_position"], x["value"]) for x in j["records"]] == [(0, 1, {"n": 1})]
    assert (b["high_watermark"], j["high_watermark"]) == (3, 2)  # each batch's COMMIT marker after it
    assert [p["record_count"] for t in ("b", "j") for p in client.get(f"/v1/topics/{t}").json()["partitions"]] == [2, 1]


def test_a_bytes_topic_reads_back_byte_for_byte_in_offset_order_as_kafka_batches(client: Any, services: Any) -> None:
    from aiokafka.record.default_records import DefaultRecordBatch

    from app.domain.types import IsolationLevel
    from app.kafka.records import batches_bytes

    create_topic(client, "b", value_format="bytes")
    headers = [{"name": "h", "value": b64(b"\x00\xff")}, {"name": "h", "value": None}]
    send(client, [_batch("b", [{"key": binary(KEY), "value": binary(NUL_AND_INVALID_UTF8), "headers": headers},
                               {"value": None}])])

    read = services.log.read_in_offset_order("b", 0, offset=0, isolation=IsolationLevel.READ_COMMITTED,
                                             max_bytes=1 << 20, max_records=10)
    (batch,) = [DefaultRecordBatch(batches_bytes(read.batches))]

    assert [(r.offset, r.key, r.value, list(r.headers)) for r in batch] == [
        (0, KEY, NUL_AND_INVALID_UTF8, [("h", b"\x00\xff"), ("h", None)]), (1, None, None, [])]
