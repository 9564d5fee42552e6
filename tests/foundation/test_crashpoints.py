"""Crash points: in-process hooks and the environment-armed SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from engine.fs import crashpoint, get_crashpoint_hook, set_crashpoint_hook


def test_hook_sees_names() -> None:
    seen: list[str] = []
    previous = set_crashpoint_hook(seen.append)
    try:
        crashpoint("a")
        crashpoint("b")
    finally:
        set_crashpoint_hook(previous)
    assert seen == ["a", "b"]
    assert get_crashpoint_hook() is previous


def test_atomic_write_passes_its_crash_points(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from engine.fs import OsFileSystem, atomic_write

    seen: list[str] = []
    previous = set_crashpoint_hook(seen.append)
    try:
        atomic_write(OsFileSystem(), str(tmp_path / "x"), b"1")
    finally:
        set_crashpoint_hook(previous)
    assert seen == [
        "atomic_write.before-fsync",
        "atomic_write.before-rename",
        "atomic_write.before-dir-fsync",
        "atomic_write.after-dir-fsync",
    ]


CHILD = textwrap.dedent(
    """
    import sys
    from engine.fs import OsFileSystem, atomic_write
    for i in range(3):
        atomic_write(OsFileSystem(), sys.argv[1], str(i).encode())
        print("wrote", i, flush=True)
    """
)


def test_environment_kills_at_named_point(tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = str(tmp_path / "x")
    log = str(tmp_path / "log")
    env = dict(os.environ, ENGINE_CRASH_AT="atomic_write.before-rename", ENGINE_CRASH_SKIP="1",
               ENGINE_CRASH_LOG=log, PYTHONPATH=os.getcwd())
    proc = subprocess.run([sys.executable, "-c", CHILD, target], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.splitlines() == ["wrote 0"], "killed at the second pass of the point"
    with open(target, "rb") as f:
        assert f.read() == b"0"
    with open(log) as f:
        names = f.read().split()
    assert names[-1] == "atomic_write.before-rename"
