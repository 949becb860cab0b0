"""The layers import downwards only: api → services → domain / storage; worker → services.

A test rather than a convention, so that a shortcut across layers shows up in review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

FORBIDDEN = {
    "domain": ("app.storage", "app.services", "app.api", "app.worker", "app.client", "app.metrics", "sqlalchemy", "fastapi", "starlette", "httpx", "prometheus_client"),
    "storage": ("app.services", "app.api", "app.worker", "app.client", "fastapi", "starlette"),
    "services": ("app.api", "app.worker", "app.client", "fastapi", "starlette"),
    "worker": ("app.api", "app.client", "fastapi", "starlette"),
    "client": ("app.api", "app.services", "app.storage", "app.worker", "app.domain", "sqlalchemy", "fastapi"),
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_does_not_import_upwards(layer: str) -> None:
    offenders = [
        f"{path.relative_to(APP)} imports {name}"
        for path in sorted((APP / layer).rglob("*.py"))
        for name in _imports(path)
        if name.startswith(FORBIDDEN[layer])
    ]
    assert offenders == []
