"""Upgrading a database with topics to 0011 (max_message_bytes): every topic gets Kafka's
default, and records stored before, larger than it, stay readable."""

from __future__ import annotations

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.api.app import create_app
from app.settings import Settings
from app.storage import migrate

BIG = '"' + "x" * 2_000_000 + '"'  # 2,000,002 bytes: more than 1,048,588


def test_0011_gives_every_topic_kafkas_max_message_bytes_and_keeps_larger_records_readable(empty_url: str) -> None:
    command.upgrade(migrate.alembic_config(empty_url), "0010")
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
                          "check_expected_offsets, created_ms) VALUES (1, 'old', 1, 'delete', -1, FALSE, 1)"))
        conn.execute(text("INSERT INTO partitions (topic_id, \"partition\", next_offset, log_start_offset) "
                          "VALUES (1, 0, 1, 0)"))
        conn.execute(text("INSERT INTO records (topic_id, \"partition\", \"offset\", timestamp_ms, value) "
                          "VALUES (1, 0, 0, 1, :v)"), {"v": BIG})
    engine.dispose()

    migrate.upgrade(empty_url)

    settings = Settings(database_url=empty_url, run_coordinator=False, auto_migrate=False)
    with TestClient(create_app(settings, lambda: 1)) as client:
        assert client.get("/v1/topics/old").json()["config"]["max_message_bytes"] == 1_048_588
        fetched = client.get("/v1/topics/old/partitions/0/records").json()
    assert [(r["offset"], len(r["value"])) for r in fetched["records"]] == [(0, 2_000_000)]
