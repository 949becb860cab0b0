"""The SQL that lives in the database: app/storage/sql/ holds the current text of each piece,
and the newest migration that (re)creates a piece runs a frozen copy of that text.

A frozen copy is migrations/versions/sql/NNNN_<name>, <name> being the catalogue's file name:
the copy with the highest NNNN is what a database at head holds, so it must equal the
catalogue. Changing a file here without a migration that carries the change fails below."""

from __future__ import annotations

import re
from pathlib import Path

from app.storage.sql import load

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = ROOT / "app" / "storage" / "sql"
FROZEN = ROOT / "migrations" / "versions" / "sql"


def _newest_copy(name: str) -> Path | None:
    copies = sorted(p for p in FROZEN.glob(f"*_{name}") if re.fullmatch(rf"\d{{4}}_{re.escape(name)}", p.name))
    return copies[-1] if copies else None


def test_the_newest_migration_runs_the_catalogues_text() -> None:
    for path in sorted(CATALOGUE.glob("*.sql")):
        copy = _newest_copy(path.name)
        assert copy is not None, f"no migration creates app/storage/sql/{path.name}: add migrations/versions/sql/NNNN_{path.name}"
        assert copy.read_text() == load(path.name), f"app/storage/sql/{path.name} changed after {copy.name}: it needs a migration"


def test_every_frozen_copy_is_run_by_its_migration() -> None:
    """A frozen copy nobody runs would pass the test above while the database holds older SQL."""
    migrations = {p.name[:4]: p.read_text() for p in (ROOT / "migrations" / "versions").glob("[0-9][0-9][0-9][0-9]_*.py")}
    for copy in FROZEN.glob("*.sql"):
        assert f'"{copy.name}"' in migrations.get(copy.name[:4], ""), f"{copy.name} is not run by migration {copy.name[:4]}"
