"""A consistent copy of a live SQLite database (`outbox backup`).

Copying the file (`cp`) while a process writes is not safe: in WAL mode the committed state is
the main file plus the `-wal` file, which a checkpoint moves into the main file page by page
at any moment; a copy of one without the other, or of either mid-checkpoint, may be missing
committed transactions or be corrupt.

SQLite's online backup API (`sqlite3.Connection.backup`) copies the database page by page
through a connection, under one read transaction when asked for every page in one step: the
copy is the database as of one commit, and in WAL mode writers carry on meanwhile (a reader
never blocks them). VACUUM INTO would also give one snapshot, but it rebuilds every table and
index into the new file, which takes longer on a large log and so holds the read transaction
(and keeps the WAL from being checkpointed past it) longer; the backup API copies the pages
as they are.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


from app.storage.engine import create_private, sqlite_path


class BackupRefused(Exception):
    """The backup cannot be made as asked; nothing was written."""


def backup_sqlite(database_url: str, destination: Path, *, busy_timeout_ms: int = 30_000) -> str | None:
    """Copy the live database to `destination`, a new file; returns the copy's schema revision.

    The copy is written under a temporary name beside `destination` and renamed once complete
    and flushed, so `destination` is either absent or a whole backup. It is a single file in
    rollback-journal mode (no `-wal` beside it); `outbox serve` turns WAL back on when it opens it.
    """
    source = sqlite_path(database_url)
    if source is None:
        raise BackupRefused("an in-memory database has nothing to back up")
    if not source.is_file():
        raise BackupRefused(f"no SQLite database at {source.resolve()}")
    if destination.exists():
        raise BackupRefused(f"{destination} exists; back up to a new file")
    if not destination.parent.is_dir():
        raise BackupRefused(f"directory {destination.parent} does not exist")
    partial = destination.with_name(f".{destination.name}.{os.getpid()}.partial")
    try:
        src = sqlite3.connect(source, timeout=busy_timeout_ms / 1000)
        create_private(partial)  # the copy holds what the database holds: its owner's only
        dst = sqlite3.connect(partial)
        try:
            # pages=-1: every page in one step, under one read transaction, so the copy is one
            # snapshot. In steps, any write by another connection would restart the copy, and
            # under a steady stream of writes it might never finish.
            src.backup(dst, pages=-1)
            dst.execute("PRAGMA journal_mode=DELETE")
            problems = [row[0] for row in dst.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise BackupRefused(f"the copy fails SQLite's quick_check: {problems[0]}")
            revision = _revision(dst)
        finally:
            dst.close()
            src.close()
        _fsync(partial)
        try:
            # A hard link, not a rename: it fails if a file appeared at the destination since
            # the check above, where a rename would silently replace it.
            os.link(partial, destination)
        except FileExistsError:
            raise BackupRefused(f"{destination} exists; back up to a new file") from None
        _fsync(destination.parent)
    finally:
        partial.unlink(missing_ok=True)
    return revision


def _revision(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError:  # no alembic_version table: never migrated
        return None
    return None if row is None else row[0]


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
