"""The query README's "ACL operations (0031)" gives operators, run as written on SQLite and
PostgreSQL: it lists each binding through which a principal read a topic's (or the broker's)
config before 0031, and that no describe_configs, alter_configs or all of the same pattern keeps
(the principal's or User:*'s), leaving out those a deny of describe or all on it kept from it."""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import text

from app.storage.engine import Database

ROOT = Path(__file__).resolve().parents[2]


def _query() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### ACL operations (0031)"):]
    return re.search(r"```sql\n(.*?)```", section, re.S)[1]  # type: ignore[index]


def _acl(acl_id: int, principal: str, name: str, operation: str, permission: str = "allow",
         resource_type: str = "topic") -> str:
    return ("INSERT INTO acls (acl_id, principal, resource_type, resource_name, pattern_type, operation, permission, "
            f"created_ms) VALUES ({acl_id}, 'User:{principal}', '{resource_type}', '{name}', 'literal', "
            f"'{operation}', '{permission}', 1)")


def test_the_upgrade_query_lists_who_loses_describe_configs(database: Database) -> None:
    rows = [
        _acl(1, "reader", "orders", "read"),  # loses it
        _acl(2, "kept", "orders", "describe"), _acl(3, "kept", "orders", "describe_configs"),
        _acl(4, "tuner", "orders", "alter"), _acl(5, "tuner", "orders", "alter_configs"),
        _acl(6, "owner", "orders", "all"),
        _acl(7, "denied", "orders", "describe", "deny"),  # never had it
        _acl(8, "op", "outbox-cluster", "describe", resource_type="cluster"),  # loses the broker's
        _acl(9, "grouped", "orders", "read", resource_type="group"),  # a group has no config
        _acl(10, "hidden", "orders", "read"), _acl(11, "hidden", "orders", "describe", "deny"),  # never had it
        _acl(12, "everyone", "shared", "read"), _acl(13, "*", "shared", "describe_configs"),  # keeps it through User:*
        _acl(14, "shut", "closed", "read"), _acl(15, "*", "closed", "all", "deny"),  # never had it: User:* denied
    ]
    with database.engine.connect() as conn, conn.begin() as txn:
        for row in rows:
            conn.execute(text(row))
        listed = [tuple(r) for r in conn.execute(text(_query()))]
        txn.rollback()
    assert listed == [("User:op", "cluster", "outbox-cluster", "literal"), ("User:reader", "topic", "orders", "literal")]
