"""The shape of the ``engine`` package: no import cycle anywhere (``TYPE_CHECKING``
imports, function-local imports and imports by string all counted), no reads of
another object's private attributes beyond a shrinking allow-list, small modules,
codecs without I/O, the OS reached only through the file-system seam."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import engine

ROOT = Path(engine.__file__).parent
#: The only modules that may import ``os`` for I/O: the real file system, the
#: crash-point hook (it kills the process) and the native-code switch (environment).
OS_ALLOWED = {"engine.fs.osfs", "engine.fs.crashpoints", "engine.native"}

#: Import cycles allowed: none.  A cycle (a strongly connected component of the
#: import graph, TYPE_CHECKING, function-level and by-string imports included)
#: fails the test; an entry here would have to say why.
KNOWN_CYCLES: set[frozenset[str]] = set()

#: Per file, the reads of another object's private attributes (``obj._x`` with
#: ``obj`` not ``self``/``cls``/a module) it holds, each commented where it is: a
#: class's own second object (the queue's keeper, engine.lifetime; an object its
#: ``open`` is building) or argparse's parser, which has no public list of its
#: actions.  A file may only go down; lower the number when it does.
KNOWN_PRIVATE_READS: dict[str, int] = {
    "engine/cli.py": 3,
    "engine/events/journal.py": 1,
    "engine/events/reader.py": 1,
    "engine/queue/queue.py": 5,
    "engine/queue/remote.py": 2,
}

#: Names that are modules, not objects: ``os._exit`` and ``sys._getframe`` are the
#: standard library's documented API, not another object's state.
MODULE_NAMES = {"os", "sys", "argparse", "threading", "ctypes", "collections", "struct", "socket", "signal", "string"}
#: Calls whose string argument names a logger, not a module to import.
LOGGER_CALLS = {"getLogger"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imported(node: ast.AST, known: dict[str, Path], here: str = "") -> set[str]:
    """The engine modules one import statement names (``from P import m`` names
    the module ``P.m`` when it exists, else the package ``P``; relative imports are
    resolved against ``here``)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    if isinstance(node, ast.ImportFrom):
        module = node.module
        if node.level:
            is_package = (ROOT.parent / here.replace(".", "/") / "__init__.py").exists()
            base = here.split(".")
            base = base if is_package else base[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join([*base, *([node.module] if node.module else [])])
        if module is None:
            return set()
        out = set()
        for alias in node.names:
            sub = f"{module}.{alias.name}"
            if sub in known:
                out.add(sub)
            elif module in known:
                out.add(module)
        return out
    return set()


def named_by_string(tree: ast.AST, known: dict[str, Path]) -> set[str]:
    """The engine modules a file names in a string constant: registries and
    ``importlib.import_module("engine....")`` load them (logger names excepted)."""
    loggers = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in LOGGER_CALLS:
                loggers |= {id(a) for a in node.args}
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and node.value in known and id(node) not in loggers
    }


def import_graph() -> dict[str, set[str]]:
    """Every edge an import can take at any time: module level, inside functions,
    under ``if TYPE_CHECKING:`` (a type checker follows it, and so does a reader)
    and by string."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        deps: set[str] = set()
        for node in ast.walk(tree):
            deps |= imported(node, known, name)
        deps |= named_by_string(tree, known)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of ``graph`` with more than one module
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                dep = todo.pop(0)
                if dep not in index:
                    index[dep] = low[dep] = counter
                    counter += 1
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, sorted(graph.get(dep, ()))))
                elif dep in on_stack:
                    low[node] = min(low[node], index[dep])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


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


def private_reads(path: Path) -> list[str]:
    """Each ``obj._x`` in ``path`` where ``obj`` is not ``self``, ``cls`` or a
    module (dunders such as ``obj.__class__`` are not private state)."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if not attr.startswith("_") or (attr.startswith("__") and attr.endswith("__")):
            continue
        value = node.value
        if isinstance(value, ast.Name) and (value.id in {"self", "cls"} or value.id in MODULE_NAMES):
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
            continue
        out.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {ast.unparse(node)}")
    return out


def private_read_counts() -> Counter[str]:
    return Counter({str(p.relative_to(ROOT.parent)): n for p in ROOT.rglob("*.py") if (n := len(private_reads(p)))})


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert cycles({"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"a"}}) == {
        frozenset("ab"), frozenset("cd")}


def test_the_graph_sees_function_local_imports() -> None:
    """``engine.queue.cli`` imports the queue only inside its command functions;
    the graph must still hold that edge (a cycle through such an import is a
    cycle all the same)."""
    assert "engine.queue.queue" in import_graph()["engine.queue.cli"]


def test_the_graph_sees_type_checking_and_string_imports() -> None:
    """A ``TYPE_CHECKING`` import and a module named in a registry string are
    edges too; a logger's name is not."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from engine.errors import CorruptFileError\n"
        "HANDLERS = ('engine.formats',)\n"
        "import logging\nlog = logging.getLogger('engine.native')\n"
    )
    known = modules()
    tree = ast.parse(source)
    deps = set().union(*(imported(n, known) for n in ast.walk(tree))) | named_by_string(tree, known)
    assert deps == {"engine.errors", "engine.formats"}


def test_no_import_cycle_in_engine() -> None:
    graph = import_graph()
    assert len(graph) > 50
    found = cycles(graph)
    print(f"\nimport cycles: {len(found)} (known: {len(KNOWN_CYCLES)})")
    for component in sorted(found, key=sorted):
        print("  " + " <-> ".join(sorted(component)))
    new = found - KNOWN_CYCLES
    gone = KNOWN_CYCLES - found
    assert not new, f"new or grown import cycles: {[sorted(c) for c in new]}"
    assert not gone, f"cycles fixed: drop them from KNOWN_CYCLES: {[sorted(c) for c in gone]}"


def test_the_private_read_counter_counts() -> None:
    tmp = ROOT / "fs" / "base.py"  # any real file: the counter reads the AST only
    assert all(" " in line for line in private_reads(tmp))


def test_no_file_reads_more_privates_than_it_did() -> None:
    counts = private_read_counts()
    print(f"\ncross-object private reads: {sum(counts.values())} in {len(counts)} files "
          f"(ceilings total {sum(KNOWN_PRIVATE_READS.values())})")
    for name, n in counts.most_common():
        print(f"  {name}: {n}")
    worse = {name: (n, KNOWN_PRIVATE_READS.get(name, 0)) for name, n in counts.items()
             if n > KNOWN_PRIVATE_READS.get(name, 0)}
    assert not worse, f"more private reads than the ceiling (count, ceiling): {worse}"
    better = {name: (counts.get(name, 0), n) for name, n in KNOWN_PRIVATE_READS.items() if counts.get(name, 0) < n}
    assert not better, f"fewer private reads: lower KNOWN_PRIVATE_READS (count, ceiling): {better}"


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
