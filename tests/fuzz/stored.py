"""The stored state, table by table: a snapshot to compare, and a restore to a snapshot.

Straight SQL on every table of the schema (app.storage.tables.metadata), read in primary-key
order, so two snapshots are equal exactly when the database holds the same rows. A restore
writes a snapshot back (same ids, same member ids), which is how the fuzzers return to their
seeded starting state after a request that changed something.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, delete, select, text

from app.storage.engine import normalise_url
from app.storage.tables import metadata

Snapshot = dict[str, list[tuple[Any, ...]]]

TABLES = list(metadata.sorted_tables)  # parents before children
# The order a restore writes them in: `records` after `partitions`. On PostgreSQL `records` has a
# leaf per log partition (migration 0035), which the INSERT of the partition's row creates or
# takes over, and refuses to take over once it holds rows (outbox.create_record_leaf): a leaf
# kept by the TRUNCATE and filled first made the restore fail. No table refers to `records`.
INSERT_ORDER = sorted(TABLES, key=lambda table: table.name == "records")  # stable: records last


class StoredTables:
    def __init__(self, url: str) -> None:
        self.engine: Engine = create_engine(normalise_url(url))
        self.dialect = self.engine.dialect.name

    def snapshot(self) -> Snapshot:
        out: Snapshot = {}
        with self.engine.connect() as conn:
            for table in TABLES:
                key = list(table.primary_key.columns)
                rows = conn.execute(select(table).order_by(*key)).all()
                out[table.name] = [tuple(r) for r in rows]
        return out

    def restore(self, snap: Snapshot) -> None:
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                conn.execute(text("TRUNCATE " + ", ".join(f'"{t.name}"' for t in TABLES)
                                  + " RESTART IDENTITY CASCADE"))
            else:
                for table in reversed(TABLES):
                    conn.execute(delete(table))
            for table in INSERT_ORDER:
                rows = snap[table.name]
                if rows:
                    names = [c.name for c in table.columns]
                    conn.execute(table.insert(), [dict(zip(names, r, strict=True)) for r in rows])
            if self.dialect == "postgresql":
                # Serial keys: the next row must not take a restored id.
                for table, column in (("topics", "topic_id"), ("acls", "acl_id")):
                    conn.execute(text(
                        f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                        f"COALESCE((SELECT max({column}) FROM {table}), 0) + 1, false)"
                    ))

    def dispose(self) -> None:
        self.engine.dispose()


def diff(before: Snapshot, after: Snapshot, limit: int = 20) -> list[str]:
    """Rows removed and added, per table."""
    out: list[str] = []
    for name in before:
        old, new = set(before[name]), set(after.get(name, []))
        out += [f"{name}: - {r!r:.300}" for r in sorted(old - new, key=repr)]
        out += [f"{name}: + {r!r:.300}" for r in sorted(new - old, key=repr)]
    return out[:limit]
