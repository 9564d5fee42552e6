"""Every Python example in the README and the user guides runs, twice in a row.

Each file's ``python`` code blocks run in order in one namespace (a guide builds
on its earlier blocks), in a fresh temporary working directory.  The second run
happens in the same directory, on the files the first left behind: a tour a user
runs twice must work twice (no redelivered confirmed items, no hard-coded ids).
"""

from __future__ import annotations

import gc
import os
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, source) of every ```python block of ``path``."""
    text = path.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def run_blocks(path: Path) -> None:
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for line, source in python_blocks(path):
        code = compile("\n" * (line - 1) + source, str(path), "exec")
        exec(code, namespace)  # the documentation's own examples
    del namespace
    gc.collect()


def test_the_docs_have_examples() -> None:
    assert python_blocks(ROOT / "README.md"), "the README's tour is a python block"
    assert len(DOCS) >= 5


@pytest.mark.parametrize("path", [p for p in DOCS if python_blocks(p)], ids=lambda p: p.name)
def test_examples_run_twice(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)  # every example closes what it opens
        run_blocks(path)
        run_blocks(path)
    assert os.getcwd() == str(tmp_path)
