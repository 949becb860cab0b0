"""spark_jobs has no import circle: its modules import one another in one direction only
(common ← reader, writer ← datasource ← the jobs). Every import counts, those inside functions
too, so that a lazy import cannot hide a circle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "spark_jobs"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The spark_jobs modules `path` imports, anywhere in it (`from spark_jobs.x import y` names
    the module spark_jobs.x.y when that is a module, else spark_jobs.x)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "spark_jobs":
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                out.add(child if child in modules else node.module)
    return out & modules


def import_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: _imports(path, modules) - {name} for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import circle found by a depth-first walk, as the path that closes it."""
    found: list[list[str]] = []
    state: dict[str, str] = {}

    def walk(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            walk(start, [start])
    return found


def test_spark_jobs_has_no_import_circle() -> None:
    assert circles(import_graph()) == []


def test_the_circle_check_finds_a_circle_through_a_lazy_import(tmp_path: Path) -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    lazy = tmp_path / "m.py"
    lazy.write_text("def f():\n    from spark_jobs.reader import batch\n")
    assert _imports(lazy, {"spark_jobs.reader", "spark_jobs.reader.batch"}) == {"spark_jobs.reader.batch"}


def test_reads_and_writes_share_only_what_spark_jobs_common_holds() -> None:
    graph = import_graph()
    for name, imported in graph.items():
        if name.startswith("spark_jobs.reader"):
            assert not {m for m in imported if m.startswith("spark_jobs.writer")}, name
        if name.startswith("spark_jobs.writer"):
            assert not {m for m in imported if m.startswith("spark_jobs.reader")}, name
        if name.startswith(("spark_jobs.reader", "spark_jobs.writer", "spark_jobs.common")):
            assert "spark_jobs.datasource" not in imported, name
