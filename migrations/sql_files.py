"""How a migration runs its frozen SQL files (migrations/versions/sql/): the shared mechanism,
never another migration's statements."""

from __future__ import annotations

from pathlib import Path

from alembic import op

SQL = Path(__file__).parent / "versions" / "sql"


def run_sql_file(name: str, *, dialect: str) -> None:
    """Run migrations/versions/sql/<name> on `dialect` (postgresql or sqlite), and nothing on
    the other. Statements are separated by a line holding only `---`. `@log_schema@` stands
    for the log's schema (PostgreSQL's current schema, quoted). Each statement is sent as is,
    without parameters: function bodies' RAISE formats hold '%'."""
    bind = op.get_bind()
    if bind.dialect.name != dialect:
        return
    text = (SQL / name).read_text()
    if dialect == "postgresql":
        log_schema = bind.exec_driver_sql("SELECT quote_ident(current_schema())").scalar_one()
        text = text.replace("@log_schema@", log_schema)
    raw = bind.execution_options(no_parameters=True)
    for statement in text.split("\n---\n"):
        if statement.strip():
            raw.exec_driver_sql(statement)


def view_readers(view: str) -> list[str]:
    """PostgreSQL: the roles granted SELECT on `view` (outbox grant-reader's), quoted, so that
    a migration that must drop the view (CREATE OR REPLACE cannot remove a column) gives the
    grants back; none on SQLite."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return []
    return list(bind.exec_driver_sql(
        "SELECT DISTINCT quote_ident(grantee) FROM information_schema.role_table_grants "
        f"WHERE table_name = '{view}' AND table_schema = current_schema() AND privilege_type = 'SELECT' "
        "AND grantee <> current_user").scalars())
