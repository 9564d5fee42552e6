"""External programs some monitor tests drive (tmux, chromium): a test that needs
one skips, naming it and the package to install, unless ``ENGINE_REQUIRE_TOOLS=1``
(CI), where a missing one fails the test."""

from __future__ import annotations

import os
import shutil

import pytest


def require(*names: str, package: str) -> str:
    """The path of the first of ``names`` on PATH; skip (or fail in CI) without it."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    why = f"{' or '.join(names)} is not installed (apt install {package})"
    if os.environ.get("ENGINE_REQUIRE_TOOLS", "") not in ("", "0"):
        pytest.fail(f"ENGINE_REQUIRE_TOOLS=1: {why}")
    pytest.skip(why)
