"""Upgrading to 0018 (group_members.group_instance_id, unique in its group) and back, on SQLite
and PostgreSQL: stored members become dynamic members, one member of a group holds an instance
id, and the downgrade keeps every member (a static one as a dynamic one)."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from app.storage import migrate

_MEMBER = ("INSERT INTO group_members (group_id, member_id, topics, assignment, session_timeout_ms, "
           "last_heartbeat_ms, joined_ms{extra}) VALUES ('{group}', '{member}', '[]', '[]', 10000, 1, 1{value})")


def _member(group: str, member: str, instance: str | None = None) -> str:
    if instance is None:
        return _MEMBER.format(extra="", group=group, member=member, value="")
    return _MEMBER.format(extra=", group_instance_id", group=group, member=member, value=f", '{instance}'")


def _members(url: str) -> list[tuple[str, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("group_members")}
            instance = "group_instance_id" if "group_instance_id" in columns else "NULL"
            return [tuple(r) for r in conn.execute(text(
                f"SELECT group_id, member_id, {instance} FROM group_members ORDER BY group_id, member_id"))]
    finally:
        engine.dispose()


def test_0018_stores_one_holder_of_an_instance_id_a_group_and_its_downgrade_keeps_the_members(
        empty_url: str) -> None:
    config = migrate.alembic_config(empty_url)
    command.upgrade(config, "0017")
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        conn.execute(text(_member("g", "old")))
    engine.dispose()

    command.upgrade(config, "0018")
    assert _members(empty_url) == [("g", "old", None)]  # a stored member is a dynamic one
    engine = create_engine(empty_url)
    with engine.begin() as conn:
        for statement in (_member("g", "dynamic"), _member("g", "a", "i-1"), _member("h", "b", "i-1")):
            conn.execute(text(statement))
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(text(_member("g", "c", "i-1")))  # "a" holds i-1 in g
    engine.dispose()
    assert _members(empty_url) == [("g", "a", "i-1"), ("g", "dynamic", None), ("g", "old", None),
                                   ("h", "b", "i-1")]

    command.downgrade(config, "0017")
    assert _members(empty_url) == [("g", "a", None), ("g", "dynamic", None), ("g", "old", None), ("h", "b", None)]
