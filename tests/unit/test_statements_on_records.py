"""Which statements the service runs unprepared on PostgreSQL (app.storage.engine): those that
name the table `records`, whose leaves a generic plan would lock all at once."""

from __future__ import annotations

import pytest

from app.storage.engine import _names_records


@pytest.mark.parametrize("statement", [
    'SELECT value FROM records WHERE topic_id = %(t)s',
    'DELETE FROM RECORDS WHERE topic_id = 1',  # PostgreSQL folds an unquoted name to lower case
    'INSERT INTO Records (topic_id) VALUES (1)',
    'SELECT 1 FROM record_batches b JOIN records r ON r.topic_id = b.topic_id',
])
def test_a_statement_naming_records_in_any_case_is_seen(statement: str) -> None:
    assert _names_records(statement)


@pytest.mark.parametrize("statement", [
    "SELECT * FROM committed_records",
    "SELECT * FROM committed_records.partition_1_0",
    "SELECT * FROM records_1_0",
    "SELECT * FROM record_batches",
    "SELECT record_count FROM partitions",
])
def test_a_statement_naming_another_relation_is_not(statement: str) -> None:
    assert not _names_records(statement)
