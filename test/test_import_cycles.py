"""No import cycle in lingbot_map_ros/: the module import graph, parsed from the source, has no cycle.

Edges: every `import lingbot_map_ros...` / `from lingbot_map_ros... import ...` / relative import of a module,
at module level or inside a function or class (a deferred import still ties the two modules together: it
only hides the cycle from the interpreter's start-up). `from package import name` points at the submodule
`package.name` when there is one, else at the package (`__init__.py`). Imports under `if TYPE_CHECKING:` do
not count: they are annotations only, never executed, and are how a module names a type of a module that
imports it. A failure names every cycle, one path per strongly connected component.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "lingbot_map_ros"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement outside `if TYPE_CHECKING:` bodies (their `else:` branches do run)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """{module: the package modules it imports at run time} for every module of the package."""
    paths = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in paths else source
                    for alias in node.names
                ]
            graph[name] |= {t for t in targets if t in paths and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle path (first module repeated at the end) per strongly connected component of more than one
    module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(_cycle_in(graph, component) for component in components)


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first within the component)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in parents:
                    parents[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {start} in its component")


def test_the_cycle_finder_finds_a_cycle_through_a_deferred_import_and_ignores_type_checking() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\nelse:\n    import y\n"
        "def f():\n    import z\n"
    )
    assert [alias.name for node in _runtime_imports(ast.parse(source)) for alias in node.names] == [
        "TYPE_CHECKING",
        "y",
        "z",
    ]


def test_the_graph_sees_relative_deferred_and_submodule_imports() -> None:
    graph = import_graph()
    assert len(graph) > 100
    # `from . import persistence` (engine/face.py): the submodule, not engine/__init__
    assert "lingbot_map_ros.engine.persistence" in graph["lingbot_map_ros.engine.face"]
    # a relative import (`from .lock_order import OrderedLock` in engine/tracker.py)
    assert "lingbot_map_ros.engine.lock_order" in graph["lingbot_map_ros.engine.tracker"]
    # a deferred one (`BagWorker.__init__` imports the engine's face inside the method)
    assert "lingbot_map_ros.engine.face" in graph["lingbot_map_ros.tools.batch_worker"]


def test_no_import_cycle_in_the_package() -> None:
    found = cycles(import_graph())
    assert not found, f"{len(found)} import cycle(s) in {PACKAGE}/:\n" + "\n".join(
        " -> ".join(c) for c in found
    )
