"""The layering holds: every import-linter contract in pyproject.toml ([tool.importlinter]) is
kept. The contracts are the specification (docs/ARCHITECTURE.md, "Layers"); this test is what
makes a broken one fail the fast tier."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _contracts() -> dict[str, dict]:  # type: ignore[type-arg]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {contract["id"]: contract for contract in config["contracts"]}


def test_every_import_contract_is_kept() -> None:
    result = subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", "pyproject.toml"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in result.stdout


def test_the_spark_jobs_may_import_no_module_of_app_but_the_client_and_the_database_urls() -> None:
    app_modules = {f"app.{path.stem}" for path in (ROOT / "app").glob("*.py") if path.stem != "__init__"}
    app_modules |= {f"app.{path.parent.name}" for path in (ROOT / "app").glob("*/__init__.py")}
    assert set(_contracts()["spark-through-client"]["forbidden_modules"]) == app_modules - {"app.client", "app.database_url", "app.reader_relations"}
