"""The queue package has no import cycle, counting function-local imports."""

from __future__ import annotations

import ast
from pathlib import Path

import engine.queue

PACKAGE = "engine.queue"


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ``engine.queue`` it imports anywhere in its body
    (top level or inside functions), from the source."""
    root = Path(engine.queue.__file__).parent
    modules = {f"{PACKAGE}.{p.stem}": p for p in root.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
                # "from engine.queue import codec" imports the module engine.queue.codec
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            deps.update(name for name in names if name in modules and name != module)
        graph[module] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_function_local_imports() -> None:
    graph = import_graph()
    assert f"{PACKAGE}.queue" in graph[f"{PACKAGE}.cli"]  # cli imports Queue inside functions
    assert f"{PACKAGE}.diagnose" in graph[f"{PACKAGE}.queue"]


def test_no_import_cycle_in_the_queue_package() -> None:
    assert find_cycle(import_graph()) is None


def test_the_cycle_finder_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
