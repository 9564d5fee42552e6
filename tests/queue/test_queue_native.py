"""The readers' decoder's compiled twin (``engine/queue/_native.c``) against its
reference, :func:`engine.queue.codec.decode_batch`: on valid runs of records, on
every single damaged byte of them, on carried verification state and on hostile
arguments, the same PUTs appended, the same return value, the same exception type
and message.  The writer's CHECK twin against :func:`engine.queue.codec.encode_check`:
the same bytes for any input, the same errors.  The batch readers' columnar
decoder's twin against :func:`engine.queue.codec.decode_columns`: the same
columns (or the same exception type and message) on valid runs and their
prefixes, every damaged byte, hostile arguments, large records and random bytes.
The writer's PUT encoder's twin against :func:`engine.queue.codec.encode_put`: the
same record for every valid argument, the same result or error for hostile ones.

The native module is imported directly (not through ``engine.native.kernel``), so
these tests run it even under ``ENGINE_PURE_PYTHON=1``; they are skipped when it is
not built.
"""

from __future__ import annotations

import importlib
import random
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from journal_helpers import journal_body as _body

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


@needs_native
@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=6), st.integers(0, 2**32 - 1), st.data())
def test_same_results_on_large_records(sizes: list[int], seed: int, data: st.DataObject) -> None:
    """Records of up to 5,000 bytes: the CRC runs over lengths the folding code takes
    (64 bytes and more, with any remainder), from any carried state; a flipped
    byte anywhere is caught the same way."""
    rng = random.Random(seed)
    datas = [rng.randbytes(size) for size in sizes]
    body = _file_body([datas[:3], datas[3:]] if len(datas) > 3 else [datas], bool(seed & 1))
    both(body, 0, 0, 0)
    start = data.draw(st.integers(0, len(body)))
    both(body, start, zlib.crc32(body[:start]), start)
    damaged = bytearray(body)
    damaged[data.draw(st.integers(0, len(body) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    both(bytes(damaged), 0, 0, 0)


def _check_outcome(fn: Callable[[Any], bytes], arg: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(arg))
    except Exception as exc:  # the twins must raise the same
        return ("error", (type(exc), str(exc)))


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.integers(0, 70_000).map(lambda n: random.Random(n).randbytes(n))))
def test_encode_check_twin_gives_the_same_bytes(records: bytes) -> None:
    assert NATIVE is not None
    expected = codec.encode_check(records)
    for arg in (records, bytearray(records), memoryview(records)):
        assert NATIVE.encode_check(arg) == expected
    assert expected[0] == codec.CHECK_BYTE
    assert codec.CHECK.unpack_from(expected, 1) == (zlib.crc32(records), len(records))


@needs_native
@pytest.mark.parametrize("arg", ["text", 5, None, [b"x"]])
def test_encode_check_twin_raises_the_same(arg: Any) -> None:
    assert NATIVE is not None
    assert _check_outcome(NATIVE.encode_check, arg) == _check_outcome(codec.encode_check, arg)


def test_the_writer_uses_the_native_check_unless_pure_python_is_forced() -> None:
    if NATIVE is None or pure_python_forced():
        assert segments.encode_check is codec.encode_check
    else:
        assert segments.encode_check is NATIVE.encode_check


# -- decode_columns (the batch readers' columnar decoder) against its reference -------------------


def _columns_outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        result = fn()
        return ("ok", (type(result), result))
    except Exception as exc:  # the twins must raise the same
        return ("error", (type(exc), str(exc)))


def both_columns(buf: bytes, pos: int, checked: bool, max_items: int = 65536) -> None:
    assert NATIVE is not None
    expected = _columns_outcome(lambda: codec.decode_columns(buf, pos, checked, max_items))
    got = _columns_outcome(lambda: NATIVE.decode_columns(buf, pos, checked, max_items))
    assert got == expected, (buf.hex(), pos, checked, max_items)


@needs_native
@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=5), min_size=1, max_size=4),
    st.booleans(),
    st.booleans(),
    st.integers(1, 9),
    st.data(),
)
def test_same_columns_on_valid_runs_and_their_prefixes(
    batches: list[list[bytes]], expiry: bool, others: bool, max_items: int, data: st.DataObject
) -> None:
    body = _body(batches, expiry, others)
    cut = data.draw(st.integers(0, len(body)))
    both_columns(body[:cut], 0, True, max_items)  # a file with CHECKs, read up to any byte
    both_columns(body[:cut], 0, False, max_items)  # as a file without (libkestrel's: every PUT counts)
    both_columns(body, data.draw(st.integers(0, len(body) + 2)), data.draw(st.booleans()), max_items)  # any start


@needs_native
def test_same_columns_on_every_damaged_byte() -> None:
    body = _body([[b"alpha", b"beta"], [b""], [b"gamma" * 9, b"d"]], True, True, errors=3)
    body += codec.encode_read_head(3) + bytes(5)  # a record no CHECK covers, then a marker
    for offset in range(len(body)):
        for mask in (0x01, 0x10, 0x80, 0xFF):
            damaged = bytearray(body)
            damaged[offset] ^= mask
            both_columns(bytes(damaged), 0, True)
            both_columns(bytes(damaged), 0, False, 2)


@needs_native
@pytest.mark.parametrize(
    "args",
    [
        (b"\x86", -1, True, 5),
        (b"", 0, True, 0),
        (b"", 0, True, -1),
        (b"", 0, False, 1),
        (b"\x22" + bytes(8), 0, True, 1),
        (b"\x22" + bytes(8), 7, True, 1),
        (b"\x22" + bytes(8), 99, False, 1),
        (b"\x22" + bytes(4) + b"\x01\x00\x00\x00", 0, True, 1),
        (b"\x22" + b"\xff" * 8, 0, True, 1),
        (b"\x31\xde\xad\xbe\xef" + b"\x86" + bytes(3), 0, False, 1),
        (b"\x87" + bytes(40), 0, False, 1),
        (b"\x86" + b"\xff\xff\xff\x7f" + bytes(4) + (1).to_bytes(8, "little") + bytes(8), 0, False, 1),  # huge size
        (b"\x86" + b"\xff\xff\xff\xff" + bytes(20), 0, True, 1),  # negative size
        (b"\x88" + bytes(4) + b"\xff\xff\xff\x7f" + (1).to_bytes(8, "little") + bytes(16), 0, True, 1),  # errors
        (b"\x91" + (9).to_bytes(4, "little") + bytes(9), 0, False, 1),
        (b"\x00" + b"junk", 0, True, 1),
    ],
)
def test_same_columns_on_hostile_arguments(args: tuple[bytes, int, bool, int]) -> None:
    both_columns(*args)


@needs_native
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=6), st.integers(0, 2**32 - 1), st.data())
def test_same_columns_on_large_records(sizes: list[int], seed: int, data: st.DataObject) -> None:
    """Records of up to 5,000 bytes (the CRC's folding lengths), whole and with a flipped bit."""
    rng = random.Random(seed)
    datas = [rng.randbytes(size) for size in sizes]
    body = _body([datas[:3], datas[3:]] if len(datas) > 3 else [datas], bool(seed & 1))
    both_columns(body, 0, True)
    damaged = bytearray(body)
    damaged[data.draw(st.integers(0, len(body) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    both_columns(bytes(damaged), 0, True)
    both_columns(bytes(damaged), 0, False)


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(-2, 210), st.booleans(), st.integers(-1, 5))
def test_same_columns_on_random_bytes(buf: bytes, pos: int, checked: bool, max_items: int) -> None:
    both_columns(buf, pos, checked, max_items)
    both_columns(codec.EMPTY_CHECK + buf, pos, checked, max_items)


def test_the_column_cursor_uses_the_native_decoder_unless_pure_python_is_forced() -> None:
    from engine.queue import cursor

    if NATIVE is None or pure_python_forced():
        assert cursor.decode_columns is codec.decode_columns
    else:
        assert cursor.decode_columns is NATIVE.decode_columns


# -- the writer's PUT encoder -----------------------------------------------------------

_INTS = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63) - 1]),
)
_ANY = st.one_of(_INTS, st.none(), st.floats(allow_nan=False), st.text(max_size=3), st.booleans())


def _put_outcome(fn: Callable[..., bytes], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:  # the twins must raise the same
        return ("error", (type(exc), str(exc)))


@needs_native
@settings(max_examples=400, deadline=None)
@given(
    st.integers(1, 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.binary(max_size=300),
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    st.integers(-(2**31), 2**31 - 1),
)
def test_encode_put_twin_gives_the_same_bytes(
    xid: int, add: int, data: bytes, expire: int | None, errors: int
) -> None:
    assert NATIVE is not None
    expected = codec.encode_put(xid, add, data, expire, errors)
    assert NATIVE.encode_put(xid, add, data, expire, errors) == expected
    assert NATIVE.encode_put(xid, add, data, expire_time=expire, error_count=errors) == expected
    if expire is None and errors == 0:
        assert NATIVE.encode_put(xid, add, data) == expected
    if 0 <= errors <= codec.MAX_ERROR_COUNT:  # and it reads back (readers refuse implausible counts)
        record, _ = codec.decode_record(expected, 0)
        assert record == codec.Put(xid, data, add, expire, errors)


@needs_native
@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(_ANY, st.binary(max_size=8), st.builds(bytearray, st.binary(max_size=8))), min_size=0,
             max_size=6),
)
def test_encode_put_twin_raises_the_same_on_hostile_arguments(args: list[Any]) -> None:
    """Wrong types, ids <= 0, ints out of their fields' ranges, too many or too few
    arguments: the same result or the same exception type and message."""
    assert NATIVE is not None
    reference = _put_outcome(codec.encode_put, tuple(args), {})
    assert _put_outcome(NATIVE.encode_put, tuple(args), {}) == reference


def test_the_writer_uses_the_native_put_encoder_unless_pure_python_is_forced() -> None:
    from engine.queue import writer

    if pure_python_forced() or NATIVE is None:
        assert writer.encode_put is codec.encode_put
    else:
        assert writer.encode_put is NATIVE.encode_put
