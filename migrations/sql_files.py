"""How a migration runs its frozen SQL files (migrations/versions/sql/): the shared mechanism,
never another migration's statements."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from alembic import op

SQL = Path(__file__).parent / "versions" / "sql"

_MARKER = re.compile(r"@([a-z_]+)@")


def render(text: str, values: Mapping[str, str]) -> str:
    """`text` with each marker @name@ replaced by values[name]: how one frozen text serves
    twice (the view of every log partition and each partition's own, from one
    committed_records text). A marker without a value, or a value without its marker, is an
    error, never SQL with a marker left in it."""
    names = set(_MARKER.findall(text)) - {"log_schema"}
    if names != set(values):
        raise ValueError(f"markers {sorted(names)}, values for {sorted(values)}")
    return _MARKER.sub(lambda m: values.get(m[1], m[0]), text)


def sql_file(name: str, values: Mapping[str, str] | None = None) -> str:
    """The text of migrations/versions/sql/<name>, its markers rendered with `values`."""
    return render((SQL / name).read_text(), values or {})


def dollar_quoted(text: str) -> str:
    """`text` as a PostgreSQL string constant, whatever quotes it holds."""
    if "$text$" in text:
        raise ValueError("the text holds $text$")
    return f"$text${text}$text$"


def run_sql_file(name: str, *, dialect: str, values: Mapping[str, str] | None = None) -> None:
    """Run migrations/versions/sql/<name> on `dialect` (postgresql or sqlite), and nothing on
    the other, its markers rendered with `values` (render). Statements are separated by a line
    holding only `---`. `@log_schema@` stands for the log's schema (PostgreSQL's current
    schema, quoted). Each statement is sent as is, without parameters: function bodies' RAISE
    formats hold '%'."""
    bind = op.get_bind()
    if bind.dialect.name != dialect:
        return
    text = sql_file(name, values)
    if dialect == "postgresql":
        log_schema = bind.exec_driver_sql("SELECT quote_ident(current_schema())").scalar_one()
        text = text.replace("@log_schema@", log_schema)
    raw = bind.execution_options(no_parameters=True)
    for statement in text.split("\n---\n"):
        if statement.strip():
            raw.exec_driver_sql(statement)


def view_readers(view: str) -> list[str]:
    """PostgreSQL: the roles granted SELECT on `view` (outbox grant-reader's, and PUBLIC), quoted, so that
    a migration that must drop the view (CREATE OR REPLACE cannot remove a column) gives the
    grants back; none on SQLite."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return []
    return list(bind.exec_driver_sql(
        # PUBLIC is a keyword, not a role: quoted, it names a role that does not exist.
        "SELECT DISTINCT CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END "
        "FROM information_schema.role_table_grants "
        f"WHERE table_name = '{view}' AND table_schema = current_schema() AND privilege_type = 'SELECT' "
        "AND grantee <> current_user").scalars())
