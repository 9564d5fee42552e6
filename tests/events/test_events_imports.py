"""The events package has no import cycle (counting function-local imports), and
no module of it is over ~800 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import engine.events

PACKAGE = "engine.events"
ROOT = Path(engine.events.__file__).parent


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports anywhere in its body."""
    modules = {f"{PACKAGE}.{p.stem}": p for p in ROOT.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
                # "from  import codec" imports the module .codec
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            deps.update(name for name in names if name in modules and name != module)
        graph[module] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a path ending where it starts), or None."""
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


def test_no_import_cycle() -> None:
    assert find_cycle(import_graph()) is None


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_modules_stay_under_800_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in ROOT.glob("*.py")}
    assert max(sizes.values()) <= 800, sizes
