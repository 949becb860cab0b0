"""A process's copy of the topics its plain Sends name, so that such a Send reads no `topics`
row (PostgreSQL: a round trip of each Send's six, about a tenth of its service CPU).

A topic's row changes with its config (AlterConfigs), its partition count (CreatePartitions),
and goes with its deletion; a re-created topic has a new row and a new topic_id. So the copy
keeps, with each topic, the version of the row it was read from (ROW_VERSION: PostgreSQL's
xmin, the transaction that wrote that row version; every UPDATE of the row writes a new one),
and nothing is trusted to it that the database does not confirm:

- what the copy allows is confirmed by the statement that takes each batch's offsets, which
  takes them only if the topic's row is still that version (log_end.TAKEN, `p_topic_row`):
  otherwise it takes none, the Send's database transaction rolls back with `TopicChanged`,
  and the Send is done again from a fresh read (LogService). So no Send writes to a deleted
  topic, to a re-created one's old id, or under an old config (a larger max_message_bytes,
  keys not yet required, expected offsets not yet required);
- what the copy refuses (a partition it does not know, a record too large for it, ...) is
  judged again on a fresh read before the refusal is given: the topic may have grown.

Each process keeps its own copy, checked the same way: another process's change is found by
the first Send that names the topic there. Only PostgreSQL's Sends use it: SQLite's reads
cost no round trip, and SQLite may give a deleted topic's id to the next one created.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

from sqlalchemy import Connection, Text, cast, literal_column, select

from app.domain.topic import Topic
from app.storage import topics as topic_rows
from app.storage.tables import partitions, topics

# The version of a `topics` row (PostgreSQL), as text: xid has no cast from a number, and
# the driver has no type for it. It keeps its value when VACUUM freezes the row (since
# PostgreSQL 9.4 freezing sets a flag and keeps xmin); a value that moved would only cost a
# fresh read.
ROW_VERSION = cast(literal_column("topics.xmin"), Text)

# A bound on the names kept: past it the copy starts again (a process that names more
# topics than this reads them as before, a round trip a Send).
MAX_TOPICS = 10_000


class TopicChanged(Exception):
    """A statement taking offsets found the topic's row no longer the version a Send's copy
    was read from (or gone): the Send's transaction is rolled back, and it is done again from
    a fresh read."""


class SeenTopics:
    """Topic rows by name, each with its row version. Safe from any thread: entries are
    replaced whole."""

    def __init__(self) -> None:
        self._by_name: dict[str, tuple[Topic, str]] = {}
        self._lock = threading.Lock()

    def get(self, names: set[str]) -> dict[str, tuple[Topic, str]] | None:
        """Every one of these names' copies, or None if one is missing."""
        by_name = self._by_name
        try:
            return {name: by_name[name] for name in names}
        except KeyError:
            return None

    def read(self, conn: Connection, names: set[str]) -> dict[str, Topic]:
        """The topics of these names that exist, read now (as topics.existing_topics), and
        kept."""
        stmt, params = topic_rows.named_topics(names)
        return self.keep(conn.execute(with_version(stmt), params).all())

    def keep(self, rows: Any) -> dict[str, Topic]:
        """The topics of these rows (topics.named_topics' rows, with_version's column among
        theirs), kept, by name."""
        found = {row.name: (topic_rows.topic_of(row), row.row_version) for row in rows}
        with self._lock:
            if len(self._by_name) + len(found) > MAX_TOPICS:
                self._by_name = {}
            self._by_name.update(found)
        return {name: topic for name, (topic, _) in found.items()}

    def forget(self, names: set[str]) -> None:
        with self._lock:
            for name in names:
                self._by_name.pop(name, None)


@cache
def with_version(stmt: Any) -> Any:
    """One of topics.named_topics' two statements, with each row's version (built once each)."""
    return stmt.add_columns(ROW_VERSION.label("row_version"))


def row_is(version: Any) -> Any:
    """SQL, in a statement over `partitions`: its topic's row is still of this version
    (a bind parameter); true where the version is NULL (the caller read the row itself)."""
    return version.is_(None) | select(topics.c.topic_id).where(
        topics.c.topic_id == partitions.c.topic_id, ROW_VERSION == version).exists()
