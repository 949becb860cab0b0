"""The scratch database every benchmark measures in: a new SQLite file or PostgreSQL database,
migrated, and removed afterwards whatever failed (a benchmark that dies must not leave
databases behind, nor keep one alive through a connection it left open: DROP … WITH (FORCE))."""

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

ROOT = Path(__file__).resolve().parents[1]
ADMIN_URL = os.environ.get("OUTBOX_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@contextmanager
def scratch_database(kind: str, name: str, *, migrate_with: Sequence[Path] = (ROOT,),
                     admin_url: str = ADMIN_URL) -> Iterator[str]:
    """The URL of a new database of `kind` ("sqlite" or "postgresql"), named after `name`,
    migrated by each tree of `migrate_with` in turn (the older first, when two trees share it:
    the newer may add migrations). Dropped on exit."""
    if kind == "sqlite":
        tmp = tempfile.mkdtemp(prefix=f"outbox-{name}-")
        url = f"sqlite:///{tmp}/{name}.db"

        def drop() -> None:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        database = f"outbox_{name}_{uuid.uuid4().hex[:8]}"
        admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{database}"'))
        url = make_url(admin_url).set(database=database).render_as_string(hide_password=False)

        def drop() -> None:
            with admin.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
            admin.dispose()
    try:
        # The caller's OUTBOX_ settings are not the scratch database's; each tree's own `app`,
        # not whatever the venv's editable install names.
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
        for root in migrate_with:
            subprocess.run([sys.executable, "-m", "app.cli", "migrate"], cwd=root, check=True, capture_output=True,
                           env={**env, "OUTBOX_DATABASE_URL": url, "PYTHONPATH": str(root)})
        yield url
    finally:
        drop()
