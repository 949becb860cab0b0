"""Upgrading a PostgreSQL database to 0013 (outbox.append agreeing with a Send) and back: the
database holds 0013's appender, and the downgrade puts back exactly what 0012
left, granted as it was."""

from __future__ import annotations

import psycopg
import pytest
from alembic import command
from sqlalchemy.engine import make_url

from app.storage import migrate
from migrations.sql_files import SQL as FROZEN

pytestmark = pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)

APPEND = "'outbox.append(text, integer, text, json, json, text, bigint)'::regprocedure"


def _appender(url: str) -> tuple[str, str]:
    """outbox.append as the database holds it: its definition and its grants."""
    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain) as conn:
        row = conn.execute(f"SELECT pg_get_functiondef({APPEND}), proacl::text FROM pg_proc WHERE oid = {APPEND}").fetchone()
    assert row is not None
    return row[0], row[1]


def _body(definition: str, quote: str) -> str:
    return definition.split(quote)[1]


def test_at_0013_the_database_runs_0013s_appender(empty_url: str) -> None:
    command.upgrade(migrate.alembic_config(empty_url), "0013")

    # The test database's log tables are in its schema public.
    # pg_get_functiondef quotes the body its own way. (At head, the catalogue's: test_migration_0015.)
    assert _body(_appender(empty_url)[0], "$function$") == _body(
        (FROZEN / "0013_appender.postgresql.sql").read_text().replace("@log_schema@", "public"), "$fn$")


def test_the_downgrade_puts_back_exactly_what_0012_left(empty_url: str) -> None:
    config = migrate.alembic_config(empty_url)
    command.upgrade(config, "0012")
    before = _appender(empty_url)
    command.upgrade(config, "0013")
    assert _appender(empty_url) != before

    command.downgrade(config, "0012")

    assert _appender(empty_url) == before
