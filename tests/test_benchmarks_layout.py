"""benchmarks/ by question: one package whose modules import each other by full name, with no import cycle.

The graph is read from the source with ``ast``, as tests/test_layout.py reads the package's: every ``import``
and ``from ... import`` counts, at module level, inside a function or under ``if TYPE_CHECKING:`` (a type-only
import is still a dependency a reader has to follow).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def module_names(root: Path) -> dict[str, Path]:
    """Every module under ``root`` by its full name (``root``'s folder name first)."""
    names = {}
    for path in root.rglob("*.py"):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
                package = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{package}.{base}" if base else package
            for alias in node.names:  # `from benchmarks.fleet import fleet` imports a module
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def graph(root: Path) -> dict[str, set[str]]:
    modules = module_names(root)
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each import cycle once, as the modules on it (depth-first search for a path back to a grey module)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt) :])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def bare_imports(root: Path) -> list[str]:
    """Imports of a neighbour by its bare name (``import _common``), which only work because the running
    script's folder is on sys.path and give the module a second name, out of this graph's sight."""
    local = {p.stem for p in root.rglob("*.py")} | {p.name for p in root.rglob("*") if p.is_dir()}
    wrong = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            wrong += [f"{path.relative_to(root)}: {n}" for n in names if n.split(".")[0] in local]
    return wrong


def test_no_import_cycle_under_benchmarks() -> None:
    edges = graph(BENCH)
    assert "benchmarks.request_path.overhead" in edges  # the walk sees the scripts in their folders
    assert edges["benchmarks.fleet.fleet_kafka"] >= {"benchmarks.fleet.fleet", "benchmarks._shared.common"}
    assert cycles(edges) == []


def test_benchmarks_import_their_neighbours_by_full_name() -> None:
    assert bare_imports(BENCH) == []


def test_benchmarks_live_in_their_questions_folders() -> None:
    top = sorted(p.name for p in BENCH.glob("*.py"))
    assert top == ["__init__.py", "report.py"], top  # every script sits in the folder of its question
    for folder in ("request_path", "judgment", "detector", "fleet", "_shared"):
        assert (BENCH / folder / "__init__.py").exists(), folder


def test_a_type_only_import_closes_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\n"
    )
    (pkg / "c.py").write_text("import helper\n")
    (pkg / "helper.py").write_text("")
    assert cycles(graph(pkg)) == [["pkg.a", "pkg.sub.b"]]
    assert bare_imports(pkg) == ["c.py: helper"]
