"""Upgrading to 0021 (group_members.client_id and client_host) and back, on SQLite and
PostgreSQL: a stored member shows neither, a member added after keeps both, and the downgrade
keeps every member."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from tests.migration_helpers import at_revision, connected, member, write


def _members(url: str) -> list[tuple[str | None, ...]]:
    with connected(url) as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("group_members")}
        client = "client_id, client_host" if "client_id" in columns else "'gone', 'gone'"
        return [tuple(r) for r in conn.execute(text(
            f"SELECT member_id, {client} FROM group_members ORDER BY member_id"))]


def test_0021_keeps_a_members_client_id_and_host_and_its_downgrade_keeps_the_members(empty_url: str) -> None:
    config = at_revision(empty_url, "0020", member("g", "old"))

    command.upgrade(config, "0021")
    assert _members(empty_url) == [("old", None, None)]
    write(empty_url, member("g", "new", client_id="x", client_host="127.0.0.1"))
    assert _members(empty_url) == [("new", "x", "127.0.0.1"), ("old", None, None)]

    command.downgrade(config, "0020")
    assert _members(empty_url) == [("new", "gone", "gone"), ("old", "gone", "gone")]
