"""The floor programs: each store's physical limit for one benchmark's work.

A floor program (``benchmarks/floor/<name>.c``) does exactly the I/O the store's
format requires for the same work as the benchmark's engine run -- the same bytes
written, the same syncs, in the same order -- and nothing else (no encoding, no
checksums, no Python).  The benchmarks build them with the system's C compiler
(``cc -O2``) into a scratch directory, cached by a hash of the sources, run them
paired and alternating with the engine, and report the engine's ratio to them.
Without a compiler the floor rows say "not built" and everything else still runs.

Every program prints one JSON line (see ``floor.h``): ``seconds`` (the timed work),
``ops``, ``bytes`` and ``read_bytes`` (what its writes and reads returned),
``syncs``, and ``wchar``/``rchar``: the kernel's own count of the bytes it passed
to write/read calls during the timed work (``/proc/self/io``), which the tests hold
against ``bytes`` and against the engine's count for the same work.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
#: The floor programs, one per benchmark measure of issue 19's table.
PROGRAMS = ("pages_tx", "queue_put", "queue_get", "applog_append", "streams_write")
NOT_BUILT = "not built"


class FloorUnavailable(RuntimeError):
    """The floor program could not be built (no C compiler, or it failed)."""


def _sources(name: str) -> bytes:
    with open(os.path.join(HERE, "floor.h"), "rb") as f:
        header = f.read()
    with open(os.path.join(HERE, f"{name}.c"), "rb") as f:
        return header + b"\0" + f.read()


def build_dir() -> str:
    """Where the built programs are cached: ``$ENGINE_FLOOR_DIR``, else
    ``.bench/floor`` under the working directory (the benchmarks' scratch area)."""
    return os.environ.get("ENGINE_FLOOR_DIR") or os.path.join(os.getcwd(), ".bench", "floor")


def compiler() -> str | None:
    """The C compiler to use: ``$CC`` or the first of cc, gcc, clang on PATH."""
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


def build(name: str) -> str:
    """The path of floor program ``name``, compiled first if its sources changed.

    Raises :class:`FloorUnavailable` (with the reason) when there is no compiler or
    the compile fails.
    """
    if name not in PROGRAMS:
        raise ValueError(f"no floor program {name!r} (there are {', '.join(PROGRAMS)})")
    digest = hashlib.sha256(_sources(name)).hexdigest()[:16]
    directory = build_dir()
    exe = os.path.join(directory, f"{name}-{digest}")
    if os.path.exists(exe):
        return exe
    cc = compiler()
    if cc is None:
        raise FloorUnavailable(f"floor program {name}: no C compiler (cc, gcc, clang or $CC) on PATH")
    os.makedirs(directory, exist_ok=True)
    tmp = f"{exe}.{os.getpid()}.tmp"
    cmd = [cc, "-O2", "-pthread", "-o", tmp, os.path.join(HERE, f"{name}.c")]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise FloorUnavailable(f"floor program {name}: {' '.join(cmd)} failed:\n{done.stderr.strip()}")
    os.replace(tmp, exe)
    return exe


@dataclass
class FloorRun:
    """One run's JSON line (see the module's docstring)."""

    seconds: float
    ops: int
    bytes: int
    syncs: int
    read_bytes: int
    wchar: int
    rchar: int
    extra: dict[str, int]


def run(name: str, args: list[object]) -> FloorRun:
    """Build (if needed) and run floor program ``name`` with ``args``; its result."""
    exe = build(name)
    done = subprocess.run([exe, *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"floor program {name} {args} failed: {done.stderr.strip()}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    fields = ("seconds", "ops", "bytes", "syncs", "read_bytes", "wchar", "rchar")
    extra = {k: v for k, v in data.items() if k not in fields and k != "floor"}
    return FloorRun(
        seconds=data["seconds"], ops=data["ops"], bytes=data["bytes"], syncs=data["syncs"],
        read_bytes=data["read_bytes"], wchar=data["wchar"], rchar=data["rchar"], extra=extra,
    )


def available(name: str) -> str | None:
    """None if floor program ``name`` builds, else the reason (printed once)."""
    try:
        build(name)
    except FloorUnavailable as exc:
        print(f"floor rows {NOT_BUILT}: {exc}", file=sys.stderr)
        return str(exc)
    return None


def io_counts() -> tuple[int, int]:
    """(rchar, wchar) of this process so far (``/proc/self/io``; (-1, -1) where the
    system does not say): the engine's side of the floor's byte check."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["rchar"]), int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return -1, -1
