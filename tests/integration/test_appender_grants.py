"""PostgreSQL: a role may call outbox.append only for the topics it was granted (`outbox
grant-appender`): by name, by prefix, or every topic; and a refusal tells it nothing about
topics it may not append to."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import create_engine

from app.cli.common import EXIT_FAILURE, EXIT_USAGE
from app.domain.errors import TopicAuthorizationFailed
from app.in_database import OutboxRecord, append
from app.storage import roles
from tests.helpers import create_topic, fetch
from tests.outbox_command import Run
from tests.integration.test_in_database_append import psycopg_url
from tests.integration.test_in_database_append_postgresql import as_role, grant_appender

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@pytest.fixture
def admin_url(db_url: str, client: Any) -> str:
    for topic in ("orders", "orders-secret", "shop-a", "shopx", "audit"):
        create_topic(client, topic, partitions=1)
    return psycopg_url(db_url)


@pytest.fixture
def role(admin_url: str) -> Iterator[str]:
    name = f"outbox_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("DELETE FROM outbox.append_grants WHERE role = %s", (name,))
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def may_append(url: str, topic: str) -> bool:
    with psycopg.connect(url) as conn:
        try:
            conn.execute("SELECT outbox.append(%s, 0, NULL, '1')", (topic,))
        except psycopg.errors.InsufficientPrivilege as e:
            assert e.diag.message_primary.startswith("TOPIC_AUTHORIZATION_FAILED: ")
            return False
        finally:
            conn.rollback()
    return True


TOPICS = ["orders", "orders-secret", "shop-a", "shopx", "audit"]


@pytest.mark.parametrize(("topics", "prefixes", "allowed"), [
    (["orders"], [], ["orders"]),
    ([], ["shop-"], ["shop-a"]),
    (["orders"], ["orders-"], ["orders", "orders-secret"]),
    (["*"], [], TOPICS),
], ids=["a name", "a prefix", "a name and a prefix", "every topic"])
def test_a_role_appends_to_exactly_the_topics_granted(
    admin_url: str, role: str, topics: list[str], prefixes: list[str], allowed: list[str],
) -> None:
    grant_appender(admin_url, role, topics=topics, prefixes=prefixes)

    assert [t for t in TOPICS if may_append(as_role(admin_url, role), t)] == allowed


def test_a_role_with_execute_but_no_grant_appends_nowhere(admin_url: str, role: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("GRANT USAGE ON SCHEMA outbox TO {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT EXECUTE ON FUNCTION outbox.append(text, integer, text, json, json, text, bigint)"
                              " TO {}").format(sql.Identifier(role)))

    assert [t for t in TOPICS if may_append(as_role(admin_url, role), t)] == []


def test_a_refusal_is_the_same_for_a_topic_that_exists_and_one_that_does_not(admin_url: str, role: str) -> None:
    grant_appender(admin_url, role, topics=["orders"])
    messages = []
    for topic in ("audit", "no-such-topic"):
        with psycopg.connect(as_role(admin_url, role)) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            conn.execute("SELECT outbox.append(%s, 0, NULL, '1')", (topic,))
        messages.append(e.value.diag.message_primary.replace(topic, "T"))

    assert messages[0] == messages[1] == \
        f"TOPIC_AUTHORIZATION_FAILED: role {role} may not append to topic 'T' (outbox grant-appender)"


def test_a_member_of_a_granted_role_may_append(admin_url: str, role: str) -> None:
    group = f"{role}_group"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(group)))
        admin.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(role)))
    try:
        grant_appender(admin_url, group, topics=["orders"])

        assert [t for t in TOPICS if may_append(as_role(admin_url, role), t)] == ["orders"]
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute("DELETE FROM outbox.append_grants WHERE role = %s", (group,))
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(group)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(group)))


def test_revoking_a_topic_leaves_the_others(admin_url: str, role: str) -> None:
    grant_appender(admin_url, role, topics=["orders", "audit"], prefixes=["shop-"])
    engine = create_engine(admin_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        assert roles.revoke_appender(engine, role, topics=["audit"], prefixes=["shop-"]) == 2
    finally:
        engine.dispose()

    assert [t for t in TOPICS if may_append(as_role(admin_url, role), t)] == ["orders"]


def test_revoking_every_topic_takes_execute_back(admin_url: str, role: str) -> None:
    grant_appender(admin_url, role, topics=["*"])
    engine = create_engine(admin_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        roles.revoke_appender(engine, role, topics=[], prefixes=[])
    finally:
        engine.dispose()

    with psycopg.connect(as_role(admin_url, role)) as conn, pytest.raises(
        psycopg.errors.InsufficientPrivilege, match="permission denied for function append"
    ):
        conn.execute("SELECT outbox.append('orders', 0, NULL, '1')")


def test_the_python_api_raises_the_topic_authorization_error(admin_url: str, role: str, client: Any) -> None:
    grant_appender(admin_url, role, topics=["orders"])
    with psycopg.connect(as_role(admin_url, role)) as conn, conn.transaction():
        with pytest.raises(TopicAuthorizationFailed, match=f"role {role} may not append to topic 'audit'"):
            append(conn, "audit", 0, [OutboxRecord(value=1)])

    assert fetch(client, "audit", 0)["records"] == []


def test_grant_appender_command_grants_and_prints_the_roles_grants(admin_url: str, role: str, db_url: str,
                                                                   cli: Run) -> None:
    done = cli(db_url, "grant-appender", role, "--topic", "orders", "--topic-prefix", "shop-")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"role": role, "created": False, "may_append_to": [
        {"topic": "orders", "pattern_type": "literal"}, {"topic": "shop-", "pattern_type": "prefixed"}]}
    assert [t for t in TOPICS if may_append(as_role(admin_url, role), t)] == ["orders", "shop-a"]


def test_grant_appender_to_a_new_role_says_it_made_it_in_its_one_line_of_json(admin_url: str, db_url: str,
                                                                              cli: Run) -> None:
    name = f"outbox_app_{uuid.uuid4().hex[:8]}"
    try:
        done = cli(db_url, "grant-appender", name, "--topic", "orders")

        assert done.returncode == 0, done.stderr
        (line,) = done.stdout.splitlines()
        assert json.loads(line) == {"role": name, "created": True, "may_append_to": [
            {"topic": "orders", "pattern_type": "literal"}]}
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute("DELETE FROM outbox.append_grants WHERE role = %s", (name,))
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_grant_appender_without_a_topic_is_a_usage_error(role: str, db_url: str, cli: Run) -> None:
    done = cli(db_url, "grant-appender", role)

    assert done.returncode == EXIT_USAGE
    assert done.stderr.strip() == ("outbox: error: name what the role may append to: --topic NAME, "
                                               "--topic-prefix PREFIX or --all-topics")


@pytest.mark.parametrize("flag", ["--topic", "--topic-prefix"])
def test_grant_appender_of_a_star_is_a_usage_error_pointing_to_all_topics_and_grants_nothing(
        admin_url: str, role: str, db_url: str, cli: Run, flag: str) -> None:
    # outbox.append reads a grant of '*', of either kind, as every topic: the command granted
    # every topic, as --all-topics does, to a caller who may have meant a topic named so.
    done = cli(db_url, "grant-appender", role, "--topic", "orders", flag, "*")

    assert (done.returncode, done.stderr) == (
        EXIT_USAGE, f"outbox: error: {flag} '*' would mean every topic; say --all-topics for that\n")
    with psycopg.connect(admin_url) as conn:
        assert conn.execute("SELECT count(*) FROM outbox.append_grants WHERE role = %s", (role,)).fetchone() == (0,)


def test_revoke_appender_of_a_topic_star_says_it_is_all_topics_and_takes_back_that_grant_only(
        admin_url: str, role: str, db_url: str, cli: Run) -> None:
    # grant-appender refuses '*' as a name, since outbox.append reads it as every topic; the
    # revocation so named took back the --all-topics grant without a word.
    assert cli(db_url, "grant-appender", role, "--all-topics", "--topic", "orders").returncode == 0

    done = cli(db_url, "revoke-appender", role, "--topic", "*")

    assert (done.returncode, done.stderr) == (
        0, "outbox: --topic '*' is --all-topics: it takes back the grant of every topic (no grant names a topic "
           "called '*' alone)\n")
    assert json.loads(done.stdout)["may_append_to"] == [{"topic": "orders", "pattern_type": "literal"}]
    assert [t for t in TOPICS if may_append(as_role(admin_url, role), t)] == ["orders"]


def test_revoke_appender_of_a_prefix_star_is_a_usage_error_pointing_to_all_topics_and_revokes_nothing(
        admin_url: str, role: str, db_url: str, cli: Run) -> None:
    # No grant has a prefix of '*' (append_grants' CHECK): it took back nothing, silently.
    assert cli(db_url, "grant-appender", role, "--all-topics").returncode == 0

    done = cli(db_url, "revoke-appender", role, "--topic-prefix", "*")

    assert (done.returncode, done.stderr) == (
        EXIT_USAGE, "outbox: error: --topic-prefix '*' names no grant: for the grant of every topic say "
                    "--all-topics\n")
    assert TOPICS == [t for t in TOPICS if may_append(as_role(admin_url, role), t)]


@pytest.mark.parametrize(("args", "error"), [
    (("revoke-appender", "no_such_role"), 'role "no_such_role" does not exist'),
    (("grant-appender", "pg_app", "--topic", "orders"), 'role name "pg_app" is reserved'),
    (("grant-reader", "public"), 'role name "public" is reserved'),
    (("revoke-reader", "no_such_role"), 'role "no_such_role" does not exist'),
], ids=["revoke from a role that does not exist", "grant to a reserved name", "grant-reader to a reserved name",
        "revoke-reader from a role that does not exist"])
def test_a_role_the_database_refuses_is_the_commands_mistake_not_an_unavailable_database(
        admin_url: str, db_url: str, cli: Run, args: tuple[str, ...], error: str) -> None:
    done = cli(db_url, *args)

    assert (done.returncode, done.stderr) == (EXIT_FAILURE, f"outbox: error: {error}\n")


@pytest.mark.parametrize(("args", "error"), [
    (("--topic-prefix", ""), "--topic-prefix '': no topic's name starts with that"),
    (("--topic", "no/such"), "--topic 'no/such': no topic's name is that"),
    (("--topic", ""), "--topic '': no topic's name is that"),
    (("--topic", "orders", "--topic-prefix", "shop\n"), "--topic-prefix 'shop\\n': no topic's name starts with that"),
    (("--topic", "x" * 250), f"--topic '{'x' * 250}': no topic's name is that"),
], ids=["empty prefix", "a slash", "empty name", "a control character", "too long"])
def test_grant_appender_for_a_name_no_topic_can_have_is_a_usage_error_and_grants_nothing(
        admin_url: str, role: str, db_url: str, cli: Run, args: tuple[str, ...], error: str) -> None:
    done = cli(db_url, "grant-appender", role, *args)

    assert (done.returncode, done.stderr) == (
        EXIT_USAGE, f"outbox: error: {error}; a topic's name is 1 to 249 characters without '/' or control "
                    "characters\n")
    with psycopg.connect(admin_url) as conn:
        assert conn.execute("SELECT count(*) FROM outbox.append_grants WHERE role = %s", (role,)).fetchone() == (0,)
