"""No import cycle in lingbot_map_ros/: the module import graph, parsed from the source, has no cycle.

Edges: every `import lingbot_map_ros...` / `from lingbot_map_ros... import ...` / relative import of a module,
at module level, inside a function or class (a deferred import still ties the two modules together: it
only hides the cycle from the interpreter's start-up) or under `if TYPE_CHECKING:` (a type named there is a
dependency all the same: two modules that need each other's types share a third one, a leaf module or a
Protocol). `from package import name` points at the submodule `package.name` when there is one, else at the
package (`__init__.py`). A failure names every cycle, one path per strongly connected component.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "lingbot_map_ros"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# Cycles still to break, each one strongly connected component (its modules): ros/ and tools/ are being
# restructured apart (issue 28, "ros/ and tools/ in folders by role"); whoever breaks one deletes its line.
# A listed cycle that is gone fails the test too, so the list only shrinks. Nothing outside ros/ and tools/.
ALLOWED_CYCLES: tuple[frozenset[str], ...] = ()  # a cycle being broken, listed with why; none now


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module: module level, deferred, under `if TYPE_CHECKING:`."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


def import_graph() -> dict[str, set[str]]:
    """{module: the package modules it imports} for every module of the package."""
    paths = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
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


def components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
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
    return components


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle path (first module repeated at the end) per strongly connected component of more than one
    module, sorted."""
    return sorted(_cycle_in(graph, component) for component in components(graph))


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


def test_the_cycle_finder_finds_a_cycle_through_deferred_and_type_checking_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\nelse:\n    import y\n"
        "def f():\n    import z\n"
    )
    assert sorted(alias.name for node in _imports(ast.parse(source)) for alias in node.names) == [
        "TYPE_CHECKING",
        "x",
        "y",
        "z",
    ]


def test_the_graph_sees_relative_deferred_type_checking_and_submodule_imports() -> None:
    graph = import_graph()
    assert len(graph) > 100
    # `from . import persistence` (engine/face.py): the submodule, not engine/__init__
    assert "lingbot_map_ros.engine.persistence" in graph["lingbot_map_ros.engine.face"]
    # a relative import (`from .lock_order import OrderedLock` in engine/tracker.py)
    assert "lingbot_map_ros.engine.lock_order" in graph["lingbot_map_ros.engine.tracker"]
    # a deferred one (`BagWorker.__init__` imports the engine's face inside the method)
    assert "lingbot_map_ros.engine.face" in graph["lingbot_map_ros.tools.batch.worker"]
    # one under `if TYPE_CHECKING:` only (model/stream.py names `GraphedStreamStep` there)
    assert "lingbot_map_ros.model.graphed" in graph["lingbot_map_ros.model.stream"]


def test_no_import_cycle_in_the_package() -> None:
    graph = import_graph()
    found = components(graph)
    new = [c for c in found if frozenset(c) not in ALLOWED_CYCLES]
    assert not new, f"{len(new)} import cycle(s) in {PACKAGE}/:\n" + "\n".join(
        " -> ".join(_cycle_in(graph, c)) for c in sorted(new, key=min)
    )
    gone = [sorted(c) for c in ALLOWED_CYCLES if c not in {frozenset(f) for f in found}]
    assert not gone, f"broken cycles still in ALLOWED_CYCLES (delete their lines): {gone}"
    assert all(m.split(".")[1] in ("ros", "tools") for c in ALLOWED_CYCLES for m in c)
