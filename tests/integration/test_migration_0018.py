"""Upgrading to 0018 (group_members.group_instance_id, unique in its group) and back, on SQLite
and PostgreSQL: stored members become dynamic members, one member of a group holds an instance
id, and the downgrade keeps every member (a static one as a dynamic one)."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from tests.migration_helpers import at_revision, connected, member, write


def _members(url: str) -> list[tuple[str, ...]]:
    with connected(url) as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("group_members")}
        instance = "group_instance_id" if "group_instance_id" in columns else "NULL"
        return [tuple(r) for r in conn.execute(text(
            f"SELECT group_id, member_id, {instance} FROM group_members ORDER BY group_id, member_id"))]


def test_0018_stores_one_holder_of_an_instance_id_a_group_and_its_downgrade_keeps_the_members(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0017", member("g", "old"))

    command.upgrade(config, "0018")
    assert _members(empty_url) == [("g", "old", None)]  # a stored member is a dynamic one
    write(empty_url, member("g", "dynamic"), member("g", "a", group_instance_id="i-1"),
          member("h", "b", group_instance_id="i-1"))
    with pytest.raises(IntegrityError):
        write(empty_url, member("g", "c", group_instance_id="i-1"))  # "a" holds i-1 in g
    assert _members(empty_url) == [("g", "a", "i-1"), ("g", "dynamic", None), ("g", "old", None),
                                   ("h", "b", "i-1")]

    command.downgrade(config, "0017")
    assert _members(empty_url) == [("g", "a", None), ("g", "dynamic", None), ("g", "old", None), ("h", "b", None)]
