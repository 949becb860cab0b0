"""Records' message ids: an application's key for a record it appends inside its own database
transaction (app.in_database; on SQLite through LogService.append_in_open_transaction), unique
per topic among the records stored (ix_records_message_id), so that a retry of an application
transaction that committed publishes nothing again."""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, select, update

from app.storage.tables import records


def published_message_ids(conn: Connection, topic_id: int, message_ids: set[str]) -> set[str]:
    """Which of `message_ids` a stored record of the topic carries (ix_records_message_id)."""
    if not message_ids:
        return set()
    return set(
        conn.execute(
            select(records.c.message_id).where(
                records.c.topic_id == topic_id, records.c.message_id.in_(sorted(message_ids))
            )
        ).scalars()
    )


def set_message_ids(conn: Connection, topic_id: int, partition: int, ids: list[tuple[int, str]]) -> None:
    """Give the records just appended at these offsets their message ids, in the same database
    transaction: a second record with one of them fails on ix_records_message_id."""
    if ids:
        conn.execute(
            update(records)
            .where(records.c.topic_id == topic_id, records.c.partition == partition,
                   records.c.offset == bindparam("o"))
            .values(message_id=bindparam("m")),
            [{"o": offset, "m": message_id} for offset, message_id in ids],
        )
