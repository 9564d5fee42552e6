"""Every file the documentation names exists (docs that cite a test or module that
was renamed or never written mislead the reader)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: A repository path in backticks or a link: engine/…, tests/…, stress/…, benchmarks/…, docs/…
_PATH = re.compile(r"(?<![\w./-])((?:engine|tests|stress|benchmarks|docs)/[\w./-]+\.(?:py|c|h|md|json))")


def cited(text: str) -> set[str]:
    # placeholders (NAME, <store>, *) are not paths
    return {p for m in _PATH.finditer(text) if not any(c in (p := m.group(1)) for c in "<*") and "NAME" not in p}


def test_cited_files_exist() -> None:
    missing = []
    for doc in DOCS:
        for path in sorted(cited(doc.read_text())):
            if not (ROOT / path).exists() and not (doc.parent / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
    assert not missing, "\n".join(missing)


def test_the_pattern_finds_paths() -> None:
    assert cited("see `tests/foundation/test_simfs_model.py` and engine/fs/base.py.") == {
        "tests/foundation/test_simfs_model.py",
        "engine/fs/base.py",
    }
