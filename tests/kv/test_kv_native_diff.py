"""``diff_span``'s compiled twin (``engine.kv._native.diff_span``) against its
reference :func:`engine.kv.node.diff_span`: the same span on equal, changed and
random images (the commit of a value overwritten in place journals it), the
same errors on hostile arguments.

The native module is imported directly (not through ``engine.native.kernel``), so
these comparisons also run under ``ENGINE_PURE_PYTHON=1``; they are skipped only
when the extension is not built.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv import node as nodes
from engine.kv import pager
from engine.native import pure_python_forced


def _native() -> ModuleType | None:
    try:
        return importlib.import_module("engine.kv._native")
    except ImportError:
        return None


NATIVE = _native()
needs_native = pytest.mark.skipif(NATIVE is None, reason="engine.kv._native is not built")


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as exc:  # the twins must raise the same
        return ("error", (type(exc), str(exc)))


def _same(old: Any, new: Any, lo: Any) -> tuple[str, Any]:
    assert NATIVE is not None
    ref = _outcome(lambda: nodes.diff_span(old, new, lo))
    got = _outcome(lambda: NATIVE.diff_span(old, new, lo))
    assert got == ref, f"diff_span twins differ on {old!r} / {new!r} from {lo}"
    return ref


def _brute(old: bytes, new: bytes, lo: int) -> tuple[int, int]:
    """The span by definition, one byte at a time."""
    differ = [i for i in range(lo, len(new)) if old[i] != new[i]]
    return (differ[0], differ[-1] + 1) if differ else (len(new), len(new))


@needs_native
@settings(max_examples=400, deadline=None)
@given(
    old=st.binary(max_size=300),
    edits=st.lists(st.tuples(st.integers(0, 299), st.binary(min_size=1, max_size=20)), max_size=4),
    data=st.data(),
)
def test_the_twins_find_the_changed_span_alike(old: bytes, edits: list[tuple[int, bytes]], data: st.DataObject) -> None:
    new = bytearray(old)
    for at, chunk in edits:
        if at < len(new):
            new[at : at + len(chunk)] = chunk[: len(new) - at]
    lo = data.draw(st.integers(0, len(old)))
    outcome = _same(old, bytes(new), lo)
    assert outcome == ("ok", _brute(old, bytes(new), lo))


@needs_native
def test_pages_changed_at_either_end_or_not_at_all() -> None:
    page = bytes(range(256)) * 16
    for at in (12, 13, 19, 20, 2047, 4088, 4095):
        changed = page[:at] + bytes([page[at] ^ 0xFF]) + page[at + 1 :]
        assert _same(page, changed, 12) == ("ok", (at, at + 1))
    assert _same(page, page, 12) == ("ok", (4096, 4096))
    assert _same(page, bytes(4096), 0) == ("ok", _brute(page, bytes(4096), 0))
    assert _same(b"", b"", 0) == ("ok", (0, 0))
    changed = page[:4095] + b"\x00"
    assert _same(page, changed, 4095) == ("ok", (4095, 4096))
    assert _same(page, changed, 4096) == ("ok", (4096, 4096))  # nothing from lo on


@needs_native
@pytest.mark.parametrize(
    "old, new, lo",
    [
        (b"abc", b"abcd", 0),  # lengths differ
        (b"abc", b"abd", -1),
        (b"abc", b"abd", 4),
        (b"abc", b"abd", 2**70),
        (b"abc", b"abd", -(2**70)),
        (bytearray(b"abc"), b"abd", 0),  # not bytes
        (b"abc", memoryview(b"abd"), 0),
        ("abc", "abd", 0),
        (b"abc", b"abd", 1.0),
        (b"abc", b"abd", None),
        (b"abc", b"abd", "1"),
    ],
)
def test_hostile_arguments_fail_alike(old: Any, new: Any, lo: Any) -> None:
    kind, _ = _same(old, new, lo)
    assert kind == "error"


def test_the_store_uses_the_kernel_unless_pure_python_is_forced() -> None:
    if pure_python_forced() or NATIVE is None:
        assert pager.diff_span is nodes.diff_span
    else:
        assert pager.diff_span is NATIVE.diff_span
