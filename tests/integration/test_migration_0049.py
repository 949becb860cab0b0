"""Upgrading to 0049 and back, on a populated database: on PostgreSQL outbox.append refuses a
timestamp_ms past 253402300799999 (9999-12-31T23:59:59.999Z), which 0048's function (0042's
text) took up to 2**63 - 1, and takes headers given as JSON null as no headers (stored NULL),
which it refused; the downgrade gives 0048's verdicts back. The records stored before, one past
the bound among them, are kept as they were either way, and so are the function's grants. On
SQLite (no in-database appender) nothing changes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from alembic import command
from sqlalchemy import text

from tests.migration_helpers import at_revision, connected, topic_t

PARTITION = 'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 0, 0)'
LAST_TIMESTAMP_MS = 253_402_300_799_999
ROWS = 'SELECT "offset", value, headers, timestamp_ms FROM records ORDER BY "offset"'


def _psycopg(url: str) -> str:
    return url.replace("postgresql+psycopg", "postgresql")


def _answer(url: str, headers: str | None, timestamp_ms: int, *, commit: bool = False) -> str:
    """What outbox.append answers a record of t/0 with these headers (JSON text) and timestamp:
    'taken', or the refusal's message; rolled back unless `commit`."""
    with psycopg.connect(_psycopg(url)) as conn:
        try:
            conn.execute("SELECT outbox.append('t', 0, NULL, '1'::json, %s::json, NULL, %s)", (headers, timestamp_ms))
        except psycopg.Error as e:
            return e.diag.message_primary or ""
        if commit:
            conn.commit()
        else:
            conn.rollback()
    return "taken"


def _answers(url: str) -> list[str]:
    return [_answer(url, None, LAST_TIMESTAMP_MS), _answer(url, None, LAST_TIMESTAMP_MS + 1),
            _answer(url, None, 2**63 - 1), _answer(url, "null", 1), _answer(url, '{"h": "v"}', 1)]


def _stored(url: str) -> list[tuple[Any, ...]]:
    with connected(url) as conn:
        return [tuple(r) for r in conn.execute(text(ROWS))]


def _granted(url: str) -> list[str]:
    with psycopg.connect(_psycopg(url)) as conn:
        return [r[0] for r in conn.execute(
            "SELECT grantee FROM information_schema.routine_privileges "
            "WHERE routine_schema = 'outbox' AND routine_name = 'append' AND privilege_type = 'EXECUTE' "
            "AND grantee = 'recordrules_appender'").fetchall()]


BEFORE = ["taken", "taken", "taken", "INVALID_REQUEST: headers must be an object of strings, not null", "taken"]
AFTER = ["taken",
         "INVALID_REQUEST: timestamp_ms must be from 0 to 253402300799999 (9999-12-31T23:59:59.999Z), not 253402300800000",
         "INVALID_REQUEST: timestamp_ms must be from 0 to 253402300799999 (9999-12-31T23:59:59.999Z), "
         "not 9223372036854775807",
         "taken", "taken"]


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0049_bounds_outbox_appends_timestamps_and_takes_json_null_headers_and_the_downgrade_puts_0048_back(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0048", topic_t(1), PARTITION)
    with psycopg.connect(_psycopg(empty_url), autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS recordrules_appender")
        conn.execute("CREATE ROLE recordrules_appender")
        conn.execute("GRANT EXECUTE ON FUNCTION outbox.append(text, integer, text, json, json, text, bigint) "
                     "TO recordrules_appender")
    try:
        # Published at 0048: a record of the last instant, one of 2**63 - 1 (which 0048 took), one with headers.
        for headers, ts in ((None, LAST_TIMESTAMP_MS), (None, 2**63 - 1), ('{"h": "v"}', 7)):
            assert _answer(empty_url, headers, ts, commit=True) == "taken"
        stored = [(0, "1", None, LAST_TIMESTAMP_MS), (1, "1", None, 2**63 - 1), (2, "1", '{"h":"v"}', 7)]
        assert _stored(empty_url) == stored
        assert _answers(empty_url) == BEFORE
        assert _granted(empty_url) == ["recordrules_appender"]

        command.upgrade(config, "0049")
        assert _answers(empty_url) == AFTER
        assert _stored(empty_url) == stored
        assert _granted(empty_url) == ["recordrules_appender"]
        # JSON null headers are stored as no headers, as a Send stores {"headers": null}.
        assert _answer(empty_url, "null", 8, commit=True) == "taken"
        assert _stored(empty_url) == [*stored, (3, "1", None, 8)]

        command.downgrade(config, "0048")
        assert _answers(empty_url) == BEFORE
        assert _stored(empty_url) == [*stored, (3, "1", None, 8)]
        assert _granted(empty_url) == ["recordrules_appender"]
    finally:
        with psycopg.connect(_psycopg(empty_url), autocommit=True) as conn:
            conn.execute("DROP OWNED BY recordrules_appender")
            conn.execute("DROP ROLE recordrules_appender")


@pytest.mark.parametrize("empty_url", ["sqlite"], indirect=True)
def test_0049_changes_nothing_on_sqlite_and_neither_does_its_downgrade(empty_url: str) -> None:
    config = at_revision(empty_url, "0048", topic_t(1), PARTITION)
    with connected(empty_url) as conn:
        before = {name: [tuple(r) for r in conn.execute(text(f'SELECT * FROM "{name}"'))]
                  for name in ("topics", "partitions")}
        schema = [tuple(r) for r in conn.execute(text("SELECT type, name, sql FROM sqlite_master ORDER BY name"))]
    for step in (lambda: command.upgrade(config, "0049"), lambda: command.downgrade(config, "0048")):
        step()
        with connected(empty_url) as conn:
            assert {name: [tuple(r) for r in conn.execute(text(f'SELECT * FROM "{name}"'))]
                    for name in ("topics", "partitions")} == before
            assert [tuple(r) for r in conn.execute(text("SELECT type, name, sql FROM sqlite_master ORDER BY name"))] == schema
