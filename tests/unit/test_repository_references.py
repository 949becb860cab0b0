"""The repository stands alone: what its code, tests and documents cite is in the repository.

A comment that cites a file, a module's function or a guarantee is a promise to the reader
that they can go and look. These tests hold every such citation to something that exists:
files by path, `app.…` and `spark_jobs.…` names by module and top-level name, and
`docs/<file>.md#anchor` by heading. Citations of what the repository does not hold (the
design notes it grew from, issue numbers, guarantees by number) are refused: the guarantees
are written in docs/GUARANTEES.md, and cited there by anchor."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("app", "spark_jobs", "migrations", "tests", "benchmarks", "examples", "docker", ".ci", "docs")
SUFFIXES = {".py", ".sql", ".md", ".js", ".html", ".sh", ".toml", ".yaml", ".ini", ".mjs", ""}


def _files() -> list[Path]:
    out = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "openapi.yaml"]
    for top in SOURCES:
        for path in (ROOT / top).rglob("*"):
            if (path.is_file() and path.suffix in SUFFIXES and "node_modules" not in path.parts
                    and "static" not in path.parts and "__pycache__" not in path.parts):
                out.append(path)
    return sorted(p for p in out if p.exists() and p != Path(__file__).resolve())


FILES = _files()

# What the repository does not hold, however it is cited.
OUTSIDE = re.compile(
    r"\bguarantees? \d+|\bCONTRACT(\.md)?\b|\bNOTES\.md\b|\bseeds?[/ ]0\d\d|\bseeds/|\bissue #?\d+|\bentry [A-Z]\d+\b"
)
PATH = re.compile(r"(?<![\w./-])((?:app|spark_jobs|migrations|tests|benchmarks|examples|docs|docker|\.ci)/[\w./-]*\w)")
DOC_ANCHOR = re.compile(r"(?<![\w/])(docs/\w+\.md|README\.md)#([\w-]+)")
DOTTED = re.compile(r"(?<![\w.])((?:app|spark_jobs)(?:\.\w+)+)")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_nothing_outside_the_repository_is_cited(path: Path) -> None:
    hits = [f"{i}: {line.strip()}" for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if OUTSIDE.search(line)]
    assert not hits, "cites what the repository does not hold:\n" + "\n".join(hits)


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_every_cited_file_exists(path: Path) -> None:
    missing = []
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        for match in PATH.finditer(line):
            cited = match.group(1).rstrip(".")
            if re.match(r"`?,? \(?since removed", line[match.end():]):
                continue  # the benchmark diary's history
            if any(c in cited for c in "*{}<>") or "NNNN" in cited:
                continue  # a pattern, not a file
            if not (ROOT / cited).exists() and not (ROOT / (cited + ".py")).exists():
                missing.append(f"{i}: {cited}")
    assert not missing, "cites files that do not exist:\n" + "\n".join(missing)


@cache
def _anchors(doc: str) -> set[str]:
    text = (ROOT / doc).read_text()
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_every_cited_anchor_exists(path: Path) -> None:
    missing = [f"{doc}#{anchor}" for doc, anchor in DOC_ANCHOR.findall(path.read_text(errors="replace"))
               if (ROOT / doc).exists() and anchor not in _anchors(doc)]
    assert not missing, "cites headings that do not exist: " + ", ".join(missing)


@cache
def _top_level_names(module: Path) -> dict[str, set[str]]:
    """A module's top-level names, each with the names in its body if it is a class."""
    tree = ast.parse(module.read_text())
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = set()
        elif isinstance(node, ast.ClassDef):
            names[node.name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} | {
                t.id for n in node.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names[n.id] = set()
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = set()
    return names


def _cites_the_code(dotted: str) -> bool:
    """`app.storage.read.fetch` cites the code; `app.state.services` is an attribute of a
    variable named app: the second part must be one of the package's modules."""
    parts = dotted.split(".")
    return (ROOT / parts[0] / parts[1]).is_dir() or (ROOT / parts[0] / (parts[1] + ".py")).exists()


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not module.exists():
            continue
        rest = parts[cut:]
        if not rest:
            return True
        names = _top_level_names(module)
        if rest[0] not in names:
            return (base / rest[0]).exists()
        return len(rest) == 1 or not names[rest[0]] or rest[1] in names[rest[0]]
    return False


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_every_cited_name_of_the_code_exists(path: Path) -> None:
    missing = []
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        for dotted in DOTTED.findall(line):
            if _cites_the_code(dotted) and not _resolves(dotted.rstrip(".")):
                missing.append(f"{i}: {dotted}")
    assert not missing, "cites names that do not exist:\n" + "\n".join(missing)


def test_the_guarantees_are_written_down() -> None:
    assert {"atomicity", "commit-order", "in-order-visibility", "authorization"} <= _anchors("docs/GUARANTEES.md")
