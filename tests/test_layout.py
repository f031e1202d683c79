"""The package's shape: no import cycles, small modules.

The import graph is read from the source with ``ast`` (no import side effects, nothing to install): every
``import``/``from ... import`` of a faithtrace module, at module level or inside a function, counts; imports
under ``if TYPE_CHECKING:`` do not (they never run). A cycle anywhere in the package fails, which covers the
request path, the runtime, the worker and telemetry.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "faithtrace"
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = ["faithtrace", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except what sits under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def imports_of(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:  # `from faithtrace import _runtime` imports a module
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    return {name for name in found if name in MODULES and name != module}


def graph() -> dict[str, set[str]]:
    return {module: imports_of(module) for module in MODULES}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_checker_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    edges = graph()
    assert (
        "faithtrace._runtime.worker" in edges["faithtrace._runtime.runtime"]
    )  # module-level imports are seen
    # TYPE_CHECKING imports are not
    assert "faithtrace._runtime.runtime" not in edges["faithtrace._request.streams"]


def test_no_import_cycles_in_the_package() -> None:
    assert cycles(graph()) == []


def test_the_request_path_and_the_runtime_point_down() -> None:
    """The request path (decorator, streams, traced calls, pending spans, capture, sampling) reaches the
    runtime; nothing below it imports the request path back."""
    edges = graph()
    request_path = {
        "faithtrace._request.decorator",
        "faithtrace._request.streams",
        "faithtrace._request.chat_streams",
    }
    request_path.add("faithtrace._request.traced_function")
    lower = [m for m in edges if m not in request_path and m != "faithtrace"]
    for module in lower:
        assert not edges[module] & request_path, module
    for module in (
        "faithtrace._runtime.worker",
        "faithtrace._runtime.pending_span",
        "faithtrace._telemetry.spans",
    ):
        assert "faithtrace._runtime.runtime" not in edges[module]
    # Scoring and the judge know nothing of spans, the worker or the runtime: only errors, options, the
    # readable cut of a quoted text and text repair.
    allowed = {"faithtrace._common.errors", "faithtrace._common.safety", "faithtrace._config.options"}
    allowed |= {"faithtrace._common.shorten", "faithtrace._common.unicode"}
    allowed |= {"faithtrace._config.option", "faithtrace._config.table"}
    allowed |= {"faithtrace._config.judge_settings", "faithtrace._config.scoring_options"}
    for module in edges:
        if module.startswith(("faithtrace.scoring", "faithtrace.judge")):
            top = {m for m in edges[module] if m.startswith("faithtrace._")}
            assert top <= allowed, (module, top - allowed)


def test_modules_stay_small() -> None:
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in MODULES.items()}
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}


def test_only_the_pending_span_ends_a_rag_span() -> None:
    """The request path, the runtime and the worker hand the span around; ``PendingSpan`` alone ends it."""
    for module in (
        "_request.decorator",
        "_request.streams",
        "_request.chat_streams",
        "_request.traced_function",
        "_runtime.runtime",
        "_runtime.worker",
    ):
        tree = ast.parse(MODULES[f"faithtrace.{module}"].read_text(encoding="utf-8"))
        ends = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "end"
        ]
        assert ends == [], (module, ends)
    pending = ast.parse(MODULES["faithtrace._runtime.pending_span"].read_text(encoding="utf-8"))
    owners = {
        fn.name
        for fn in ast.walk(pending)
        if isinstance(fn, ast.FunctionDef)
        and any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "end"
            for n in ast.walk(fn)
        )
    }
    assert owners == {"fail", "drop", "finish"}
