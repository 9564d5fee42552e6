"""The process the kill attack (attack 2) kills: a writer or a reader of one store.

Writer: ``python -m stress.child write STORE ROOT OPSFILE`` runs the pickled
workload in ``OPSFILE`` against the real file system and reports on stdout, one line
each, flushed before going on:

* ``OPENING`` just before it opens (recovers) the store, ``OPENED`` once it is open;
* ``B <i>`` just before operation ``i`` starts;
* ``A <i> <repr(result)>`` once it returned (it is acknowledged from then on).

The parent reads the pipe, so whatever it has read when the child dies is exactly
what the child had acknowledged.  ``ENGINE_CRASH_AT``/``ENGINE_CRASH_SKIP`` in the
environment make the child kill itself at a named crash point
(:mod:`engine.fs.crashpoints`).

Reader: ``python -m stress.child read STORE ROOT STOPFILE`` runs the adapter's
``reader_loop`` until ``STOPFILE`` exists and prints ``OK <consistent passes>`` or ``BAD <detail>``.
"""

from __future__ import annotations

import os
import pickle
import sys

from engine.fs import OsFileSystem


def _emit(line: str) -> None:
    # One write per line on the raw descriptor: no buffering to lose on SIGKILL.
    os.write(1, (line + "\n").encode())


def write_main(store: str, root: str, ops_file: str) -> int:
    from stress.stores import get_adapter

    adapter = get_adapter(store)
    with open(ops_file, "rb") as f:
        ops = pickle.load(f)
    fs = OsFileSystem()
    adapter.prepare(fs, root)
    _emit("OPENING")
    session = adapter.session(fs, root)
    _emit("OPENED")
    for index, op in enumerate(ops):
        _emit(f"B {index}")
        result = session.run(op)
        _emit(f"A {index} {result!r}")
    session.close()
    _emit("DONE")
    return 0


def read_main(store: str, root: str, stop_file: str) -> int:
    from stress.core import reads_counted
    from stress.stores import get_adapter

    adapter = get_adapter(store)
    parent = os.getppid()

    def stop() -> bool:
        # The stop file, or the parent gone (a runner killed mid-run must not leave
        # readers polling for ever).
        return os.path.exists(stop_file) or os.getppid() != parent

    problem = adapter.reader_loop(root, stop)
    if problem is None:
        _emit(f"OK {reads_counted()}")
        return 0
    _emit("BAD " + problem.replace("\n", " "))
    return 3


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] not in ("write", "read"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, store, root, extra = argv
    if mode == "write":
        return write_main(store, root, extra)
    return read_main(store, root, extra)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
