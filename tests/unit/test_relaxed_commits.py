"""Relaxing a commit (PostgreSQL's synchronous_commit off) is defined once,
app.storage.dialect.relax_commit: the writes that need not be durable, the background chores'
writes and the Sends of durability "commit" use it, so that what a relaxed write is, and which
ones the high watermark must keep readers off, is read in one place."""

from __future__ import annotations

import ast
import pathlib

from sqlalchemy.dialects import postgresql

from app.storage import dialect

ROOT = pathlib.Path(__file__).resolve().parents[2] / "app"


def _setting_named_in_code(path: pathlib.Path) -> bool:
    """Whether a string of the module's code (not a docstring, not a comment) names the setting."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and "synchronous_commit" in n.value
               and id(n) not in docstrings for n in ast.walk(tree))


def test_synchronous_commit_is_set_in_the_dialect_module_only() -> None:
    setting = sorted(str(p.relative_to(ROOT.parent)) for p in ROOT.rglob("*.py") if _setting_named_in_code(p))
    assert setting == ["app/storage/dialect.py"]


def test_relax_commit_sets_synchronous_commit_off_for_the_transaction_only() -> None:
    compiled = dialect.relax_commit().compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    assert str(compiled) == "set_config('synchronous_commit', 'off', true)"
