"""The readers' decoder's compiled twin (``engine/queue/_native.c``) against its
reference, :func:`engine.queue.codec.decode_batch`: on valid runs of records, on
every single damaged byte of them, on carried verification state and on hostile
arguments, the same PUTs appended, the same return value, the same exception type
and message.

The native module is imported directly (not through ``engine.native.load``), so
these tests run it even under ``ENGINE_PURE_PYTHON=1``; they are skipped when it is
not built.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.native import pure_python_forced
from engine.queue import codec, segments


def _native() -> ModuleType | None:
    try:
        return importlib.import_module("engine.queue._native")
    except ImportError:
        return None


NATIVE = _native()
needs_native = pytest.mark.skipif(NATIVE is None, reason="engine.queue._native is not built")


def _outcome(fn: Callable[[list[codec.Put]], Any]) -> tuple[str, Any, list[Any]]:
    out: list[codec.Put] = [codec.Put(99, b"carried", 1, None, 0)]
    try:
        return ("ok", fn(out), [(type(p), tuple(p)) for p in out])
    except Exception as exc:  # the twins must raise the same
        return ("error", (type(exc), str(exc)), [(type(p), tuple(p)) for p in out])


def both(buf: bytes, pos: int, crc: int | None, covered: int, max_records: int = 4096) -> None:
    assert NATIVE is not None
    expected = _outcome(lambda out: codec.decode_batch(buf, pos, out, crc, covered, max_records=max_records))
    got = _outcome(lambda out: NATIVE.decode_batch(buf, pos, out, crc, covered, max_records=max_records))
    assert got == expected, (buf.hex(), pos, crc, covered, max_records)


def _batch(first_id: int, datas: list[bytes], expiry: bool) -> bytes:
    records = b"".join(
        codec.encode_put(first_id + i, 1_700_000_000_000 + i, d, expire_time=(5 if expiry and i % 2 else None))
        for i, d in enumerate(datas)
    )
    return records + codec.encode_check(records)


def _file_body(batches: list[list[bytes]], expiry: bool) -> bytes:
    body, xid = codec.EMPTY_CHECK, 1
    for datas in batches:
        body += _batch(xid, datas, expiry)
        xid += len(datas)
    return body


@needs_native
@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=4), min_size=1, max_size=4),
    st.booleans(),
    st.integers(1, 12),
    st.data(),
)
def test_same_results_on_valid_runs_and_their_prefixes(
    batches: list[list[bytes]], expiry: bool, max_records: int, data: st.DataObject
) -> None:
    body = _file_body(batches, expiry)
    cut = data.draw(st.integers(0, len(body)))
    both(body[:cut], 0, 0, 0, max_records)  # a file with CHECKs, read up to any byte
    both(body[:cut], 0, None, 0, max_records)  # as a file without (no verification)
    start = data.draw(st.integers(0, len(body)))
    both(body, start, zlib.crc32(body[:start]), start, max_records)  # carried state


@needs_native
def test_same_results_on_every_damaged_byte() -> None:
    body = _file_body([[b"alpha", b"beta"], [b""], [b"gamma" * 9, b"d"]], True)
    body += codec.encode_read_head(3) + bytes(5)  # an unknown-in-writer record, then a marker
    for offset in range(len(body)):
        for mask in (0x01, 0x10, 0x80, 0xFF):
            damaged = bytearray(body)
            damaged[offset] ^= mask
            both(bytes(damaged), 0, 0, 0)
            both(bytes(damaged), 0, None, 0, 3)


@needs_native
@pytest.mark.parametrize(
    "args",
    [
        (b"\x86", -1, None, 0),
        (b"", 0, 0, 0),
        (b"\x00\x01", 0, 5, 3),
        (b"\x22" + bytes(8), 0, 0, 0),
        (b"\x22" + bytes(8), 0, 7, 0),
        (b"\x22" + bytes(4) + b"\x01\x00\x00\x00", 0, 0, 0),
        (b"\x31\xde\xad\xbe\xef" + b"\x86" + bytes(3), 0, None, 0),
        (b"\x87" + bytes(40), 0, None, 0),
    ],
)
def test_same_results_on_hostile_arguments(args: tuple[bytes, int, int | None, int]) -> None:
    both(*args)


def test_the_readers_use_the_native_decoder_unless_pure_python_is_forced() -> None:
    if NATIVE is None or pure_python_forced():
        assert segments.decode_batch is codec.decode_batch
    else:
        assert segments.decode_batch is NATIVE.decode_batch
