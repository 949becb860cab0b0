"""Upgrading to 0021 (group_members.client_id and client_host) and back, on SQLite and
PostgreSQL: a stored member shows neither, a member added after keeps both, and the downgrade
keeps every member."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, inspect, text

from app.storage import migrate

_MEMBER = ("INSERT INTO group_members (group_id, member_id, topics, assignment, session_timeout_ms, "
           "last_heartbeat_ms, joined_ms{extra}) VALUES ('g', '{member}', '[]', '[]', 10000, 1, 1{value})")


def _members(url: str) -> list[tuple[str | None, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("group_members")}
            client = "client_id, client_host" if "client_id" in columns else "'gone', 'gone'"
            return [tuple(r) for r in conn.execute(text(
                f"SELECT member_id, {client} FROM group_members ORDER BY member_id"))]
    finally:
        engine.dispose()


def test_0021_keeps_a_members_client_id_and_host_and_its_downgrade_keeps_the_members(empty_url: str) -> None:
    config = migrate.alembic_config(empty_url)
    command.upgrade(config, "0020")
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        conn.execute(text(_MEMBER.format(extra="", member="old", value="")))
    engine.dispose()

    command.upgrade(config, "0021")
    assert _members(empty_url) == [("old", None, None)]
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        conn.execute(text(_MEMBER.format(extra=", client_id, client_host", member="new",
                                         value=", 'x', '127.0.0.1'")))
    engine.dispose()
    assert _members(empty_url) == [("new", "x", "127.0.0.1"), ("old", None, None)]

    command.downgrade(config, "0020")
    assert _members(empty_url) == [("new", "gone", "gone"), ("old", "gone", "gone")]
