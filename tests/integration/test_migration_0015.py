"""Upgrading a database with topics and records to 0015 (record formats) and back, on SQLite and
PostgreSQL: every topic becomes json with its records as they were; at head the database runs
the catalogue's SQL; the downgrade gives back 0014's schema and refuses while a bytes topic
exists."""

from __future__ import annotations

import psycopg
import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from app.api.app import create_app
from app.settings import Settings
from app.storage import migrate
from app.storage.sql import load
from migrations.refusal import MigrationRefused


def _seed_0014(url: str) -> None:
    command.upgrade(migrate.alembic_config(url), "0014")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
                          "check_expected_offsets, created_ms) VALUES (1, 'old', 1, 'delete', -1, FALSE, 1)"))
        conn.execute(text("INSERT INTO partitions (topic_id, \"partition\", next_offset, log_start_offset) "
                          "VALUES (1, 0, 2, 0)"))
        conn.execute(text("INSERT INTO records (topic_id, \"partition\", \"offset\", timestamp_ms, key, value, headers) "
                          "VALUES (1, 0, 0, 1, 'k', '{\"a\": 1}', '{\"h\":\"v\"}'), (1, 0, 1, 2, NULL, 'null', NULL)"))
    engine.dispose()


def _columns(url: str) -> dict[str, list[str]]:
    engine = create_engine(url)
    try:
        insp = inspect(engine)
        return {t: [c["name"] for c in insp.get_columns(t)] for t in ("topics", "records", "committed_records")}
    finally:
        engine.dispose()


def _serve(url: str) -> TestClient:
    return TestClient(create_app(Settings(database_url=url, run_coordinator=False, auto_migrate=False), lambda: 1))


def test_0015_makes_every_topic_json_and_keeps_its_records(empty_url: str) -> None:
    _seed_0014(empty_url)

    migrate.upgrade(empty_url)

    with _serve(empty_url) as client:
        assert client.get("/v1/topics/old").json()["config"]["value_format"] == "json"
        fetched = client.get("/v1/topics/old/partitions/0/records").json()
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in fetched["records"]] == [
        (0, "k", {"a": 1}, {"h": "v"}), (1, None, None, None)]
    engine = create_engine(empty_url)
    with engine.connect() as conn:
        view = conn.execute(text('SELECT "offset", key, value, key_bytes, value_bytes FROM committed_records '
                                 'ORDER BY "offset"')).all()
    engine.dispose()
    assert [tuple(r) for r in view] == [(0, "k", '{"a": 1}', None, None), (1, None, "null", None, None)]


def test_the_downgrade_gives_back_0014s_columns_and_records(empty_url: str) -> None:
    _seed_0014(empty_url)
    before = _columns(empty_url)
    config = migrate.alembic_config(empty_url)
    command.upgrade(config, "0015")
    assert _columns(empty_url) != before

    command.downgrade(config, "0014")

    assert _columns(empty_url) == before
    engine = create_engine(empty_url)
    with engine.connect() as conn:
        rows = conn.execute(text('SELECT "offset", key, value, headers FROM committed_records ORDER BY "offset"')).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [(0, "k", '{"a": 1}', '{"h":"v"}'), (1, None, "null", None)]


def test_the_downgrade_refuses_while_a_bytes_topic_exists(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    with _serve(empty_url) as client:
        created = client.post("/v1/topics", json={"name": "b", "config": {"value_format": "bytes"}})
        assert created.status_code == 201, created.text

    with pytest.raises(MigrationRefused, match="not json topics"):
        command.downgrade(migrate.alembic_config(empty_url), "0014")

    # Refused at 0015, the bytes columns stay (0023's downgrade re-added the producer columns
    # after them), and every downgrade before it is made: the database is at 0015.
    assert {"key_bytes", "value_bytes"} <= set(_columns(empty_url)["records"])
    engine = create_engine(empty_url)
    assert migrate.current_revision(engine) == "0015"
    engine.dispose()


APPEND = "'outbox.append(text, integer, text, json, json, text, bigint)'::regprocedure"


def _appender(url: str) -> tuple[str, str]:
    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain) as conn:
        row = conn.execute(f"SELECT pg_get_functiondef({APPEND}), proacl::text FROM pg_proc WHERE oid = {APPEND}").fetchone()
    assert row is not None
    return row[0], row[1]


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_at_head_postgresql_runs_the_catalogues_appender_and_the_downgrade_puts_0014s_back(empty_url: str) -> None:
    config = migrate.alembic_config(empty_url)
    command.upgrade(config, "0014")
    before = _appender(empty_url)
    command.upgrade(config, "head")

    # pg_get_functiondef quotes the body its own way.
    assert _appender(empty_url)[0].split("$function$")[1] == load("appender.postgresql.sql").replace(
        "@log_schema@", "public").split("$fn$")[1]
    command.downgrade(config, "0014")
    assert _appender(empty_url) == before


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_the_views_readers_keep_their_grant_through_the_upgrade_and_the_downgrade(empty_url: str) -> None:
    config = migrate.alembic_config(empty_url)
    command.upgrade(config, "0014")
    engine = create_engine(empty_url, isolation_level="AUTOCOMMIT")
    grant = text("SELECT has_table_privilege('outbox_test_reader', 'committed_records', 'SELECT')")
    with engine.connect() as conn:
        conn.execute(text("DO $$ BEGIN CREATE ROLE outbox_test_reader; EXCEPTION WHEN duplicate_object THEN END $$"))
        conn.execute(text("GRANT SELECT ON committed_records TO outbox_test_reader"))
    try:
        command.upgrade(config, "head")
        with engine.connect() as conn:
            after_upgrade = conn.execute(grant).scalar_one()
        command.downgrade(config, "0014")
        with engine.connect() as conn:
            after_downgrade = conn.execute(grant).scalar_one()
    finally:
        with engine.connect() as conn:
            conn.execute(text("DROP OWNED BY outbox_test_reader"))
            conn.execute(text("DROP ROLE outbox_test_reader"))
        engine.dispose()

    assert (after_upgrade, after_downgrade) == (True, True)
