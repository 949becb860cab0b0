"""PostgreSQL roles for readers outside the service (Spark): the committed_records view only.

A view runs with its owner's rights on the tables it reads (PostgreSQL's default, not
security_invoker), so SELECT on committed_records alone lets a role read every committed
record and nothing else: not the records of open or aborted transactions in `records`, not
producers, offsets or API key hashes, and no write anywhere.
"""

from __future__ import annotations

from psycopg import sql
from sqlalchemy import Engine


def grant_reader(engine: Engine, role: str, *, password: str | None = None) -> bool:
    """Create `role` if it does not exist (LOGIN, with `password` if given), and grant it
    USAGE on the view's schema and SELECT on committed_records. Whether it was created."""
    raw = engine.raw_connection()
    try:
        conn = raw.driver_connection
        with conn.cursor() as cur:  # type: ignore[union-attr]
            cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
            created = cur.fetchone() is None
            if created:
                statement = sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role))
                if password is not None:
                    statement = sql.SQL("{} PASSWORD {}").format(statement, sql.Literal(password))
                cur.execute(statement)
            cur.execute("SELECT table_schema FROM information_schema.views WHERE table_name = 'committed_records' "
                        "AND table_schema = ANY (current_schemas(false))")
            schema = cur.fetchone()[0]  # type: ignore[index]
            cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(role)))
            cur.execute(sql.SQL("GRANT SELECT ON {}.committed_records TO {}").format(
                sql.Identifier(schema), sql.Identifier(role)))
        conn.commit()  # type: ignore[union-attr]
        return created
    finally:
        raw.close()
