"""PostgreSQL roles outside the service: readers (Spark) of the committed_records view, the
topics' names and the partitions' next offsets; and appenders, which call outbox.append in
their own transactions, topic by topic.

A view runs with its owner's rights on the tables it reads (PostgreSQL's default, not
security_invoker), so SELECT on committed_records lets a role read every committed record
and nothing else: not the records of open or aborted transactions in `records`, not
producers, group offsets or API key hashes, and no write anywhere. The two column grants on
`topics` and `partitions` show what the view shows already (topic names, how far each
partition goes).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from psycopg import sql
from sqlalchemy import Engine

from app.domain.acl import PatternType
from app.reader_relations import PARTITION_VIEWS_SCHEMA, VIEW

_SCRAM_ITERATIONS = 4096  # PostgreSQL's own default (scram_iterations)


def scram_sha_256(password: str) -> str:
    """What PostgreSQL stores for a password (RFC 5802 / 7677), computed here so that the
    password itself is never sent: SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, _SCRAM_ITERATIONS)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return (f"SCRAM-SHA-256${_SCRAM_ITERATIONS}:{b64(salt)}"
            f"${b64(hashlib.sha256(client_key).digest())}:{b64(server_key)}")


def _ensure_role(cur: Any, role: str, password: str | None) -> bool:
    """Create `role` (LOGIN) unless it exists, and set its password if given; whether created."""
    cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
    created = cur.fetchone() is None
    if created:
        cur.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    if password is not None:
        # The SCRAM verifier, not the password: CREATE/ALTER ROLE take no parameters, and
        # a literal password would reach the server's log (log_statement = ddl).
        cur.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(scram_sha_256(password))))
    return created


@contextmanager
def _driver_cursor(engine: Engine) -> Iterator[Any]:
    """A psycopg cursor of a connection of its own, committed when the block ends without an
    error: role and grant statements are psycopg's own SQL (sql.Identifier), run as they are."""
    raw = engine.raw_connection()
    try:
        conn = raw.driver_connection
        with conn.cursor() as cur:  # type: ignore[union-attr]
            yield cur
        conn.commit()  # type: ignore[union-attr]
    finally:
        raw.close()


def grant_reader(engine: Engine, role: str, *, password: str | None = None) -> bool:
    """Create `role` if it does not exist (LOGIN), set its `password` if given, and grant it
    USAGE on the view's schema, SELECT on committed_records, on every log partition's view
    (PostgreSQL since migration 0035) and on the columns topics(topic_id, name) and
    partitions(topic_id, partition, next_offset); its sessions run with jit off. Whether it was
    created."""
    with _driver_cursor(engine) as cur:
        created = _ensure_role(cur, role, password)
        # Its sessions plan without JIT, as the service's and Spark's own readers do: the view's
        # plan is estimated far above PostgreSQL's jit_above_cost (its batch join is costed per
        # batch), and compiling it took about 1 s a query, more than the read of 240,000 rows it
        # planned (docs/benchmarks.md, "A reader of the view and PostgreSQL's JIT").
        cur.execute(sql.SQL("ALTER ROLE {} SET jit = off").format(sql.Identifier(role)))
        cur.execute("SELECT table_schema FROM information_schema.views WHERE table_name = %s "
                    "AND table_schema = ANY (current_schemas(false))", (VIEW,))
        schema = cur.fetchone()[0]  # type: ignore[index]
        cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(role)))
        cur.execute(sql.SQL("GRANT SELECT ON {}.{} TO {}").format(
            sql.Identifier(schema), sql.Identifier(VIEW), sql.Identifier(role)))
        # Each log partition's view (app.reader_relations.partition_view): those there now;
        # those of partitions created later are given the grants of the view of every
        # partition as they are made (outbox.create_partition_view).
        if cur.execute("SELECT to_regnamespace(%s) IS NOT NULL", (PARTITION_VIEWS_SCHEMA,)).fetchone()[0]:  # type: ignore[index]
            views = sql.Identifier(PARTITION_VIEWS_SCHEMA)
            cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(views, sql.Identifier(role)))
            cur.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(views, sql.Identifier(role)))
        # The topics' names and the partitions' next offsets: the data source compares them
        # with the service's log ends, to know it reads the service's own database
        # (spark_jobs.reader.checks.check_same_database). Both show in the view anyway.
        cur.execute(sql.SQL('GRANT SELECT (topic_id, name) ON {}.topics TO {}').format(
            sql.Identifier(schema), sql.Identifier(role)))
        cur.execute(sql.SQL('GRANT SELECT (topic_id, "partition", next_offset) ON {}.partitions TO {}').format(
            sql.Identifier(schema), sql.Identifier(role)))
    return created


def revoke_reader(engine: Engine, role: str) -> None:
    """Take back from `role` what grant_reader gave: SELECT on committed_records and on every
    log partition's view, USAGE on those views' schema, and the columns of topics and partitions.
    A REVOKE of committed_records alone would leave the role every partition's view, each
    granted on its own (a partition created later no longer gets it: its view copies the
    grants of committed_records as it is made). USAGE on the log's own schema stays: it
    opens nothing without a grant inside it, and other grants may need it; so does the role's
    `jit = off`, which grants nothing."""
    with _driver_cursor(engine) as cur:
        cur.execute("SELECT table_schema FROM information_schema.views WHERE table_name = %s "
                    "AND table_schema = ANY (current_schemas(false))", (VIEW,))
        schema = sql.Identifier(cur.fetchone()[0])  # type: ignore[index]
        who = sql.Identifier(role)
        cur.execute(sql.SQL("REVOKE SELECT ON {}.{} FROM {}").format(schema, sql.Identifier(VIEW), who))
        if cur.execute("SELECT to_regnamespace(%s) IS NOT NULL", (PARTITION_VIEWS_SCHEMA,)).fetchone()[0]:  # type: ignore[index]
            views = sql.Identifier(PARTITION_VIEWS_SCHEMA)
            cur.execute(sql.SQL("REVOKE SELECT ON ALL TABLES IN SCHEMA {} FROM {}").format(views, who))
            cur.execute(sql.SQL("REVOKE USAGE ON SCHEMA {} FROM {}").format(views, who))
        cur.execute(sql.SQL("REVOKE SELECT (topic_id, name) ON {}.topics FROM {}").format(schema, who))
        cur.execute(sql.SQL('REVOKE SELECT (topic_id, "partition", next_offset) ON {}.partitions FROM {}').format(
            schema, who))


_APPEND_FUNCTION = "outbox.append(text, integer, text, json, json, text, bigint)"


def grant_appender(engine: Engine, role: str, *, topics: list[str], prefixes: list[str],
                   password: str | None = None) -> bool:
    """Create `role` if it does not exist (LOGIN), set its `password` if given, grant it what
    calling outbox.append needs (USAGE on the schema, EXECUTE on the function) and the right
    to append to `topics` (names, or '*' for every topic) and to the topics starting with one
    of `prefixes` (outbox.append_grants). Whether the role was created."""
    with _driver_cursor(engine) as cur:
        created = _ensure_role(cur, role, password)
        cur.execute(sql.SQL("GRANT USAGE ON SCHEMA outbox TO {}").format(sql.Identifier(role)))
        cur.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(
            sql.SQL(_APPEND_FUNCTION), sql.Identifier(role)))
        cur.executemany(
            "INSERT INTO outbox.append_grants (role, topic, pattern_type) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            [(role, t, PatternType.LITERAL.value) for t in topics]
            + [(role, p, PatternType.PREFIXED.value) for p in prefixes])
    return created


def revoke_appender(engine: Engine, role: str, *, topics: list[str], prefixes: list[str]) -> int:
    """Take back the right to append to `topics` and `prefixes`; with neither, every topic and
    EXECUTE on outbox.append. How many grants were taken back."""
    with _driver_cursor(engine) as cur:
        if topics or prefixes:
            cur.execute(
                "DELETE FROM outbox.append_grants WHERE role = %s AND ((pattern_type = %s AND topic = ANY(%s))"
                " OR (pattern_type = %s AND topic = ANY(%s)))",
                (role, PatternType.LITERAL.value, topics, PatternType.PREFIXED.value, prefixes))
        else:
            cur.execute("DELETE FROM outbox.append_grants WHERE role = %s", (role,))
        taken = cur.rowcount
        if not (topics or prefixes):
            cur.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM {}").format(
                sql.SQL(_APPEND_FUNCTION), sql.Identifier(role)))
    return taken


def appender_grants(engine: Engine, role: str | None = None) -> list[tuple[str, str, str]]:
    """(role, topic, pattern_type) of every grant to append, or of one role's."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT role, topic, pattern_type FROM outbox.append_grants"
            + ("" if role is None else " WHERE role = %(role)s") + " ORDER BY role, pattern_type, topic",
            {} if role is None else {"role": role}).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]
