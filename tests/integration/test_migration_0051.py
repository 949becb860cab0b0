"""Upgrading to 0051 (partitions.has_holes) on a populated database: the flag is set exactly where
a batch's run holds fewer records than offsets from the partition's log start on (a record
below the log start missing is no hole: nobody reads it); the downgrade drops the column."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from tests.migration_helpers import at_revision, connected, topic_t

# Each partition a plain batch [0, 4) and one [4, 6); its log start and its records missing:
# 0 none; 1 offset 1 (a hole); 2 log start 2, offsets 0 and 1 (below it); 3 log start 2,
# offset 0 (below it) and 5 (a hole in the second batch); 4 log start 6, everything below it.
_LAYOUT = {0: (0, set()), 1: (0, {1}), 2: (2, {0, 1}), 3: (2, {0, 5}), 4: (6, set(range(6)))}
_PARTITIONS = ('INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES '
               + ", ".join(f"(1, {p}, 6, {start})" for p, (start, _) in _LAYOUT.items()))
_RECORDS = ('INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value) VALUES '
            + ", ".join(f"(1, {p}, {o}, 1, '{o}')" for p, (_, gone) in _LAYOUT.items() for o in range(6)
                        if o not in gone))
_BATCHES = ('INSERT INTO record_batches (topic_id, "partition", base_offset, record_count, state, commit_position) VALUES '
            + ", ".join(f"(1, {p}, {base}, {count}, 'committed', {base + count - 1})"
                        for p, (_, gone) in _LAYOUT.items() for base, count in ((0, 4), (4, 2))
                        if not set(range(base, base + count)) <= gone))


def test_0051_marks_the_partitions_whose_runs_have_holes_from_the_log_start_and_the_downgrade_drops_it(
        empty_url: str) -> None:
    config = at_revision(empty_url, "0050", topic_t(len(_LAYOUT)), _PARTITIONS, _RECORDS, _BATCHES)
    command.upgrade(config, "0051")
    with connected(empty_url) as conn:
        marked = {p: bool(h) for p, h in conn.execute(text('SELECT "partition", has_holes FROM partitions'))}
    assert marked == {0: False, 1: True, 2: False, 3: True, 4: False}

    command.downgrade(config, "0050")
    with connected(empty_url) as conn:
        columns = conn.execute(text("SELECT * FROM partitions")).keys()
    assert "has_holes" not in columns
