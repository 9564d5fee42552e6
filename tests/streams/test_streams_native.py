"""The CRC-64 kernel (``engine/streams/_native.c``) against its reference,
crcmod's CRC-64/GO-ISO (:data:`engine.streams.codec.crc64_reference`): same
values for any bytes-like input and any chaining value, same exceptions (type
and message) for hostile arguments, and the codec picks it once at import.

The native module is imported directly (not through ``engine.native.kernel``), so
these comparisons also run under ``ENGINE_PURE_PYTHON=1``; they are skipped only
when the extension is not built.
"""

from __future__ import annotations

import array
import importlib
import os
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from streams_helpers import crc64_reference as bitwise

from engine.native import pure_python_forced
from engine.streams import codec
from engine.streams.codec import crc64_reference as reference


def _native() -> ModuleType | None:
    try:
        return importlib.import_module("engine.streams._native")
    except ImportError:
        return None


NATIVE = _native()
needs_native = pytest.mark.skipif(NATIVE is None, reason="engine.streams._native is not built")


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as exc:  # the twins must raise the same
        return ("error", (type(exc), str(exc)))


def _both(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    assert NATIVE is not None
    native = NATIVE.crc64
    return _outcome(lambda: reference(*args, **kwargs)), _outcome(lambda: native(*args, **kwargs))


def test_codec_picks_the_kernel_once() -> None:
    """codec.crc64 is the compiled twin unless pure Python is forced (or it is not built)."""
    if pure_python_forced() or NATIVE is None:
        assert codec.crc64 is reference
    else:
        assert codec.crc64 is NATIVE.crc64


@needs_native
def test_check_value_and_empty() -> None:
    assert NATIVE is not None
    assert NATIVE.crc64(b"123456789") == 0xB90956C775A41001
    assert NATIVE.crc64(b"") == reference(b"") == 0
    assert NATIVE.crc64(b"", 12345) == reference(b"", 12345) == 12345
    assert NATIVE.crc64(data=b"123456789", crc=0) == 0xB90956C775A41001


@needs_native
@settings(max_examples=400)
@given(st.binary(max_size=2000), st.integers(min_value=0, max_value=(1 << 64) - 1))
@example(b"", 0)
@example(bytes(64), (1 << 64) - 1)
@example(b"\xff" * 33, 1)
def test_random_data_and_chaining_value(data: bytes, crc: int) -> None:
    assert NATIVE is not None
    assert NATIVE.crc64(data) == reference(data) == bitwise(data)
    assert NATIVE.crc64(data, crc) == reference(data, crc)


@needs_native
@settings(max_examples=200)
@given(st.binary(max_size=500), st.binary(max_size=500), st.binary(max_size=100))
def test_chaining_equals_the_whole(a: bytes, b: bytes, c: bytes) -> None:
    assert NATIVE is not None
    crc = NATIVE.crc64
    assert crc(c, crc(b, crc(a))) == crc(a + b + c) == reference(a + b + c)


@needs_native
@settings(max_examples=200)
@given(st.binary(min_size=1, max_size=1200), st.data())
def test_memoryview_slices_and_other_buffers(data: bytes, draw: st.DataObject) -> None:
    assert NATIVE is not None
    start = draw.draw(st.integers(0, len(data)))
    end = draw.draw(st.integers(start, len(data)))
    view = memoryview(data)[start:end]
    assert NATIVE.crc64(view) == reference(view) == reference(data[start:end])
    assert NATIVE.crc64(bytearray(data)) == reference(data)
    words = array.array("B", data)
    assert NATIVE.crc64(words) == reference(words)


@needs_native
@pytest.mark.parametrize("size", [64 * 1024 - 1, 64 * 1024, 3 * 1024 * 1024 + 5])
def test_huge_inputs(size: int) -> None:
    """Large enough to be checked without the GIL (a bytearray's buffer stays
    exported, so it cannot be resized meanwhile)."""
    assert NATIVE is not None
    data = bytearray(os.urandom(size))
    assert NATIVE.crc64(data) == reference(data)
    assert NATIVE.crc64(memoryview(data)[7:], 99) == reference(memoryview(data)[7:], 99)


@needs_native
def test_threads_agree() -> None:
    assert NATIVE is not None
    data = os.urandom(1 << 20)
    want = reference(data)
    got: list[int] = []

    def run() -> None:
        got.extend(NATIVE.crc64(data) for _ in range(5))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 20


class _Index:
    def __index__(self) -> int:
        return 7


class _Xor:
    def __rxor__(self, other: int) -> int:
        return other ^ 5


@needs_native
@pytest.mark.parametrize(
    "args",
    [
        ("abc",),
        (None,),
        (12,),
        (b"abc", 1.5),
        (None, 1.5),  # the chaining value is looked at first, as crcmod does
        (b"abc", "x"),
        (b"abc", None),
        (b"abc", -1),
        (b"abc", 1 << 64),
        (b"abc", -(1 << 70) + 3),
        (b"abc", True),
        (b"abc", _Index()),
        (b"abc", _Xor()),
        (memoryview(b"abcdef")[::2],),
        (array.array("I", [1, 2, 3]),),
    ],
)
def test_hostile_arguments(args: tuple[Any, ...]) -> None:
    want, got = _both(*args)
    assert got == want


@needs_native
@settings(max_examples=200)
@given(
    st.one_of(st.binary(max_size=40), st.text(max_size=5), st.none(), st.integers(), st.floats()),
    st.one_of(st.integers(min_value=-(1 << 80), max_value=1 << 80), st.none(), st.floats(), st.text(max_size=3)),
)
def test_hostile_argument_pairs(data: Any, crc: Any) -> None:
    want, got = _both(data, crc)
    assert got == want


@needs_native
def test_argument_count_errors_are_type_errors() -> None:
    assert NATIVE is not None
    for call in (lambda: NATIVE.crc64(), lambda: NATIVE.crc64(b"", 0, 0), lambda: NATIVE.crc64(b"", bogus=1),
                 lambda: NATIVE.crc64(b"", 0, crc=1)):
        with pytest.raises(TypeError):
            call()
