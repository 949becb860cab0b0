"""Upgrading a database with data to 0004 (transactional batch heads) keeps what readers see.

0004 replaced the per-record index of transactional records by batch heads; records written
before it become batches of one. A read_committed fetch and the committed_records view must
answer the same before and after the upgrade, and records written after it must join them.
"""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, text

from app.domain.records import RecordToAppend
from app.domain.types import IsolationLevel
from app.services.log_service import LogService, SendBatch
from app.settings import Settings
from app.storage import migrate
from app.storage.engine import Database, build_engine

# Written with the 0003 schema: topic 1 "old", partition 0. Offsets: 0 plain; 1, 2 records of
# transaction 7 (committed by its marker at 4); 3 a record of transaction 8 (aborted at 5);
# 6 plain; 7 a record of transaction 9, still open.
OLD_ROWS = [
    # offset, value, txn_id, control_type
    (0, '"p0"', None, None),
    (1, '"t7a"', 7, None),
    (2, '"t7b"', 7, None),
    (3, '"t8a"', 8, None),
    (4, None, 7, "COMMIT"),
    (5, None, 8, "ABORT"),
    (6, '"p6"', None, None),
    (7, '"t9a"', 9, None),
]
COMMITTED = [("p0", 0), ("t7a", 4), ("t7b", 4), ("p6", 6)]  # (value, commit_position)


def _write_0003_log(url: str) -> None:
    command.upgrade(migrate.alembic_config(url), "0003")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
                          "check_expected_offsets, created_ms) VALUES (1, 'old', 1, 'delete', 604800000, FALSE, 1)"))
        conn.execute(text("INSERT INTO partitions (topic_id, \"partition\", next_offset, log_start_offset) "
                          "VALUES (1, 0, 8, 0)"))
        for offset, value, txn_id, control in OLD_ROWS:
            conn.execute(
                text("INSERT INTO records (topic_id, \"partition\", \"offset\", timestamp_ms, value, txn_id, "
                     "control_type) VALUES (1, 0, :o, 1, :v, :t, :c)"),
                {"o": offset, "v": value, "t": txn_id, "c": control},
            )
    engine.dispose()


def _view(url: str) -> list[tuple[str, int]]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT value, commit_position FROM committed_records WHERE topic = 'old' "
            "ORDER BY commit_position, \"offset\"")).all()
    engine.dispose()
    return [(v.strip('"'), p) for v, p in rows]


def test_records_written_before_0004_read_the_same_after_it(empty_url: str) -> None:
    _write_0003_log(empty_url)
    assert _view(empty_url) == COMMITTED

    migrate.upgrade(empty_url)

    assert _view(empty_url) == COMMITTED
    db = Database(build_engine(empty_url))
    settings = Settings(database_url=empty_url, run_coordinator=False, auto_migrate=False)
    log = LogService(db, settings, lambda: 1)
    _topic, result = log.fetch("old", 0, offset=0, max_records=100, isolation=IsolationLevel.READ_COMMITTED)
    assert [(r.value.strip('"'), r.commit_position) for r in result.records] == COMMITTED
    assert result.next_offset == 8

    # A record written after the upgrade follows them.
    log.send([SendBatch("old", 0, [RecordToAppend(None, '"new"', None, 1)])],
             producer_id=None, producer_epoch=None, transactional_id=None)
    db.dispose()
    assert _view(empty_url) == [*COMMITTED, ("new", 8)]


def test_downgrade_from_0004_restores_the_0003_view(empty_url: str) -> None:
    _write_0003_log(empty_url)
    migrate.upgrade(empty_url)
    command.downgrade(migrate.alembic_config(empty_url), "0003")
    assert _view(empty_url) == COMMITTED
