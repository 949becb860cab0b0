"""Move a partition's log start, as retention and DeleteRecords will (the log-cleaning work).

Neither the log cleaner nor `POST /v1/topics/{topic}/partitions/{partition}/delete-records` is
on this branch yet; tests of readers whose position was deleted need the state they leave, so
this helper makes it directly in the database.
"""

from __future__ import annotations

from sqlalchemy import Engine, delete, select, update

from app.storage.tables import partitions, records, topics


def move_log_start(engine: Engine, topic: str, partition: int, offset: int) -> None:
    """A stand-in for the log cleaner and DeleteRecords, written straight to the database:
    `UPDATE partitions SET log_start_offset = offset` and `DELETE FROM records` below it in
    that partition, in one transaction. Nothing else is adjusted: the partition's
    `record_count` and `size_bytes` still count the deleted records (no test using this
    reads them)."""
    with engine.begin() as conn:
        topic_id = conn.execute(select(topics.c.topic_id).where(topics.c.name == topic)).scalar_one()
        conn.execute(
            update(partitions)
            .where(partitions.c.topic_id == topic_id, partitions.c.partition == partition)
            .values(log_start_offset=offset)
        )
        conn.execute(
            delete(records).where(
                records.c.topic_id == topic_id, records.c.partition == partition, records.c.offset < offset
            )
        )
