"""Suite-wide switches for the compiled kernels (``engine/<store>/_native.c``).

* ``ENGINE_REQUIRE_NATIVE=1``: every kernel must be built and importable, or the
  run stops at once (the parity tests would otherwise skip, and a sanitizer run
  that checked nothing would pass).
* ``ENGINE_SANITIZED=1`` (the tox ``sanitize`` env): every kernel must also be
  built with AddressSanitizer and UndefinedBehaviorSanitizer.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

KERNELS = sorted(
    f"engine.{source.parent.name}._native" for source in (Path(__file__).parent.parent / "engine").glob("*/_native.c")
)


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("ENGINE_REQUIRE_NATIVE", "") in ("", "0"):
        return
    if os.environ.get("ENGINE_PURE_PYTHON", "") not in ("", "0"):
        raise pytest.UsageError("ENGINE_REQUIRE_NATIVE and ENGINE_PURE_PYTHON contradict each other")
    for name in KERNELS:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise pytest.UsageError(f"ENGINE_REQUIRE_NATIVE: {name} is not built or does not load: {exc}") from exc
        if os.environ.get("ENGINE_SANITIZED", "") not in ("", "0"):
            binary = Path(module.__file__ or "").read_bytes()
            if b"__asan_" not in binary or b"__ubsan_" not in binary:
                raise pytest.UsageError(f"ENGINE_SANITIZED: {module.__file__} is not built with ASan and UBSan")
