"""The docs list every compiled kernel from the registry itself: the tables in the
README and in docs/architecture.md's "Native accelerators" section name exactly the
kernels of :data:`engine.native.KERNELS`, each with its pure reference, and every
reference named there is a callable that exists."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.native import KERNELS, kernel

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `([\w.]+)` \| `([\w.]+)` \| (.+) \|$")


def _table(doc: str) -> dict[str, tuple[str, str]]:
    """The rows between the ``kernels`` markers of ``doc``: name -> (reference, does)."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    begin, end = text.index("<!-- kernels: begin -->"), text.index("<!-- kernels: end -->")
    rows: dict[str, tuple[str, str]] = {}
    for line in text[begin:end].splitlines():
        found = ROW.match(line)
        if found:
            assert found.group(1) not in rows, f"{doc}: {found.group(1)} listed twice"
            rows[found.group(1)] = (found.group(2), found.group(3))
    return rows


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
def test_the_docs_table_is_the_registry(doc: str) -> None:
    rows = _table(doc)
    listed_not_registered = sorted(set(rows) - set(KERNELS))
    registered_not_listed = sorted(set(KERNELS) - set(rows))
    assert not listed_not_registered, f"{doc} lists kernels the registry does not have: {listed_not_registered}"
    assert not registered_not_listed, f"{doc} does not list: {registered_not_listed}"
    for name, (reference, does) in rows.items():
        assert (reference, does) == (KERNELS[name].reference, KERNELS[name].does), f"{doc}: {name}'s row"


def test_every_kernel_names_its_module_and_a_reference_that_exists() -> None:
    for name, entry in KERNELS.items():
        store, _, function = name.partition(".")
        # (a store's compiled code may span modules: engine.kv._native_descent)
        assert entry.module.startswith(f"engine.{store}._native") and entry.function == function, name
        assert (ROOT / "engine" / store / "_native.c").is_file(), name
        module, _, attr = entry.reference.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr)), entry.reference


def test_every_c_module_is_in_the_registry() -> None:
    sources = {f"engine.{p.parent.name}.{p.stem}" for p in (ROOT / "engine").glob("*/_native*.c")}
    assert sources == {entry.module for entry in KERNELS.values()}


_BINDS_NATIVE = r"import\s+_native\b|\._native\b[\"']|import_module\([^)]*_native"


def test_only_the_registry_binds_kernels() -> None:
    # Every binding site goes through engine.native.kernel(); no other module
    # imports a ``_native`` module (by statement or by string).
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "engine").rglob("*.py")
        if path.name != "native.py"
        and re.search(_BINDS_NATIVE, path.read_text(encoding="utf-8"))
    ]
    assert not offenders


def test_the_switches_are_read_at_import() -> None:
    # ENGINE_PURE_PYTHON=1: no kernel bound; with ENGINE_REQUIRE_NATIVE=1 as well,
    # the registry refuses to import (a sanitizer run must fail, not fall back).
    probe = "from engine.native import KERNELS, kernel; print(sum(kernel(n) is not None for n in KERNELS))"
    env = dict(os.environ, ENGINE_PURE_PYTHON="1", ENGINE_REQUIRE_NATIVE="")
    pure = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert pure.stdout.strip() == "0"
    env["ENGINE_REQUIRE_NATIVE"] = "1"
    both = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert both.returncode != 0 and "contradict" in both.stderr
    with pytest.raises(KeyError):
        kernel("no.such_kernel")
