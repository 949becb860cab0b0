"""Upgrading a PostgreSQL database to 0012 (appends published at the commit only, appending
granted per topic) and back: a role that could append before goes on appending to every
topic, and a transaction left open across neither loses its records."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from alembic import command
from psycopg import sql
from sqlalchemy.engine import make_url

from app.storage import migrate

pytestmark = pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)


@pytest.fixture
def url(empty_url: str) -> Iterator[str]:
    command.upgrade(migrate.alembic_config(empty_url), "0011")
    plain = make_url(empty_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain, autocommit=True) as admin:
        for topic_id, name in ((1, "orders"), (2, "audit")):
            admin.execute("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
                          "check_expected_offsets, created_ms) VALUES (%s, %s, 1, 'delete', -1, FALSE, 1)",
                          (topic_id, name))
            admin.execute("INSERT INTO partitions (topic_id, \"partition\", next_offset, log_start_offset) "
                          "VALUES (%s, 0, 0, 0)", (topic_id,))
    yield plain


@pytest.fixture
def old_role(url: str) -> Iterator[str]:
    """A role granted appending the way 0006 to 0011 had it: USAGE and EXECUTE."""
    role = f"outbox_old_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT USAGE ON SCHEMA outbox TO {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT EXECUTE ON FUNCTION outbox.append(text, integer, text, json, json, text, bigint)"
                              " TO {}").format(sql.Identifier(role)))
    yield role
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _append(url: str, role: str, topic: str, value: str) -> None:
    with psycopg.connect(make_url(url).set(username=role).render_as_string(hide_password=False)) as conn:
        conn.execute("SELECT outbox.append(%s, 0, NULL, %s::json)", (topic, f'"{value}"'))
        conn.commit()


def _values(url: str) -> list[tuple[str, int, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute('SELECT t.name, r."offset", r.value FROM records r JOIN topics t USING (topic_id) '
                            'ORDER BY t.name, r."offset"').fetchall()


def test_a_role_that_could_append_before_may_append_to_every_topic_after(url: str, old_role: str,
                                                                           empty_url: str) -> None:
    command.upgrade(migrate.alembic_config(empty_url), "0012")

    _append(url, old_role, "orders", "a")
    _append(url, old_role, "audit", "b")

    assert _values(url) == [("audit", 0, '"b"'), ("orders", 0, '"a"')]
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT topic, pattern_type FROM outbox.append_grants WHERE role = %s",
                            (old_role,)).fetchall() == [("*", "literal")]


def test_appends_before_and_after_the_upgrade_take_consecutive_offsets(url: str, empty_url: str) -> None:
    with psycopg.connect(url) as app:
        app.execute("SELECT outbox.append('orders', 0, NULL, '\"staged\"')")
        app.commit()
    command.upgrade(migrate.alembic_config(empty_url), "0012")
    with psycopg.connect(url) as app:
        app.execute("SELECT outbox.append('orders', 0, NULL, '\"after\"')")
        app.commit()

    assert _values(url) == [("orders", 0, '"staged"'), ("orders", 1, '"after"')]


def test_the_downgrade_puts_back_publication_by_the_staging_tables_trigger(url: str, old_role: str,
                                                                           empty_url: str) -> None:
    command.upgrade(migrate.alembic_config(empty_url), "0012")
    command.downgrade(migrate.alembic_config(empty_url), "0011")

    _append(url, old_role, "audit", "after the downgrade")

    assert _values(url) == [("audit", 0, '"after the downgrade"')]
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass('outbox.append_grants'), to_regclass('outbox.publish_requests')"
                            ).fetchone() == (None, None)
