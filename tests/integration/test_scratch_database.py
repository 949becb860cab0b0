"""benchmarks/scratch.py's scratch database, on PostgreSQL: dropped when its block ends, however
it ends; with keep=True (a benchmark's --keep) left in place after a block that ends normally,
still dropped after one that raises."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from benchmarks.scratch import _drop, scratch_database
from tests.conftest import ADMIN_URL, require_postgres


def _exists(database: str) -> bool:
    engine = create_engine(ADMIN_URL, poolclass=NullPool)
    try:
        with engine.connect() as c:
            return c.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": database}).first() is not None
    finally:
        engine.dispose()


@pytest.mark.parametrize("keep", [False, True])
def test_a_block_that_ends_normally_drops_its_database_unless_kept(keep: bool) -> None:
    require_postgres()
    with scratch_database("postgresql", "scratch_keep", admin_url=ADMIN_URL, keep=keep) as url:
        database = make_url(url).database
        assert database is not None and _exists(database)
    try:
        assert _exists(database) is keep
    finally:
        _drop(ADMIN_URL, database)


@pytest.mark.parametrize("keep", [False, True])
def test_a_block_that_raises_drops_its_database_kept_or_not(keep: bool) -> None:
    require_postgres()
    database = None
    with pytest.raises(RuntimeError, match="^the run failed$"):
        with scratch_database("postgresql", "scratch_keep", admin_url=ADMIN_URL, keep=keep) as url:
            database = make_url(url).database
            raise RuntimeError("the run failed")
    assert database is not None
    try:
        assert not _exists(database)
    finally:
        _drop(ADMIN_URL, database)
