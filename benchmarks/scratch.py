"""The scratch database every benchmark measures in: a new SQLite file or PostgreSQL database,
migrated, and removed afterwards whatever failed (a benchmark that dies must not leave
databases behind, nor keep one alive through a connection it left open: DROP … WITH (FORCE)).

A few Spark benchmarks measure a log that takes minutes to write, and read it again in later
runs: theirs is a kept database (kept_database), of a fixed name, made here too, so that every
CREATE and DROP DATABASE of the benchmarks is in this file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parents[1]
ADMIN_URL = os.environ.get("OUTBOX_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def _create(admin_url: str, database: str, *, replace: bool = False) -> str:
    """Create PostgreSQL database `database` (dropped first if `replace`); its URL."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as c:
            if replace:
                c.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
            c.execute(text(f'CREATE DATABASE "{database}"'))
    finally:
        admin.dispose()
    return make_url(admin_url).set(database=database).render_as_string(hide_password=False)


def _drop(admin_url: str, database: str) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
    finally:
        admin.dispose()


def kept_database(name: str, *, fresh: bool = False, admin_url: str = ADMIN_URL) -> tuple[str, bool]:
    """(The URL of PostgreSQL database `name`, whether it was created now): created if it does
    not exist, or dropped and created again if `fresh`; left in place after the run, for later
    runs to measure again. Not migrated: a database created now is empty, for the caller to
    migrate and fill (the Spark benchmarks do both through benchmarks/committed_log.py)."""
    admin = create_engine(admin_url, poolclass=NullPool)
    try:
        with admin.connect() as c:
            exists = c.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first() is not None
    finally:
        admin.dispose()
    if exists and not fresh:
        return make_url(admin_url).set(database=name).render_as_string(hide_password=False), False
    return _create(admin_url, name, replace=exists), True


@contextmanager
def scratch_database(kind: str, name: str, *, migrate_with: Sequence[Path] = (ROOT,),
                     admin_url: str = ADMIN_URL, keep: bool = False) -> Iterator[str]:
    """The URL of a new database of `kind` ("sqlite" or "postgresql"), named after `name`,
    migrated by each tree of `migrate_with` in turn (the older first, when two trees share it:
    the newer may add migrations). Dropped on exit; with `keep`, left in place when the block
    ends normally (to look into what a run wrote), still dropped when it raises."""
    if kind == "sqlite":
        tmp = tempfile.mkdtemp(prefix=f"outbox-{name}-")
        url = f"sqlite:///{tmp}/{name}.db"

        def drop() -> None:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        database = f"outbox_{name}_{uuid.uuid4().hex[:8]}"
        url = _create(admin_url, database)

        def drop() -> None:
            _drop(admin_url, database)
    kept = False
    try:
        # The caller's OUTBOX_ settings are not the scratch database's; each tree's own `app`,
        # not whatever the venv's editable install names.
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
        for root in migrate_with:
            subprocess.run([sys.executable, "-m", "app.cli", "migrate"], cwd=root, check=True, capture_output=True,
                           env={**env, "OUTBOX_DATABASE_URL": url, "PYTHONPATH": str(root)})
        yield url
        # Only a run that ended normally is worth keeping: a failed or interrupted one's
        # database is half written, and would be left behind unnoticed.
        kept = keep
    finally:
        if not kept:
            drop()
