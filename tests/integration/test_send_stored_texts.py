"""A JSON topic's records are stored exactly as sent, on SQLite and PostgreSQL: keys, values
and headers holding the characters PostgreSQL's COPY text format gives a meaning to (tab,
newline, carriage return, backslash, a backslash-N that reads as NULL), non-ASCII text and
nulls, each at its own offset, across batches of several partitions and topics in one Send."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from sqlalchemy import select

from app.domain import records as records_module
from app.storage import record_rows
from app.storage.tables import records
from tests.helpers import create_topic

# The raw text between the JSON tokens is kept too: a value is stored as the JSON text sent.
ODD_VALUE = b'{"a":\t"tab\\there",\n "b": "back\\\\slash \\\\N",\r\n "c": "\xc3\xa9"}'


def _stored(database: Any) -> list[tuple[Any, ...]]:
    with database.read() as conn:
        return [tuple(r) for r in conn.execute(
            select(records.c.topic_id, records.c.partition, records.c.offset, records.c.timestamp_ms,
                   records.c.key, records.c.value, records.c.headers)
            .order_by(records.c.topic_id, records.c.partition, records.c.offset))]


def _send_raw(client: Any, body: bytes) -> Any:
    return client.post("/v1/records", content=body, headers={"content-type": "application/json"})


def _send(client: Any, batches: list[dict[str, Any]]) -> Any:
    return _send_raw(client, orjson.dumps({"batches": batches}))


def test_texts_with_copy_escapes_are_stored_exactly_as_sent(client: Any, database: Any) -> None:
    create_topic(client, "t", partitions=2)
    body = (b'{"batches": [{"topic": "t", "partition": 1, "records": ['
            b'{"key": "tab\\tnew\\nline\\rcr", "value": ' + ODD_VALUE + b', "timestamp_ms": 5},'
            b'{"key": "\\\\N", "value": "\\\\N", "headers": {"h\\t1": "v\\\\\\n", "\xc3\xa9": "\\\\."}, "timestamp_ms": 6},'
            b'{"value": null, "timestamp_ms": 7},'
            b'{"key": "", "timestamp_ms": 8}]}]}')

    r = _send_raw(client, body)

    assert r.status_code == 200, r.text
    topic_id = _stored(database)[0][0]
    assert _stored(database) == [
        (topic_id, 1, 0, 5, "tab\tnew\nline\rcr", ODD_VALUE.decode(), None),
        (topic_id, 1, 1, 6, "\\N", '"\\\\N"', orjson.dumps({"h\t1": "v\\\n", "é": "\\."}).decode()),
        (topic_id, 1, 2, 7, None, "null", None),
        (topic_id, 1, 3, 8, "", "null", None),
    ]


def test_batches_of_several_partitions_and_topics_take_their_own_offsets(client: Any, database: Any) -> None:
    create_topic(client, "a", partitions=2)
    create_topic(client, "b")
    first = _send(client, [{"topic": "a", "partition": 0, "records": [{"key": "x", "value": 1, "timestamp_ms": 1}]}])
    assert first.status_code == 200, first.text

    r = _send(client, [
        {"topic": "b", "partition": 0, "records": [{"key": "k\\", "value": [1], "timestamp_ms": 2}]},
        {"topic": "a", "partition": 0, "records": [{"value": {"n": 2}, "timestamp_ms": 3},
                                                   {"value": "\t", "timestamp_ms": 4}]},
        {"topic": "a", "partition": 1, "records": [{"key": "é", "timestamp_ms": 5}]},
    ])

    assert r.status_code == 200, r.text
    assert [(b["topic"], b["partition"], b["base_offset"], b["last_offset"]) for b in r.json()["results"]] == [
        ("b", 0, 0, 0), ("a", 0, 1, 2), ("a", 1, 0, 0)]
    rows = _stored(database)
    a, b = rows[0][0], rows[-1][0]
    assert [row[1:] for row in rows] == [
        (0, 0, 1, "x", "1", None),
        (0, 1, 3, None, '{"n":2}', None),
        (0, 2, 4, None, '"\\t"', None),
        (1, 0, 5, "é", "null", None),
        (0, 0, 2, "k\\", "[1]", None),
    ]
    assert [row[0] for row in rows] == [a, a, a, a, b]


def test_a_send_decoded_and_copied_in_many_chunks_stores_each_record_exactly(
        client: Any, database: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Chunks of a few bytes: every value is decoded, and every line copied, in a piece of its own.
    monkeypatch.setattr(records_module, "JOIN_CHUNK_BYTES", 8)
    monkeypatch.setattr(record_rows, "COPY_PIECE_CHARS", 8)
    create_topic(client, "t")
    values = [{"e": "\U0001F600"}, None, "tab\there", {"n": 1}, "back\\slash", "é"]

    r = _send(client, [{"topic": "t", "partition": 0, "records": [
        {"key": f"k{i}\n", "value": v, "timestamp_ms": 10 + i} for i, v in enumerate(values)]}])

    assert r.status_code == 200, r.text
    assert [row[2:] for row in _stored(database)] == [
        (i, 10 + i, f"k{i}\n", orjson.dumps(v).decode(), None) for i, v in enumerate(values)]
