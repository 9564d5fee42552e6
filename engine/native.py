"""Optional C accelerators, and the switch that turns them off.

A store may ship a C twin of its hottest pure-Python code as
``engine/<store>/_native.c`` (built by ``setup.py`` when a compiler is present).
The Python code is always the reference: the native module must produce exactly
the same bytes, objects and errors, and the tests run both and compare them.
Setting ``ENGINE_PURE_PYTHON=1`` makes every store ignore its native module (for
debugging, and for the test runs of the pure-Python path).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: Environment variable that disables every native accelerator when set non-empty.
PURE_PYTHON_ENV = "ENGINE_PURE_PYTHON"


def pure_python_forced() -> bool:
    """Whether ``ENGINE_PURE_PYTHON`` asks for the pure-Python code everywhere."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def load(module: str) -> ModuleType | None:
    """The native module ``module`` (e.g. ``"engine.events._native"``), or ``None``
    when it is not built or pure Python is forced."""
    if pure_python_forced():
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
