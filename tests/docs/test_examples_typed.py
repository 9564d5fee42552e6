"""Every Python example in the README, the user guides and the pipeline's
document is clean under ``mypy --strict``, as a user's own code that uses engine
would be checked.  (The pipeline's examples need a Spark session and data under
``/data``: they are type-checked here, not run.)

The examples of each file are one module (their blocks in order, at their own
line numbers, so an error names the document's line).  mypy runs from a
directory outside the checkout, so engine is what the user has installed (its
``py.typed`` types), never the checkout's sources.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.test_examples import DOCS, ROOT, python_blocks

pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")

#: Errors that belong to work under way elsewhere: (document, text in the error) -> why.  An entry
#: that no longer matches fails the test, so it is removed as soon as the work lands.
KNOWN_ELSEWHERE: dict[tuple[str, str], str] = {}

#: What is checked: the examples that run (tests/docs/test_examples.py) and the Spark ones.
TYPED_DOCS = [*DOCS, ROOT / "docs" / "pipeline.md"]

_CONFIG = """\
[mypy]
strict = True
[mypy-pymemcache.*]
ignore_missing_imports = True
[mypy-pyspark.*]
ignore_missing_imports = True
"""
_ERROR = re.compile(r"^(?P<file>[^:]+)_md\.py:(?P<line>\d+): error: (?P<text>.*)$")


def _module(path: Path) -> str:
    lines: list[str] = []
    for line, source in python_blocks(path):
        lines.extend([""] * (line - 1 - len(lines)))
        lines.extend(source.splitlines())
    return "\n".join(lines) + "\n"


def test_docs_examples_are_mypy_strict_clean(tmp_path: Path) -> None:
    names = {}
    for doc in TYPED_DOCS:
        if python_blocks(doc):
            (tmp_path / f"{doc.stem}_md.py").write_text(_module(doc))
            names[doc.stem] = doc.name
    (tmp_path / "mypy.ini").write_text(_CONFIG)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", str(tmp_path / ".cache"),
         "--no-error-summary", *sorted(f"{stem}_md.py" for stem in names)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    errors = []
    matched = set()
    for line in done.stdout.splitlines():
        found = _ERROR.match(line)
        if found is None:
            continue
        doc_name = names[found["file"]]
        known = [key for key in KNOWN_ELSEWHERE if key[0] == doc_name and key[1] in found["text"]]
        if known:
            matched.update(known)
            continue
        errors.append(f"{doc_name}:{found['line']}: {found['text']}")
    assert not errors, "mypy --strict on the docs' examples:\n" + "\n".join(errors)
    stale = sorted(set(KNOWN_ELSEWHERE) - matched)
    assert not stale, f"fixed: remove from KNOWN_ELSEWHERE: {stale}"


_USER_CODE = """\
from pathlib import Path
from typing import assert_type

import engine
from engine.kv import KVReader
from engine.queue import RemoteReader

q = engine.Queue.open(Path("data"), "jobs")
assert_type(q, engine.Queue)
assert_type(engine.Queue.open_reader(Path("data"), "jobs"), RemoteReader)
assert_type(engine.KV.open(Path("app.kv")), engine.KV)
assert_type(engine.KV.open_reader(Path("app.kv")), KVReader)
assert_type(engine.AppendLog.open(Path("log")), engine.AppendLog)
assert_type(engine.EventJournal.open(Path("events")), engine.EventJournal)
assert_type(engine.PageStore.open(Path("p.db")), engine.PageStore)
assert_type(engine.StreamJournal.open(Path("s.jnl"), size=1 << 20), engine.StreamJournal)
"""


def test_opening_with_a_path_is_typed(tmp_path: Path) -> None:
    """``Queue.open(Path(...))`` failed ``mypy --strict`` (``directory: str``) and
    ``KV.open`` revealed ``Any``: every store's open takes a ``Path`` and returns
    its own type, as a user's code checked with ``mypy --strict`` sees them."""
    (tmp_path / "user_code.py").write_text(_USER_CODE)
    (tmp_path / "mypy.ini").write_text(_CONFIG)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", str(tmp_path / ".cache"),
         "user_code.py"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
