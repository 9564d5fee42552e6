"""Named crash points: ``crashpoint("queue.put.after-fsync")``.

Production code calls :func:`crashpoint` before and after every fsync and rename
that matters.  Normally it costs one global load and a ``None`` test.  The stress
suite installs a hook that kills the process (or records the name) at exactly that
spot, the way bbolt's failpoints work.

Two ways to arm it:

* in-process: :func:`set_crashpoint_hook` with any callable taking the name;
* from the environment, for a child process about to be killed:
  ``ENGINE_CRASH_AT=<name>`` and optionally ``ENGINE_CRASH_SKIP=<n>`` (let the first
  *n* hits pass) make the process SIGKILL itself at that point.  With
  ``ENGINE_CRASH_LOG=<path>`` every crash point hit is appended to that file
  (used to discover the names a workload passes through).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

CrashHook = Callable[[str], None]

_hook: CrashHook | None = None


def crashpoint(name: str) -> None:
    """Mark a spot where a crash must be survivable; a no-op unless a hook is set."""
    if _hook is not None:
        _hook(name)


def set_crashpoint_hook(hook: CrashHook | None) -> CrashHook | None:
    """Install ``hook`` (or remove it with ``None``); returns the previous hook."""
    global _hook
    previous = _hook
    _hook = hook
    return previous


def get_crashpoint_hook() -> CrashHook | None:
    """The hook in force, if any."""
    return _hook


class _KillAt:
    """Kill this process with SIGKILL at the (skip+1)-th hit of ``name``."""

    def __init__(self, name: str | None, skip: int, log_path: str | None) -> None:
        self.name = name
        self.remaining = skip
        self.log_path = log_path

    def __call__(self, name: str) -> None:
        if self.log_path is not None:
            # Plain append, unsynced on purpose: this is a diagnostic side channel.
            with open(self.log_path, "a", encoding="utf-8") as log:
                log.write(name + "\n")
        if self.name is None or name != self.name:
            return
        if self.remaining > 0:
            self.remaining -= 1
            return
        os.kill(os.getpid(), signal.SIGKILL)


def _arm_from_environment() -> None:
    target = os.environ.get("ENGINE_CRASH_AT") or None
    log_path = os.environ.get("ENGINE_CRASH_LOG") or None
    if target is None and log_path is None:
        return
    skip = int(os.environ.get("ENGINE_CRASH_SKIP", "0") or "0")
    set_crashpoint_hook(_KillAt(target, skip, log_path))


_arm_from_environment()
