"""The shape of the ``engine`` package: no import cycle anywhere (function-local
imports counted), small modules, codecs without I/O, the OS reached only through
the file-system seam."""

from __future__ import annotations

import ast
from pathlib import Path

import engine

ROOT = Path(engine.__file__).parent
#: The only modules that may import ``os`` for I/O: the real file system, the
#: crash-point hook (it kills the process) and the native-code switch (environment).
OS_ALLOWED = {"engine.fs.osfs", "engine.fs.crashpoints", "engine.native"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imported(node: ast.AST, known: dict[str, Path]) -> set[str]:
    """The engine modules one import statement names (``from P import m`` names
    the module ``P.m`` when it exists, else the package ``P``)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
        out = set()
        for alias in node.names:
            sub = f"{node.module}.{alias.name}"
            if sub in known:
                out.add(sub)
            elif node.module in known:
                out.add(node.module)
        return out
    return set()


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                node.body = []  # type-only imports never run
        for node in ast.walk(tree):
            deps |= imported(node, known)
        deps.discard(name)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_function_local_imports() -> None:
    """``engine.queue.cli`` imports the queue only inside its command functions;
    the graph must still hold that edge (a cycle through such an import is a
    cycle all the same)."""
    assert "engine.queue.queue" in import_graph()["engine.queue.cli"]


def test_no_import_cycle_in_engine() -> None:
    graph = import_graph()
    assert len(graph) > 50
    assert find_cycle(graph) is None


def test_modules_stay_under_800_lines() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    sizes |= {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in ROOT.rglob("*.c")}
    too_big = {name: n for name, n in sizes.items() if n > 800}
    assert not too_big


def test_codecs_do_no_io() -> None:
    """Encoding and decoding is pure bytes-in/bytes-out: no codec imports ``os``,
    ``io`` or the seam."""
    codecs = [p for p in ROOT.rglob("*codec*.py")]
    assert len(codecs) >= 5
    for path in codecs:
        tree = ast.parse(path.read_text(), str(path))
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module if node.module.startswith("engine.fs") else node.module.split(".")[0])
        assert not names & {"os", "io", "engine.fs", "shutil", "pathlib"}, (path, names)


def test_only_the_seam_calls_the_os_for_files() -> None:
    """No durable or file operation outside ``engine/fs/osfs.py``: the stores go
    through the seam, so tests can record, crash and fault them."""
    forbidden = {"open", "write", "pwrite", "pwritev", "fsync", "fdatasync", "rename", "replace", "unlink",
                 "remove", "truncate", "ftruncate", "mkdir", "makedirs", "rmdir", "stat", "fstat", "listdir",
                 "scandir"}
    offenders = []
    for name, path in modules().items():
        if name in OS_ALLOWED or name.startswith("engine.spark") or name.endswith(".cli") or name.endswith(".demo"):
            continue  # the CLI and the Spark layer talk to the user's file system, not a store's files
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
                and node.attr in forbidden
            ):
                offenders.append(f"{name}:{node.lineno} os.{node.attr}")
            if (  # os.path's questions about the disk (not its string functions)
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "os"
                and node.value.attr == "path"
                and node.attr in {"exists", "isdir", "isfile", "getsize", "getmtime", "islink", "lexists"}
            ):
                offenders.append(f"{name}:{node.lineno} os.path.{node.attr}")
    assert not offenders
