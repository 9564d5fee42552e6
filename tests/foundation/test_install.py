"""After the README's install, static tools see engine's types.

Type checkers (mypy, pyright) find packages only through plain directories on the
path: ``site-packages/engine`` or a ``.pth`` line naming a directory.  The default
editable install of setuptools hides a flat-layout package behind an import hook
that they cannot follow ("Cannot find implementation or library stub"), so the
README installs in strict editable mode.  This test fails if the environment the
suite runs in was installed any other way.
"""

from __future__ import annotations

import site
import sys
from pathlib import Path


def _static_roots() -> list[Path]:
    """Directories a type checker searches: site-packages and the paths in its .pth files."""
    roots: list[Path] = []
    for sp in {*site.getsitepackages(), site.getusersitepackages(), *sys.path}:
        base = Path(sp)
        if not base.is_dir() or "site-packages" not in base.parts:
            continue
        roots.append(base)
        for pth in base.glob("*.pth"):
            for line in pth.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import ")):
                    roots.append((base / line).resolve())
    return roots


def test_type_checkers_find_engine_and_its_py_typed() -> None:
    roots = _static_roots()
    typed = [r for r in roots if (r / "engine" / "py.typed").is_file() and (r / "engine" / "__init__.py").is_file()]
    assert typed, (
        "engine is not installed where type checkers look (site-packages or a plain .pth path); "
        "install it as the README does: pip install -e '.[test]' --config-settings editable_mode=strict "
        f"(searched {sorted(map(str, roots))})"
    )
