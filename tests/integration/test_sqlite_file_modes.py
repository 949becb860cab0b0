"""The SQLite database, its -wal and -shm files and its backups are readable by their owner
only: they hold every record, open transactions and API key hashes."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.settings import Settings
from app.storage import backup, migrate
from app.storage.engine import open_database


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    """The usual umask, under which a file is created world-readable unless asked otherwise."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_database_and_its_wal_and_shm_files_are_its_owners_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    migrate.upgrade(url)
    db = open_database(Settings(database_url=url), pool_size=1)
    try:
        with db.write() as conn:  # the -wal and -shm files exist while a connection is open
            conn.exec_driver_sql("CREATE TABLE t (x)")

        assert {p.name: _mode(p) for p in tmp_path.iterdir()} == {
            "outbox.db": 0o600, "outbox.db-wal": 0o600, "outbox.db-shm": 0o600}
    finally:
        db.dispose()


def test_a_backup_is_its_owners_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    migrate.upgrade(url)

    backup.backup_sqlite(url, tmp_path / "copy.db")

    assert _mode(tmp_path / "copy.db") == 0o600
