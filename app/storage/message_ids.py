"""Records' message ids: an application's key for a record it appends inside its own database
transaction (app.in_database; on SQLite through LogService.append_in_open_transaction), unique
per topic among the records stored (record_message_ids' primary key), so that a retry of an
application transaction that committed publishes nothing again. PostgreSQL's outbox.append and
outbox.publish_pending read and write the same table (app/storage/sql/)."""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, delete, insert, select

from app.storage.tables import record_message_ids, records

_ids = record_message_ids


def published_message_ids(conn: Connection, topic_id: int, message_ids: set[str]) -> set[str]:
    """Which of `message_ids` a stored record of the topic carries."""
    if not message_ids:
        return set()
    return set(
        conn.execute(
            select(_ids.c.message_id).where(_ids.c.topic_id == topic_id, _ids.c.message_id.in_(sorted(message_ids)))
        ).scalars()
    )


def set_message_ids(conn: Connection, topic_id: int, partition: int, ids: list[tuple[int, str]]) -> None:
    """Give the records just appended at these offsets their message ids, in the same database
    transaction: a second record with one of them fails on the table's primary key."""
    if ids:
        conn.execute(
            insert(_ids),
            [{"topic_id": topic_id, "partition": partition, "offset": offset, "message_id": message_id}
             for offset, message_id in ids],
        )


# The ids in [c_start, c_end) of a partition whose record is gone: one probe of the records'
# primary key each, found by uq_record_message_ids_record's range. A scalar subquery rather than
# NOT EXISTS, as the batch rows' deletion beside it (app.storage.cleaning) and for its reason:
# PostgreSQL without statistics may make NOT EXISTS an anti-join that walks the whole partition.
# Without this DELETE an id would outlive its record and refuse that record's retry forever.
DELETE_ORPHANED = delete(_ids).where(
    _ids.c.topic_id == bindparam("c_topic_id"),
    _ids.c.partition == bindparam("c_partition"),
    _ids.c.offset >= bindparam("c_start"),
    _ids.c.offset < bindparam("c_end"),
    # The partition by its parameters, not the id's columns: planned for their values,
    # PostgreSQL probes that partition's leaf of `records` only.
    select(records.c.offset)
    .where(records.c.topic_id == bindparam("c_topic_id"), records.c.partition == bindparam("c_partition"),
           records.c.offset == _ids.c.offset)
    .scalar_subquery()
    .is_(None),
)
