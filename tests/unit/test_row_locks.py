"""The row locks a read takes (app.storage.dialect.RowLock): FOR SHARE and FOR UPDATE on
PostgreSQL; none on SQLite, whose write transaction holds the whole database."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite

from app.storage.dialect import RowLock, lock_row
from app.storage.tables import transactions

DIALECTS = {"postgresql": postgresql.dialect(), "sqlite": sqlite.dialect()}


def _sql(dialect_name: str, lock: RowLock | None) -> str:
    return str(lock_row(dialect_name, select(transactions), lock).compile(dialect=DIALECTS[dialect_name]))


@pytest.mark.parametrize(("lock", "clause"), [(RowLock.SHARE, "FOR SHARE"), (RowLock.UPDATE, "FOR UPDATE")])
def test_a_row_lock_is_its_clause_on_postgresql(lock: RowLock, clause: str) -> None:
    assert _sql("postgresql", lock).endswith(clause)


def test_no_row_lock_reads_without_a_lock_clause() -> None:
    assert " FOR " not in _sql("postgresql", None)


@pytest.mark.parametrize("lock", [RowLock.SHARE, RowLock.UPDATE])
def test_sqlite_takes_no_row_lock(lock: RowLock) -> None:
    assert _sql("sqlite", lock) == _sql("sqlite", None)
