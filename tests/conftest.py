"""Suite-wide switches for the compiled kernels (``engine/<store>/_native.c``).

* ``ENGINE_REQUIRE_NATIVE=1``: every kernel of the registry (``engine.native.KERNELS``)
  must be built and bound, or the run stops at once (the parity tests would
  otherwise skip, and a sanitizer run that checked nothing would pass); the
  registry itself refuses to import then.
* ``ENGINE_SANITIZED=1`` (the tox ``sanitize`` env): every kernel must also be
  built with AddressSanitizer and UndefinedBehaviorSanitizer.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("ENGINE_REQUIRE_NATIVE", "") in ("", "0"):
        return
    if os.environ.get("ENGINE_PURE_PYTHON", "") not in ("", "0"):
        raise pytest.UsageError("ENGINE_REQUIRE_NATIVE and ENGINE_PURE_PYTHON contradict each other")
    try:
        native = importlib.import_module("engine.native")
    except ImportError as exc:
        raise pytest.UsageError(str(exc)) from exc
    for name in sorted({kernel.module for kernel in native.KERNELS.values()}):
        module = importlib.import_module(name)
        if os.environ.get("ENGINE_SANITIZED", "") not in ("", "0"):
            binary = Path(module.__file__ or "").read_bytes()
            if b"__asan_" not in binary or b"__ubsan_" not in binary:
                raise pytest.UsageError(f"ENGINE_SANITIZED: {module.__file__} is not built with ASan and UBSan")
