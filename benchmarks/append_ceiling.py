"""What one ``AppendLog.append`` costs, in CPU instructions: ``python3 -m benchmarks.append_ceiling [REV] [--json]``.

Counts the instructions per call (valgrind's callgrind, no timing: the count does
not depend on the machine's load) of three loops of ``append(b"i" * 100)`` with
``sync="never"``, each in a fresh process (``python -P``, ``PYTHONHASHSEED=0``):

* this tree's ``AppendLog.append``;
* ``REV``'s (default ``b1fec37``, whose ``append`` was a C method that ran outside
  the writer's lock), checked out with ``git worktree`` and its C extensions built
  there, as :mod:`benchmarks.versions` does;
* the *skeleton*: the least a Python ``append`` can do under the project's rules
  (issue #15: the writer's lock taken and released, a clock reading, and one call
  of a compiled function, which here does nothing (``len``)).  It bounds from
  above what any rule-abiding ``append`` can reach against ``REV``.

Each count is the difference between a run of 40,000 calls and one of 20,000
(start-up and imports cancel out), divided by 20,000.  Needs ``valgrind``.

The target (issue 29): this tree's ``append`` within 0.88x of the skeleton (the
skeleton's count over this tree's, <= 3,300 instructions for the skeleton's
2,894).  ``--json`` writes the rows and that target to
``benchmarks/results/append_ceiling.json`` (``benchmarks.collect`` puts it in
``docs/benchmarks.md``).  The counts move by some tens of instructions with the
process's environment (its variables, the working directory), never with the
machine's load; runs of this command repeat to the instruction.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

SMALL, LARGE = 20_000, 40_000
DEFAULT_REV = "b1fec37"
TARGET = 0.88  # issue 29: the skeleton's count / this tree's
JSON_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "append_ceiling.json")


def _append_loop(n: int) -> None:
    from engine import AppendLog

    directory = tempfile.mkdtemp(prefix="append-ceiling-")
    try:
        log = AppendLog.open(os.path.join(directory, "log"), sync="never")
        append = log.append
        item = b"i" * 100
        for _ in range(n):
            append(item)
        log.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _skeleton_loop(n: int) -> None:
    import threading
    import time

    clock = time.time_ns

    class Skeleton:
        """The writer's lock, a clock reading and one compiled call per record."""

        def __init__(self) -> None:
            self._lock = threading.Lock()
            self._encode = len  # a compiled function that does nothing with its argument

        def append(self, data: bytes, flags: int = 0, time_ns: int | None = None) -> int:
            lock = self._lock
            lock.acquire()
            try:
                t = clock() if time_ns is None else time_ns
                return self._encode(data) + flags + (t & 0)
            finally:
                lock.release()

    append = Skeleton().append
    item = b"i" * 100
    for _ in range(n):
        append(item)


LOOPS = {"append": _append_loop, "skeleton": _skeleton_loop}


def _instructions(kind: str, n: int, tree: str | None) -> int:
    """Instructions (valgrind's ``I refs``) of a fresh process running ``n`` calls."""
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
    if tree is not None:
        env["PYTHONPATH"] = tree
    with tempfile.TemporaryDirectory(prefix="callgrind-") as scratch:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={os.path.join(scratch, 'out')}",
             sys.executable, "-P", os.path.abspath(__file__), "--worker", kind, str(n)],
            env=env, capture_output=True, text=True, cwd=scratch,
        )
    if out.returncode != 0:
        raise SystemExit(f"{kind} ({tree or 'no tree'}) failed:\n{out.stderr[-3000:]}")
    found = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_call(kind: str, tree: str | None) -> float:
    return (_instructions(kind, LARGE, tree) - _instructions(kind, SMALL, tree)) / (LARGE - SMALL)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--worker"]:
        LOOPS[argv[1]](int(argv[2]))
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("append_ceiling needs valgrind (apt install valgrind)")
    from benchmarks.common import Row, Target, report
    from benchmarks.versions import build_extensions, git

    write_json = "--json" in argv
    argv = [a for a in argv if a != "--json"]
    rev = argv[0] if argv else DEFAULT_REV
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    commit = git(here, "rev-parse", "--verify", f"{rev}^{{commit}}")
    with tempfile.TemporaryDirectory(prefix="engine-ceiling-") as parent:
        tree = os.path.join(parent, "tree")
        git(here, "worktree", "add", "--detach", "--quiet", tree, commit)
        try:
            print(f"{rev} ({commit[:9]}): C extensions {build_extensions(tree)}", flush=True)
            base = per_call("append", tree)
            rows = [
                (f"{rev}: AppendLog.append", base),
                ("skeleton: lock + clock + one compiled call", per_call("skeleton", None)),
                ("this tree: AppendLog.append", per_call("append", here)),
            ]
        finally:
            subprocess.run(["git", "-C", here, "worktree", "remove", "--force", tree], capture_output=True)
            subprocess.run(["git", "-C", here, "worktree", "prune"], capture_output=True)
    label = 'loop of append(b"i" * 100), sync="never"'
    print(f"{label:<48} {'instructions/call':>18} {rev + ' / it':>12}")
    for name, count in rows:
        print(f"{name:<48} {count:>18,.0f} {base / count:>11.2f}x")
    skeleton, ours = rows[1][1], rows[2][1]
    target = Target(
        rows[2][0], rows[1][0], TARGET, ratio=skeleton / ours,
        how="instructions per call (callgrind), fewer is better: the skeleton's count / this tree's",
    )
    report(
        "instructions per append (callgrind)",
        [Row(name, count, "instructions/call", "fewer is better") for name, count in rows],
        targets=[target],
        json_path=JSON_PATH if write_json else None,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
