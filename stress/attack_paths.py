"""Attack 6: hostile paths handed to every read path and every CLI command.

The damage attack damages files inside a store; users also point the tools at the
wrong thing.  Here the store's directory, and each file the commands name, is
replaced by:

* ``missing``: nothing there;
* ``empty dir``: an empty directory (where a file is expected: a directory);
* ``symlink loop``: a symbolic link to itself (``ELOOP``);
* ``plain file``: a small file of text (where a directory is expected: a file);

and every in-process read path (:data:`stress.readpaths.READ_PATHS`) and every CLI
command (:data:`stress.readpaths.CLI_COMMANDS`, forked processes) is run on it.
Allowed: a typed error (``EngineError``; on the command line a non-zero exit with a
message), and in the API an ``OSError`` (the operating system's own answer for a
path that is not there).  A traceback or a hang is a violation, and so is a read
that returns data (there is none).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from stress import clirun
from stress.attack_damage import Hung, read_deadline, shown_arg
from stress.core import StoreAdapter, capture_warnings
from stress.readpaths import CLI_COMMANDS, READ_PATHS
from stress.results import Failure, Tally

#: What replaces the store's directory or file.
HOSTILE = ("missing", "empty dir", "symlink loop", "plain file")

#: Seconds a read of a hostile path may take.
TIMEOUT = 10.0


def _make(path: str, what: str) -> None:
    """Put ``what`` at ``path`` (its parent exists)."""
    if what == "empty dir":
        os.makedirs(path)
    elif what == "symlink loop":
        os.symlink(os.path.basename(path), path)
    elif what == "plain file":
        with open(path, "w", encoding="utf-8") as f:
            f.write("not a store\n")


def _targets(adapter: StoreAdapter) -> list[str]:
    """The relative paths the store's commands name below its root ('' is the root)."""
    names = {""}
    for command in CLI_COMMANDS.get(adapter.name, []):
        for arg in command:
            if arg.startswith("{root}/"):
                names.add(arg[len("{root}/") :])
    return sorted(names)


def attack(adapter: StoreAdapter, tally: Tally, seed: int) -> None:
    """Every hostile thing at every path the store's tools name."""
    workdir = tempfile.mkdtemp(prefix=f"stress-paths-{adapter.name}-")
    try:
        for rel in _targets(adapter):
            for what in HOSTILE:
                _probe(adapter, tally, seed, workdir, rel, what)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _case(workdir: str, rel: str, what: str) -> str:
    """A fresh directory with ``what`` at ``DIR/rel``; returns DIR (a writer's open may
    create a store there, so every read gets its own)."""
    root = os.path.join(tempfile.mkdtemp(dir=workdir), "db")
    if rel:
        os.makedirs(root)
    _make(os.path.join(root, rel) if rel else root, what)
    return root


def _probe(adapter: StoreAdapter, tally: Tally, seed: int, workdir: str, rel: str, what: str) -> None:
    from engine.errors import EngineError
    from engine.fs import OsFileSystem

    label = f"{what} at {'DIR/' + rel if rel else 'DIR'}"
    results: list[tuple[str, str, str]] = []
    for name, read in READ_PATHS.get(adapter.name, {}).items():
        root = _case(workdir, rel, what)
        try:
            with capture_warnings(), read_deadline(TIMEOUT):
                got = read(OsFileSystem(), root)
            outcome, detail = ("identical", "") if not _has_data(got) else ("silent wrong data", f"read {got!r:.200}")
        except Hung:
            outcome, detail = "hang", f"more than {TIMEOUT} s"
        except EngineError as exc:
            outcome, detail = "typed error", f"{type(exc).__name__}: {exc}"
        except OSError as exc:
            outcome, detail = "os error", f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            outcome, detail = "traceback", f"{type(exc).__name__}: {exc!r}"
        results.append((name, outcome, detail))
    for command in CLI_COMMANDS.get(adapter.name, []):
        root = _case(workdir, rel, what)
        argv = [c.replace("{root}", root).replace("{file}", root) for c in command]
        got_cli = clirun.run_forked(argv)
        outcome, detail = clirun.cli_outcome(got_cli, None, summary=True)
        if outcome in ("summary changed", "silent change", "reported"):
            outcome = "identical"  # exit 0 on an empty store is fine: nothing to compare
        results.append(("engine " + " ".join(shown_arg(c) for c in command), outcome, detail))
        tally.cli_runs += 1
    if not results:
        return  # a store with no read paths or commands listed (a calibration toy)
    kind = f"path: {label.split(' at ')[0]}"
    tally.damaged += 1
    worst = min((o for _n, o, _d in results), key=_SEVERITY.index)
    tally.damage_outcome(kind, worst)
    for name, outcome, _detail in results:
        tally.read_outcome(name, outcome)
    for name, outcome, detail in results:
        if outcome in ("traceback", "hang", "silent wrong data"):
            tally.fail(Failure(adapter.name, "hostile path", seed, [], f"{outcome} via {name}: {detail}",
                               {"path": label}))


_SEVERITY = ("hang", "traceback", "silent wrong data", "os error", "typed error", "identical")


def _has_data(got: object) -> bool:
    """Whether a read path returned any record (an empty store reads as nothing)."""
    if got is None:
        return False
    if isinstance(got, (list, dict, tuple)):
        if isinstance(got, tuple) and len(got) == 3 and isinstance(got[2], list):
            return bool(got[2])  # the append log's (first, next, records)
        return bool(got) and not (isinstance(got, tuple) and not any(got))
    pages = getattr(got, "pages", None)
    return bool(pages)
