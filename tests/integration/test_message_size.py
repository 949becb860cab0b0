"""A topic's max_message_bytes (Kafka's max.message.bytes), on SQLite and PostgreSQL: created,
altered and described as every other config key, and acting on every Send and on the
in-database append on SQLite, which goes through the Send's code."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.domain.errors import MessageTooLarge
from app.in_database import OutboxRecord, append
from app.settings import Settings
from tests.helpers import batch, begin, create_topic, fetch, init_producer, send, values

# A record's bytes are its key's, its value's JSON text's and its headers' JSON text's:
# "x" * 18 is the 20 bytes of "xxxxxxxxxxxxxxxxxx" with its quotes.
TWENTY_BYTES = "x" * 18
TWENTY_ONE_BYTES = "x" * 19


def _log_end(client: Any, topic: str) -> int:
    return client.get(f"/v1/topics/{topic}").json()["partitions"][0]["log_end_offset"]


def test_a_send_with_a_record_over_max_message_bytes_is_refused_whole_and_writes_nothing(client: Any) -> None:
    create_topic(client, "t", 2, max_message_bytes=20)

    r = send(client, [batch("t", 1, ["ok"]), batch("t", 0, ["small", TWENTY_ONE_BYTES, "small"])])

    assert (r.status_code, r.json()["error_code"], r.json()["retriable"]) == (413, "MESSAGE_TOO_LARGE", False)
    assert r.json()["message"] == ("record 1 of t/0 is 21 bytes (key, value and headers), more than topic 't''s "
                                   "max_message_bytes 20")
    parts = client.get("/v1/topics/t").json()["partitions"]
    assert [(p["log_end_offset"], p["size_bytes"]) for p in parts] == [(0, 0), (0, 0)]


def test_a_record_of_exactly_max_message_bytes_is_appended(client: Any) -> None:
    create_topic(client, "t", max_message_bytes=20)

    assert send(client, [batch("t", 0, [TWENTY_BYTES])]).status_code == 200

    assert values(fetch(client, "t", 0)) == [TWENTY_BYTES]


def test_the_key_and_headers_count_in_a_records_bytes(client: Any) -> None:
    create_topic(client, "t", max_message_bytes=20)
    record = {"key": "k", "value": "x" * 10, "headers": {"h": "v"}}  # 1 + 12 + 9 ({"h":"v"}) = 22

    r = client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [record]}]})

    assert (r.status_code, r.json()["error_code"]) == (413, "MESSAGE_TOO_LARGE")
    assert "is 22 bytes" in r.json()["message"]


def test_a_transactional_send_over_max_message_bytes_is_refused_and_the_transaction_goes_on(client: Any) -> None:
    create_topic(client, "t", max_message_bytes=20)
    producer = init_producer(client, "tx")
    begin(client, "tx", producer)

    refused = send(client, [batch("t", 0, [TWENTY_ONE_BYTES], base_sequence=0)], producer, "tx")
    accepted = send(client, [batch("t", 0, ["fits"], base_sequence=0)], producer, "tx")

    assert (refused.status_code, refused.json()["error_code"]) == (413, "MESSAGE_TOO_LARGE")
    assert (accepted.status_code, accepted.json()["results"][0]["base_offset"]) == (200, 0)


def test_max_message_bytes_defaults_to_the_services_message_max_bytes(settings: Settings, clock: Any) -> None:
    with TestClient(create_app(settings.model_copy(update={"message_max_bytes": 20}), clock)) as client:
        created = create_topic(client, "t")
        refused = send(client, [batch("t", 0, [TWENTY_ONE_BYTES])])

    assert created["config"]["max_message_bytes"] == 20
    assert (refused.status_code, refused.json()["error_code"]) == (413, "MESSAGE_TOO_LARGE")


def test_max_message_bytes_is_kafkas_message_max_bytes_by_default(client: Any) -> None:
    assert create_topic(client, "t")["config"]["max_message_bytes"] == 1_048_588


def test_an_altered_max_message_bytes_is_described_and_acts_from_the_next_send(client: Any) -> None:
    create_topic(client, "t", max_message_bytes=20)

    altered = client.patch("/v1/topics/t", json={"config": {"max_message_bytes": 21}})

    assert (altered.status_code, altered.json()["config"]["max_message_bytes"]) == (200, 21)
    assert client.get("/v1/topics/t").json()["config"]["max_message_bytes"] == 21
    assert send(client, [batch("t", 0, [TWENTY_ONE_BYTES])]).status_code == 200
    assert _log_end(client, "t") == 1


@pytest.mark.parametrize("value", [0, -1, 2**31])
def test_max_message_bytes_out_of_range_is_invalid_config_at_creation_and_alter(client: Any, value: int) -> None:
    create_topic(client, "t", max_message_bytes=20)

    created = client.post("/v1/topics", json={"name": "u", "config": {"max_message_bytes": value}})
    altered = client.patch("/v1/topics/t", json={"config": {"max_message_bytes": value}})

    assert (created.status_code, created.json()["error_code"]) == (400, "INVALID_CONFIG")
    assert (altered.status_code, altered.json()["error_code"]) == (400, "INVALID_CONFIG")
    assert created.json()["message"] == "max_message_bytes must be in 1..2**31 - 1"
    assert client.get("/v1/topics/t").json()["config"]["max_message_bytes"] == 20
    assert client.get("/v1/topics/u").status_code == 404


def test_sqlite_an_in_database_append_over_max_message_bytes_is_refused_and_writes_nothing(
        client: Any, db_url: str) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL's in-database append is the outbox.append SQL function")
    import sqlite3

    from sqlalchemy.engine import make_url

    create_topic(client, "t", max_message_bytes=20)
    conn = sqlite3.connect(make_url(db_url).database, timeout=30)
    try:
        conn.execute("BEGIN IMMEDIATE")
        with pytest.raises(MessageTooLarge, match="record 1 of t/0 is 21 bytes"):
            append(conn, "t", 0, [OutboxRecord(value="small"), OutboxRecord(value=TWENTY_ONE_BYTES)])
        conn.commit()
    finally:
        conn.close()

    assert _log_end(client, "t") == 0
