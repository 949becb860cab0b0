"""PostgreSQL: records appended with outbox.append are published as the application's
transaction commits, and never earlier, whatever the application's session does with its
constraints: so an open application transaction never makes a producer of the partition wait."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.helpers import create_topic
from tests.integration.test_in_database_append import ORDERS, psycopg_url
from tests.integration.test_in_database_append_postgresql import as_role, grant_appender, offsets_and_values, send

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)

APPEND = "SELECT outbox.append('orders', 0, NULL, '\"from the application\"')"


@pytest.fixture
def url(db_url: str, client: Any) -> Iterator[str]:
    """The application's role: it may append to `orders` and create temporary functions (as
    every role may), nothing else."""
    admin_url = psycopg_url(db_url)
    role = f"outbox_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS orders")
        admin.execute(ORDERS)
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT SELECT, INSERT ON orders TO {}").format(sql.Identifier(role)))
    create_topic(client, "orders", partitions=2)
    grant_appender(admin_url, role, topics=["orders"])
    yield as_role(admin_url, role)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS orders")
        admin.execute("DELETE FROM outbox.append_grants WHERE role = %s", (role,))
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def send_meanwhile(client: Any) -> int:
    """A Send to the application's partition, which must not wait for the application's
    transaction: with the partition's lock held it would hang until that transaction ends."""
    sent: list[int] = []
    done = threading.Event()
    producer = threading.Thread(target=lambda: (sent.append(send(client, "from a Send")), done.set()), daemon=True)
    producer.start()
    assert done.wait(10), "the Send waited for the application's open transaction"
    return sent[0]


SETTING_CONSTRAINTS = {
    "all immediate, before the append": ["SET CONSTRAINTS ALL IMMEDIATE", APPEND],
    "all immediate, after the append": [APPEND, "SET CONSTRAINTS ALL IMMEDIATE"],
    "the trigger by name, after the append": [APPEND, "SET CONSTRAINTS outbox.publish_at_commit IMMEDIATE"],
    "twice, in statements of their own": [APPEND, "SET CONSTRAINTS ALL IMMEDIATE", "SET CONSTRAINTS ALL IMMEDIATE"],
    "in a DO block, twice": [APPEND, "DO $$ BEGIN SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL IMMEDIATE; END $$"],
    "in a temporary function": [
        "CREATE FUNCTION pg_temp.f() RETURNS void LANGUAGE plpgsql AS "
        "$$ BEGIN SET CONSTRAINTS ALL IMMEDIATE; END $$", APPEND, "SELECT pg_temp.f()"],
    "inside the append's own statement": [
        "CREATE FUNCTION pg_temp.g() RETURNS void LANGUAGE plpgsql AS "
        "$$ BEGIN SET CONSTRAINTS ALL IMMEDIATE; END $$",
        "SELECT outbox.append('orders', 0, NULL, '\"from the application\"'), pg_temp.g()"],
    # The statement's text, quoted in the call stack, holds a line ending ' at COMMIT'.
    "in an EXECUTEd statement whose text says at COMMIT": [
        APPEND, "DO $$ BEGIN EXECUTE E'SET CONSTRAINTS ALL IMMEDIATE /* at COMMIT\\n */'; END $$"],
    "under standard_conforming_strings off": [
        APPEND, "SET standard_conforming_strings = off", "SET CONSTRAINTS ALL IMMEDIATE"],
}


@pytest.mark.parametrize("statements", SETTING_CONSTRAINTS.values(), ids=SETTING_CONSTRAINTS.keys())
def test_setting_constraints_immediate_publishes_nothing_before_the_commit(
    url: str, client: Any, statements: list[str],
) -> None:
    with psycopg.connect(url) as app:
        app.execute("INSERT INTO orders VALUES (1, 10)")
        for statement in statements:
            app.execute(statement)
        assert offsets_and_values(client) == []

        assert send_meanwhile(client) == 0
        app.commit()

    assert offsets_and_values(client) == [(0, "from a Send"), (1, "from the application")]


def test_a_statement_that_both_sets_constraints_and_commits_is_refused_and_publishes_nothing(
    url: str, client: Any,
) -> None:
    """An implicit transaction of several statements: its commit comes at the end of a string
    that also sets constraints, and cannot be told from the SET."""
    with psycopg.connect(url, autocommit=True) as app, pytest.raises(
        psycopg.errors.ObjectNotInPrerequisiteState, match="^INVALID_REQUEST: records appended with outbox.append"
    ):
        app.execute(f"SET CONSTRAINTS ALL IMMEDIATE; {APPEND}")

    assert offsets_and_values(client) == []
    assert send_meanwhile(client) == 0


def test_two_settings_in_one_string_inside_a_transaction_are_refused(url: str, client: Any) -> None:
    with psycopg.connect(url) as app:
        app.execute(APPEND)
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
            app.execute("SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL IMMEDIATE")
        assert send_meanwhile(client) == 0
        app.rollback()

    assert offsets_and_values(client) == [(0, "from a Send")]


def test_an_append_in_an_implicit_transaction_is_published_at_its_end(url: str, client: Any) -> None:
    with psycopg.connect(url, autocommit=True) as app:
        app.execute(APPEND)

    assert offsets_and_values(client) == [(0, "from the application")]


def test_a_commit_inside_a_procedure_publishes(url: str, client: Any) -> None:
    with psycopg.connect(url, autocommit=True) as app:
        app.execute("CREATE PROCEDURE pg_temp.place_order() LANGUAGE plpgsql AS $$ BEGIN "
                    "INSERT INTO orders VALUES (1, 10); "
                    "PERFORM outbox.append('orders', 0, NULL, '\"committed\"'); COMMIT; "
                    "PERFORM outbox.append('orders', 0, NULL, '\"rolled back\"'); ROLLBACK; END $$")
        app.execute("CALL pg_temp.place_order()")

    assert offsets_and_values(client) == [(0, "committed")]


def test_a_commit_inside_a_procedure_whose_name_holds_a_line_break_publishes(url: str, client: Any) -> None:
    """The procedure's name, quoted in the call stack, spans two lines: its COMMIT is still
    the commit (taken for a SET CONSTRAINTS, it deferred itself at every firing, forever)."""
    with psycopg.connect(url, autocommit=True) as app:
        app.execute("SET statement_timeout = '5s'")
        app.execute('CREATE PROCEDURE pg_temp."place\norder"() LANGUAGE plpgsql AS $$ BEGIN '
                    "INSERT INTO orders VALUES (1, 10); "
                    "PERFORM outbox.append('orders', 0, NULL, '\"committed\"'); COMMIT; END $$")
        app.execute('CALL pg_temp."place\norder"()')

    assert offsets_and_values(client) == [(0, "committed")]


def test_an_implicit_transaction_appending_a_value_that_mentions_setting_constraints_is_published(
    url: str, client: Any,
) -> None:
    """Only a SET CONSTRAINTS statement in the text makes its end ambiguous, not its words in
    a record's value."""
    with psycopg.connect(url, autocommit=True) as app:
        app.execute("SELECT outbox.append('orders', 0, 'k', '{\"note\": \"please set the constraints\"}')")

    assert offsets_and_values(client) == [(0, {"note": "please set the constraints"})]


def test_a_rolled_back_savepoint_takes_its_appends_with_it(url: str, client: Any) -> None:
    with psycopg.connect(url) as app:
        app.execute("SELECT outbox.append('orders', 0, NULL, '\"kept\"')")
        app.execute("SAVEPOINT s")
        app.execute("SELECT outbox.append('orders', 0, NULL, '\"rolled back\"')")
        app.execute("SET CONSTRAINTS ALL IMMEDIATE")
        app.execute("ROLLBACK TO SAVEPOINT s")
        app.execute("SELECT outbox.append('orders', 1, NULL, '\"after the savepoint\"')")
        app.commit()

    assert offsets_and_values(client, 0) == [(0, "kept")]
    assert offsets_and_values(client, 1) == [(0, "after the savepoint")]
