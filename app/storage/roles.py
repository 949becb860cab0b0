"""PostgreSQL roles for readers outside the service (Spark): the committed_records view, and
the topics' names and partitions' next offsets.

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

from psycopg import sql
from sqlalchemy import Engine

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


def grant_reader(engine: Engine, role: str, *, password: str | None = None) -> bool:
    """Create `role` if it does not exist (LOGIN), set its `password` if given, and grant it
    USAGE on the view's schema, SELECT on committed_records and on the columns topics(topic_id,
    name) and partitions(topic_id, partition, next_offset). Whether it was created."""
    raw = engine.raw_connection()
    try:
        conn = raw.driver_connection
        with conn.cursor() as cur:  # type: ignore[union-attr]
            cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
            created = cur.fetchone() is None
            if created:
                cur.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            if password is not None:
                # The SCRAM verifier, not the password: CREATE/ALTER ROLE take no parameters, and
                # a literal password would reach the server's log (log_statement = ddl).
                cur.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(scram_sha_256(password))))
            cur.execute("SELECT table_schema FROM information_schema.views WHERE table_name = 'committed_records' "
                        "AND table_schema = ANY (current_schemas(false))")
            schema = cur.fetchone()[0]  # type: ignore[index]
            cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(role)))
            cur.execute(sql.SQL("GRANT SELECT ON {}.committed_records TO {}").format(
                sql.Identifier(schema), sql.Identifier(role)))
            # The topics' names and the partitions' next offsets: the data source compares them
            # with the service's log ends, to know it reads the service's own database
            # (spark_jobs.source_options.check_same_database). Both show in the view anyway.
            cur.execute(sql.SQL('GRANT SELECT (topic_id, name) ON {}.topics TO {}').format(
                sql.Identifier(schema), sql.Identifier(role)))
            cur.execute(sql.SQL('GRANT SELECT (topic_id, "partition", next_offset) ON {}.partitions TO {}').format(
                sql.Identifier(schema), sql.Identifier(role)))
        conn.commit()  # type: ignore[union-attr]
        return created
    finally:
        raw.close()
