"""The record encoder's compiled twin (``engine/applog/_native.c``) against its
pure-Python reference (:func:`engine.applog.batch.encode_batch`), and whole logs
written with either: same results, same errors, same bytes; and the batch
checksum check's twin against :func:`engine.applog.codec.crc_failures` on
valid, damaged and hostile runs.

The native module is imported directly (not through ``engine.native.kernel``), so
these comparisons also run under ``ENGINE_PURE_PYTHON=1``; they are skipped only
when the extension is not built.
"""

from __future__ import annotations

import importlib
import os
import random
import threading
import zlib
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

import pytest
from applog_helpers import segment_file_bytes
from hypothesis import example, given, settings
from hypothesis import strategies as st

import engine.applog.log as log_module
import engine.applog.writer as writer_module
from engine.applog import AppendLog
from engine.applog.batch import (
    BASE,
    CRC_OUT,
    EXTENT,
    EXTENT_LAYOUT,
    IDX_OUT,
    LAST_TIME,
    LOG_OUT,
    NEXT_INDEX,
    REPORT_AT,
    new_state,
)
from engine.applog.batch import encode_batch as reference
from engine.applog.codec import (
    CRC_ENTRY,
    INDEX_ENTRY,
    INT64_MAX,
    INT64_MIN,
    crc_failures,
    encode_entry,
    encode_record,
)
from engine.fs import make_dirs
from engine.native import pure_python_forced


def _native() -> ModuleType | None:
    try:
        return importlib.import_module("engine.applog._native")
    except ImportError:
        return None


NATIVE = _native()
needs_native = pytest.mark.skipif(NATIVE is None, reason="engine.applog._native is not built")


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as exc:  # the twins must raise the same
        return ("error", (type(exc), str(exc)))


def _copy_state(state: Any) -> Any:
    """A copy of ``state`` with fresh bytearrays (aliases kept as aliases)."""
    if type(state) is not list:
        return state
    fresh: dict[int, bytearray] = {}
    return [fresh.setdefault(id(v), bytearray(v)) if type(v) is bytearray else v for v in state]


def _snapshot(state: Any) -> Any:
    if type(state) is not list:
        return repr(state)
    return [bytes(v) if type(v) is bytearray else repr(v) for v in state]


def _run(fn: Callable[..., int], items: Any, flags: Any, t: Any, state: Any) -> tuple[tuple[str, Any], Any]:
    """Call ``fn`` on a copy of the state; the outcome and the state after it."""
    state = _copy_state(state)
    result = _outcome(partial(fn, items, flags, t, state))
    return result, _snapshot(state)


def _state(
    prefix: bytes, base: int, nxt: int, size: int, limit: int, last: int, report: int = INT64_MAX
) -> list[Any]:
    return new_state(
        bytearray(prefix), bytearray(prefix[:3]), bytearray(prefix[:7]), base, nxt, size, limit, last, report
    )


def _extent(*fields: int) -> bytearray:
    """An extent of any six i64 (valid or not for the encoder)."""
    return bytearray(EXTENT_LAYOUT.pack(*fields))


def _fields(state: list[Any]) -> tuple[int, ...]:
    return EXTENT_LAYOUT.unpack(state[EXTENT])


# -- the reference is the format ---------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=300), max_size=12),
    st.integers(0, 0xFFFFFFFF),
    st.integers(INT64_MIN, INT64_MAX),
    st.integers(0, 1 << 40),
    st.integers(16, 1 << 20),
    st.integers(0, 2000),
    st.integers(0, 3),
)
def test_reference_writes_the_documented_layout(
    items: list[bytes], flags: int, t: int, index: int, offset: int, room: int, seg_count: int
) -> None:
    log, crc, idx = bytearray(b"L"), bytearray(b"C"), bytearray(b"I")
    # LOG_AT: where the pending bytes go; the one pending byte b"L" comes first.
    base = index - min(index, seg_count)
    state = new_state(log, crc, idx, base, index, offset - 1, offset + room, INT64_MIN)
    result = reference(items, flags, t, state)
    # The first record's index when all fit, else ~left (never a full buffer here).
    stop = len(items) if result >= 0 else len(items) - ~result
    assert result == (index if stop == len(items) else ~(len(items) - stop))
    want_log, want_crc, want_idx, pos = b"L", b"C", b"I", offset
    for k, data in enumerate(items[:stop]):
        rec = encode_record(data, flags, t)
        want_log += rec
        want_crc += CRC_ENTRY.pack(zlib.crc32(rec))
        want_idx += encode_entry(t, index + k, pos)
        pos += len(rec)
    assert (bytes(log), bytes(crc), bytes(idx)) == (want_log, want_crc, want_idx)
    # The extent moved past the encoded records (and only then).
    moved = (base, index + stop, offset - 1, offset + room, t if stop else INT64_MIN, INT64_MAX)
    assert _fields(state) == moved
    # It stops at the first record that does not fit (an empty segment takes one).
    if stop < len(items):
        assert pos + 16 + len(items[stop]) > offset + room and (min(index, seg_count) or stop)


def test_the_extent_is_documented_bytes() -> None:
    """The write state: three buffers and a 48-byte extent of six i64, little-endian."""
    state = new_state(bytearray(), bytearray(), bytearray(), 7, 9, 16, 1 << 20, -2, 300)
    assert len(state) == 4 and [type(b) for b in state] == [bytearray] * 4
    assert bytes(state[EXTENT]) == b"".join(v.to_bytes(8, "little", signed=True) for v in (7, 9, 16, 1 << 20, -2, 300))
    assert (BASE, NEXT_INDEX, LAST_TIME, REPORT_AT) == (0, 1, 4, 5)


def test_one_record_as_bytes_is_a_batch_of_one() -> None:
    one, many = _state(b"", 0, 0, 16, 1 << 20, 0), _state(b"", 0, 0, 16, 1 << 20, 0)
    assert reference(b"abc", 3, 7, one) == 0 == reference([b"abc"], 3, 7, many)
    assert one == many
    assert reference(b"d", 3, 7, one) == 1  # the index of the record
    # A full segment leaves it for the next one: 1 left (~1), nothing changed.
    full = _state(b"", 0, 1, 40, 40, 7)
    before = _snapshot(full)
    assert reference(b"abc", 3, 7, full) == ~1
    assert _snapshot(full) == before


def test_times_never_go_backwards() -> None:
    """Records get max(time_ns, LAST_TIME): a clock that stepped back
    stamps the newest time again."""
    state = _state(b"", 0, 0, 16, 1 << 20, 500)
    assert reference([b"a", b"b"], 0, 499, state) == 0
    entries = [INDEX_ENTRY.unpack_from(state[IDX_OUT], k * 24)[0] for k in range(2)]
    assert entries == [500, 500] and _fields(state)[LAST_TIME] == 500
    assert reference(b"c", 0, 501, state) == 2
    assert _fields(state)[LAST_TIME] == 501


def test_the_encoder_reports_back_when_the_buffer_reaches_report_at() -> None:
    """-1 once the pending log bytes reach REPORT_AT with every record encoded
    (none given too); records left for the next segment are counted instead
    (~left; the caller flushes before it rolls anyway); REPORT_AT 0 reports
    after every call."""
    state = _state(b"", 0, 0, 16, 1 << 20, 0, 40)
    assert reference(b"a" * 4, 0, 1, state) == 0  # 20 bytes pending: the index
    assert reference(b"b" * 4, 0, 1, state) == -1  # 40: reported
    assert reference([], 0, 1, state) == -1  # still full, nothing added
    state[LOG_OUT].clear()  # what a flush does
    assert reference([], 0, 1, state) == 2
    state[EXTENT][8 * REPORT_AT : 8 * REPORT_AT + 8] = bytes(8)  # 0: report every call
    assert reference([], 0, 1, state) == -1
    assert reference(b"c", 0, 1, state) == -1 and _fields(state)[NEXT_INDEX] == 3
    tight = _state(b"", 0, 0, 16, 16 + 40, 0, 0)
    assert reference([b"a" * 4, b"b" * 4, b"c"], 0, 1, tight) == ~1  # the segment is full: 1 left
    with pytest.raises(ValueError, match=r"report size \(REPORT_AT\) must be >= 0"):
        reference(b"a", 0, 1, _state(b"", 0, 0, 16, 1 << 20, 0, -1))


# -- the twins agree -----------------------------------------------------------------------
INTS = st.one_of(
    st.integers(-3, 3000),
    st.integers(INT64_MIN - 2, INT64_MIN + 2),
    st.integers(INT64_MAX - 2, INT64_MAX + 2),
    st.integers(-(1 << 70), 1 << 70),
)
I64 = st.one_of(
    st.integers(-3, 5000), st.integers(INT64_MIN, INT64_MIN + 2), st.integers(INT64_MAX - 2, INT64_MAX),
    st.integers(INT64_MIN, INT64_MAX),
)
HOSTILE = st.one_of(INTS, st.none(), st.booleans(), st.floats(allow_nan=False), st.just("7"), st.just(b"x"))
ITEM = st.one_of(
    st.binary(max_size=200),
    st.binary(max_size=4).map(bytearray),
    st.binary(max_size=4).map(lambda b: memoryview(b)),
    st.just("text"),
    st.none(),
)
BUFFER = st.one_of(st.binary(max_size=40).map(bytearray), st.just(b"bytes"), st.none())
VALID = st.tuples(
    st.one_of(st.binary(max_size=300), st.lists(st.binary(max_size=200), max_size=10)),
    st.integers(0, 0xFFFFFFFF),
    st.integers(INT64_MIN, INT64_MAX),
    st.integers(0, 5),  # records already in the segment
    st.integers(0, INT64_MAX - 10),  # next index
    st.integers(0, 4096),  # log offset of the pending bytes
    st.integers(INT64_MIN, INT64_MAX) | st.integers(0, 4096),  # limit
    st.integers(INT64_MIN, INT64_MAX) | st.integers(-5, 5),  # last time
    st.just(INT64_MAX) | st.integers(0, 600) | st.integers(0, INT64_MAX),  # report size
)


@needs_native
@settings(max_examples=600, deadline=None)
@given(VALID, st.binary(max_size=40), st.booleans())
@example((b"a" * 100, 0, 1, 0, 0, 16, 50, 0, INT64_MAX), b"", False)  # one oversized record in an empty segment
@example(([b"a" * 100, b"b"], 0, 1, 0, 0, 16, 50, 0, INT64_MAX), b"", False)
@example(([b"a"], 0, 1, 0, INT64_MAX, 16, 1 << 20, 0, INT64_MAX), b"", False)  # the last index
@example(([b"abc"], 0, 1, 1, 5, INT64_MAX - 18, INT64_MAX, 1, INT64_MAX), b"", False)  # the log's last byte
@example(([b"abc"], 0, 1, 1, 5, INT64_MAX - 18, INT64_MAX, 1, INT64_MAX), b"", True)
@example((b"x" * 200, 0, 5, 0, 0, 16, 1 << 20, 9, INT64_MAX), b"", False)  # the clock stepped back
@example((b"x" * 100, 0, 5, 0, 0, 16, 1 << 20, 9, 116), b"", False)  # the buffer just full
@example((b"x" * 100, 0, 5, 0, 0, 16, 1 << 20, 9, 117), b"", False)  # one byte short of full
@example(([], 0, 5, 0, 0, 16, 1 << 20, 9, 0), b"abc", False)  # nothing added, full
@example(([b"a", b"b"], 0, 5, 1, 1, 16, 16 + 17, 9, 0), b"", False)  # one left over, full
@example(([b"a"] * 5, 0, 5, 0, 1 << 40, 16, 1 << 20, 9, INT64_MAX), b"", False)  # an index past 2**32
def test_twins_agree_on_valid_calls(valid: tuple[Any, ...], prefix: bytes, as_tuple: bool) -> None:
    assert NATIVE is not None
    items, flags, t, held, nxt, size, limit, last, report = valid
    if as_tuple and type(items) is list:
        items = tuple(items)
    state = _state(prefix, nxt - min(nxt, held), nxt, size, limit, last, report)
    assert _run(reference, items, flags, t, state) == _run(NATIVE.encode_batch, items, flags, t, state)


@needs_native
@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(
        st.lists(st.binary(max_size=200), max_size=5),
        st.binary(max_size=200),
        st.lists(ITEM, max_size=5),
        st.lists(ITEM, max_size=5).map(tuple),
        ITEM,
        HOSTILE,
    ),
    st.one_of(st.integers(0, 0xFFFFFFFF), HOSTILE),
    st.one_of(st.integers(INT64_MIN, INT64_MAX), HOSTILE),
    st.one_of(
        st.tuples(
            st.lists(st.one_of(st.binary(max_size=40).map(bytearray), BUFFER), min_size=3, max_size=3),
            st.one_of(
                st.lists(I64, min_size=6, max_size=6).map(lambda v: _extent(*v)),
                BUFFER,
                st.binary(min_size=47, max_size=49).map(bytearray),
            ),
        ),
        HOSTILE,
    ),
    st.sampled_from(["list", "list", "list", "tuple", "short", "long", "alias", "alias-extent"]),
)
@example([b"a"], 0, 1, ([bytearray()] * 3, _extent(0, 0, 16, 100, 0, 50)), "alias")
@example([b"a"], 0, 1, ([bytearray()] * 3, _extent(0, 0, 16, 100, 0, 50)), "alias-extent")
@example([b"a"], 0, 1, ([bytearray()] * 3, _extent(0, INT64_MAX, 16, 100, 0, 50)), "list")
@example([b"a"], 0, 1, ([bytearray()] * 3, _extent(5, 4, 16, 100, 0, 50)), "list")  # next index below the base
@example([b"a"], 0, 1, ([bytearray()] * 3, _extent(-1, 4, 16, 100, 0, 50)), "list")  # a negative base
@example([b"a"], 0, 1, ([bytearray()] * 3, _extent(0, 0, -16, 100, 0, 50)), "list")  # a negative offset
@example([b"a"], 0, 1, ([bytearray(b"x")] * 3, _extent(0, 0, INT64_MAX, 100, 0, 50)), "list")  # offset overflows
@example([b"a", "x"], 0, 1, ([bytearray()] * 3, _extent(0, 0, 16, 100, 0, 50)), "list")
@example([], 0, 1, ([bytearray()] * 3, _extent(0, 0, 16, 100, 0, 0)), "list")  # no items, the buffer full
@example([b"a"], 0, 1, ([bytearray()] * 3, _extent(0, 0, 16, 100, 0, -1)), "list")
@example([b"a"], 0, 1, ([bytearray()] * 3, bytearray(47)), "list")
@example([b"a"], 0, 1, ([bytearray()] * 3, b"x" * 48), "list")
def test_twins_agree_on_hostile_calls(items: Any, flags: Any, t: Any, parts: Any, shape: str) -> None:
    assert NATIVE is not None
    if type(parts) is tuple:
        bufs, extent = parts
        bufs = [bytearray(b) if type(b) is bytearray else b for b in bufs]
        if shape == "alias" and type(bufs[0]) is bytearray:
            bufs[1] = bufs[0]
        if shape == "alias-extent" and type(bufs[2]) is bytearray:
            extent = bufs[2]
        state: Any = [*bufs, extent]
        if shape == "tuple":
            state = tuple(state)
        elif shape == "short":
            state = state[:-1]
        elif shape == "long":
            state = [*state, bytearray()]
    else:
        state = parts
    assert _run(reference, items, flags, t, state) == _run(NATIVE.encode_batch, items, flags, t, state)


DEFECTS = ["items", "item", "flags", "time", "state", "short", "buffer", "extent", "alias", "size", "field"]


@needs_native
@settings(max_examples=1500, deadline=None)
@given(VALID, st.sampled_from(DEFECTS), st.one_of(HOSTILE, ITEM), st.booleans(), st.integers(0, 5), I64)
def test_twins_agree_on_calls_with_one_defect(
    valid: tuple[Any, ...], defect: str, bad: Any, twice: bool, field: int, value: int
) -> None:
    """A valid call with one argument (or one part of the state, or one field
    of its extent) replaced by a hostile value: the same error, or the same
    result when it happens to be valid."""
    assert NATIVE is not None
    items, flags, t, held, nxt, size, limit, last, report = valid
    state: Any = _state(b"xyz", nxt - min(nxt, held), nxt, size, limit, last, report)
    if defect == "items":
        items = bad
    elif defect == "item":
        items = [*items, bad] if type(items) is list else [items, bad]
    elif defect == "flags":
        flags = bad
    elif defect == "time":
        t = bad
    elif defect == "state":
        state = bad
    elif defect == "short":
        state = state[:-1] if twice else tuple(state)
    elif defect == "buffer":
        state[LOG_OUT if twice else IDX_OUT] = bad
    elif defect == "extent":
        state[EXTENT] = bad
    elif defect == "alias":
        state[CRC_OUT if twice else EXTENT] = state[LOG_OUT if twice else IDX_OUT]
    elif defect == "size":  # 49 or 47 bytes
        if twice:
            state[EXTENT] += b"\0"
        else:
            del state[EXTENT][47:]
    else:
        state[EXTENT][8 * field : 8 * field + 8] = value.to_bytes(8, "little", signed=True)
    assert _run(reference, items, flags, t, state) == _run(NATIVE.encode_batch, items, flags, t, state)


@needs_native
@pytest.mark.parametrize("which", [LOG_OUT, CRC_OUT, IDX_OUT, EXTENT])
def test_twins_agree_when_a_buffer_has_a_view(which: int) -> None:
    """A buffer another object has a view of cannot grow: the same BufferError,
    and the other buffers and the extent as they were.  The extent is written
    in place, never resized: a view of it changes nothing (and sees the new
    extent)."""
    outcomes = []
    for fn in (reference, NATIVE.encode_batch):  # type: ignore[union-attr]
        state = _state(b"0123456789", 0, 0, 16, 1 << 20, 0)
        view = memoryview(state[which])
        outcomes.append((_outcome(partial(fn, [b"a", b"bc"], 1, 2, state)), _snapshot(state)))
        view.release()
    assert outcomes[0] == outcomes[1]
    if which == EXTENT:
        assert outcomes[0][0] == ("ok", 0)
        return
    assert outcomes[0][0][0] == "error" and outcomes[0][0][1][0] is BufferError
    assert outcomes[0][1] == _snapshot(_state(b"0123456789", 0, 0, 16, 1 << 20, 0))


# Ints around the compiled twin's digit boundaries (it reads ints of up to three
# 30-bit digits that fit 63 bits from their digits; others through CPython).
EDGES = sorted({s * (v + d) for v in (0, 1 << 30, 1 << 60, 1 << 62, 1 << 63, 1 << 64, 1 << 90)
                for d in (-1, 0, 1) for s in (1, -1)})


@needs_native
@pytest.mark.parametrize("field", ["flags", "time"])
def test_twins_agree_on_ints_at_digit_boundaries(field: str) -> None:
    """The int arguments (flags, time) at and around the boundaries of 30-bit
    digits and of the i64/u32 ranges: same result or error."""
    assert NATIVE is not None
    for value in EDGES:
        items: Any = [b"ab", b"c"]
        flags, t = 3, 1 << 61
        state: Any = _state(b"xyz", 5, 7, 100, 1 << 40, 9)
        if field == "flags":
            flags = value
        else:
            t = value
        assert _run(reference, items, flags, t, state) == _run(NATIVE.encode_batch, items, flags, t, state), value


def _spare(data: bytes, front: int) -> bytearray:
    """``data`` in a bytearray with room to spare and, for ``front``, bytes
    deleted from its front (CPython then moves its start, not the bytes)."""
    buf = bytearray(b"-" * front + data + b"=" * 4000)
    del buf[len(buf) - 4000 :]
    del buf[:front]
    assert buf == data
    return buf


@needs_native
@pytest.mark.parametrize("front", [0, 1, 7, 100])
@pytest.mark.parametrize("held", [None, LOG_OUT, CRC_OUT, IDX_OUT])
def test_twins_agree_on_buffers_with_room_to_spare(front: int, held: int | None) -> None:
    """Buffers that already have room (grown before, or cut at the front): the
    bytes fit without a resize, or BufferError when a view of one is held, with
    nothing changed, as the reference does."""
    outcomes: list[list[Any]] = []
    for fn in (reference, NATIVE.encode_batch):  # type: ignore[union-attr]
        state = new_state(_spare(b"0123456789", front), _spare(b"abc", front), _spare(b"IDX", front),
                          0, 0, 16, 1 << 20, 0)
        view = None if held is None else memoryview(state[held])
        try:
            seen = [_outcome(partial(fn, [b"a", b"bc" * 50], 1, 2, state)), _snapshot(state)]
        finally:
            if view is not None:
                view.release()
        if held is None:  # and the buffers grow on as bytearrays do
            state[LOG_OUT] += b"!"
            del state[CRC_OUT][:2]
            seen += [fn(b"z" * 300, 4, 5, state), _snapshot(state)]
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]
    if held is not None:
        assert outcomes[0][0][0] == "error" and outcomes[0][0][1][0] is BufferError


@needs_native
def test_twins_agree_record_by_record_as_the_buffers_grow() -> None:
    """Thousands of one-record calls (the buffers grown many times over, and
    emptied as a flush does): the same bytes and state at every step, and each
    call answers its record's index."""
    assert NATIVE is not None
    states = [_state(b"", 0, 0, 16, 1 << 40, 0) for _ in range(2)]
    for k in range(6000):
        data = b"%d" % k * (k % 23)
        results = [fn(data, k & 7, 1000 + k // 3, st) for fn, st in zip((reference, NATIVE.encode_batch), states)]
        assert results[0] == results[1] == k
        if k % 1000 == 999:
            assert _snapshot(states[0]) == _snapshot(states[1]), k
            for st in states:
                st[LOG_OUT].clear()
                st[CRC_OUT].clear()
    assert _snapshot(states[0]) == _snapshot(states[1])


@needs_native
def test_native_checksums_every_length() -> None:
    """The compiled CRC-32 (table, or carry-less multiplication for 64 bytes
    and more, the tail by 8, 4 and single bytes) is zlib's for every record
    length around its block sizes."""
    assert NATIVE is not None
    rng = random.Random(5)
    for size in [*range(0, 300), 1000, 4096 - 16, 65536 + 7]:
        data = rng.randbytes(size)
        state = _state(b"", 0, 0, 16, 1 << 40, 0)
        assert NATIVE.encode_batch(data, 0xA5A5A5A5, -7, state) == 0
        assert CRC_ENTRY.unpack(state[CRC_OUT])[0] == zlib.crc32(state[LOG_OUT]), size


@needs_native
def test_native_encoder_does_not_leak() -> None:
    """Many calls (valid and failing) leave the traced memory flat."""
    import tracemalloc

    assert NATIVE is not None
    enc = NATIVE.encode_batch

    def burst() -> None:
        state = _state(b"", 0, 0, 16, 1 << 40, 0)
        for k in range(5000):
            enc(b"x" * 100, 3, k, state)
            enc([b"x" * 70, b"y"], 3, k - 1, state)  # stamped k: no earlier than the newest
            if k % 100 == 0:
                _outcome(partial(enc, [b"y", "z"], 0, 0, state))
                _outcome(partial(enc, b"y", 0, 0, [*state[:3], None]))
                _outcome(partial(enc, b"y", 0, 0, [*state[:3], bytearray(7)]))
                del state[LOG_OUT][:], state[CRC_OUT][:], state[IDX_OUT][:]

    burst()
    tracemalloc.start()
    try:
        burst()
        first = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            burst()
        assert tracemalloc.get_traced_memory()[0] - first < 64 * 1024
    finally:
        tracemalloc.stop()


def test_the_encoder_is_chosen_once_per_process() -> None:
    """The compiled encoder when it is built and not disabled, else the reference;
    the store's ``append`` (which runs ``SegmentWriter.add``'s lines itself) calls
    the same one; the writer's methods are the class's (nothing swapped per instance)."""
    if NATIVE is None or pure_python_forced():
        assert writer_module.encode_batch is reference
    else:
        assert writer_module.encode_batch is NATIVE.encode_batch
    assert log_module.encode_batch is writer_module.encode_batch


def _use_encoder(mp: pytest.MonkeyPatch, fn: Callable[..., int]) -> None:
    """Make ``fn`` the encoder of every write (``append`` imports the writer's)."""
    mp.setattr(writer_module, "encode_batch", fn)
    mp.setattr(log_module, "encode_batch", fn)


# -- whole logs: compiled encoder against the pure-Python one ------------------------------
FAR = 1 << 62  # a "newest time" beyond the wall clock: appends without a time get exactly it

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.binary(max_size=90), st.integers(0, 3), st.integers(0, 3)),
        st.tuples(st.just("append-bad"), st.sampled_from(["flags", "time", "type"])),
        st.tuples(st.just("many"), st.lists(st.binary(max_size=90), max_size=9), st.integers(0, 3)),
        st.tuples(st.just("mixed"), st.lists(st.tuples(st.binary(max_size=90), st.integers(0, 2)), max_size=6)),
        st.tuples(st.just("get"), st.integers(0, 60)),
        st.tuples(st.just("flush")),
        st.tuples(st.just("between"), st.integers(0, 30)),
    ),
    max_size=40,
)


def _apply(lg: AppendLog, op: tuple[Any, ...], t: int) -> Any:
    kind = op[0]
    if kind == "append":
        return lg.append(op[1], op[2], t + op[3])
    if kind == "append-bad":
        if op[1] == "flags":
            return lg.append(b"x", -1)
        if op[1] == "time":
            return lg.append(b"x", 0, 5 if lg.next_index else INT64_MIN - 1)
        return lg.append("text")  # type: ignore[arg-type]
    if kind == "many":
        return lg.append_many(op[1], op[2], t + 5)
    if kind == "mixed":
        return lg.append_many([(d, f, t + 6 + (k // 2)) for k, (d, f) in enumerate(op[1])])
    if kind == "get":
        return lg.get(op[1])
    if kind == "between":
        return list(lg.between(start_ns=t + op[1] - 10, end_ns=t + op[1] + 10))
    lg.flush()
    return None


@needs_native
@settings(max_examples=60, deadline=None)
@given(OPS, st.sampled_from([0, 64, 1 << 16]), st.sampled_from(["never", 0.05, "always"]))
def test_native_and_pure_logs_write_the_same_bytes(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]], buffer_bytes: int, sync: object
) -> None:
    assert NATIVE is not None
    root = str(tmp_path_factory.mktemp("twins"))
    kw: dict[str, Any] = {"segment_bytes": 16 + 4 * 60, "sync": sync, "buffer_bytes": buffer_bytes}
    encoders = {"pure": reference, "native": NATIVE.encode_batch}
    logs = {name: AppendLog.open(os.path.join(root, name), **kw) for name in encoders}
    t = FAR
    mp = pytest.MonkeyPatch()
    try:
        for op in ops:
            results = []
            for name, lg in logs.items():
                _use_encoder(mp, encoders[name])
                results.append(_outcome(partial(_apply, lg, op, t)))
            assert results[0] == results[1], op
            t += 10
        assert logs["pure"].next_index == logs["native"].next_index
        for lg in logs.values():
            lg.verify()
    finally:
        mp.undo()
        for lg in logs.values():
            lg.close()
    assert segment_file_bytes(os.path.join(root, "pure")) == segment_file_bytes(os.path.join(root, "native"))


def test_threads_appending_and_reading_stay_dense(tmp_path: os.PathLike[str]) -> None:
    """Several appending threads, a reader and the periodic syncer: every record
    is there once, in order of index, and the files verify (native or not)."""
    path = os.path.join(str(tmp_path), "log")
    per_thread = 3000
    with AppendLog.open(path, sync=0.01, segment_bytes=16 + 2000 * 30, buffer_bytes=4096) as lg:
        got: dict[int, bytes] = {}
        lock = threading.Lock()

        def writer(k: int) -> None:
            for j in range(per_thread):
                data = b"%d:%d" % (k, j)
                idx = lg.append_many([data])[0] if j % 500 == 7 else lg.append(data)
                with lock:
                    got[idx] = data

        stop = threading.Event()

        def reader() -> None:
            while not stop.is_set():
                n = lg.next_index
                if n:
                    lg.get(n - 1)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        rd = threading.Thread(target=reader)
        rd.start()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        stop.set()
        rd.join()
        assert sorted(got) == list(range(4 * per_thread))
        assert [r.data for r in lg.scan()] == [got[i] for i in range(4 * per_thread)]
        lg.verify()
    with AppendLog.open(path) as again:
        assert not again.recovery.repaired
        assert again.next_index == 4 * per_thread


@pytest.mark.parametrize("native", [False, True])
def test_crash_states_with_buffered_appends(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Crash states of a periodic-sync log with a buffer of several records,
    rolls and explicit syncs, with either encoder: every record synced before the
    crash survives, nothing else appears, indexes stay dense."""
    if native and NATIVE is None:
        pytest.skip("engine.applog._native is not built")
    from test_applog_crash import DIR, _check_state, _payload

    from stress.simfs import SimFS

    _use_encoder(monkeypatch, NATIVE.encode_batch if native and NATIVE else reference)
    sim = SimFS()
    make_dirs(sim, DIR)
    attempted: dict[int, tuple[int, int, bytes]] = {}
    lg = AppendLog.open(DIR, segment_bytes=160, sync=3600, buffer_bytes=90, fs=sim)
    for i in range(30):
        attempted[i] = (100 + i, i % 3, _payload(i))
        assert lg.append(_payload(i), i % 3, 100 + i) == i
        if i % 7 == 6:
            lg.sync()  # what a period does
            for k in range(i + 1):
                sim.mark(("append", k))
    lg.close()
    seen = 0
    for state in sim.crash_states(limit=300, seed=11):
        _check_state(state.fs(), state.marks, attempted, state.describe())
        seen += 1
    assert seen > 50


# -- the batch checksum check (codec.crc_failures) and its twin -------------------------------
def _records(payloads: list[bytes], flags: int = 0, t0: int = 0) -> tuple[bytes, bytes]:
    """Back-to-back records and their .crc entries (no file headers)."""
    recs = [encode_record(p, flags, t0 + k) for k, p in enumerate(payloads)]
    return b"".join(recs), b"".join(CRC_ENTRY.pack(zlib.crc32(r)) for r in recs)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=120), max_size=12), st.data())
def test_crc_failures_reference_names_exactly_the_damaged_records(payloads: list[bytes], data: Any) -> None:
    log, crcs = _records(payloads)
    assert crc_failures(log, crcs, len(payloads)) == []
    if not payloads:
        return
    k = data.draw(st.integers(0, len(payloads) - 1))
    wrong = bytearray(crcs)
    wrong[4 * k] ^= 0x01
    assert crc_failures(log, bytes(wrong), len(payloads)) == [k]
    # A flipped payload bit (the size field left alone) fails that record only.
    if payloads[k]:
        starts = [sum(16 + len(p) for p in payloads[:j]) for j in range(len(payloads))]
        flipped = bytearray(log)
        flipped[starts[k] + 16] ^= 0x80
        assert crc_failures(bytes(flipped), crcs, len(payloads)) == [k]
    # Fewer records asked for: only those are checked.
    assert crc_failures(log, bytes(wrong), k) == []


def test_crc_failures_reference_errors() -> None:
    log, crcs = _records([b"abc", b"de"])
    with pytest.raises(ValueError, match="1 checksums, fewer than count"):
        crc_failures(log, crcs[:4], 2)
    with pytest.raises(ValueError, match="record 1 at byte 19: its data runs past the end"):
        crc_failures(log[:-1], crcs, 2)
    with pytest.raises(ValueError, match="record 1 at byte 19: its header runs past the end"):
        crc_failures(log[:25], crcs, 2)
    with pytest.raises(ValueError, match="count must be >= 0"):
        crc_failures(log, crcs, -1)
    with pytest.raises(TypeError, match="must be bytes"):
        crc_failures(bytearray(log), crcs, 1)
    with pytest.raises(TypeError, match="count must be an int"):
        crc_failures(log, crcs, True)


def _crc_outcome(fn: Callable[..., Any], log: Any, crcs: Any, count: Any) -> tuple[str, Any]:
    return _outcome(partial(fn, log, crcs, count))


@needs_native
@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=150), max_size=10), st.lists(st.integers(0, 1 << 16), max_size=4),
       st.lists(st.integers(0, 4 * 10), max_size=3), st.integers(-2, 12), st.integers(0, 40))
@example([b"abc"], [], [], 1, 0)
@example([b"abc", b""], [8 * 19], [], 2, 0)  # the second record's size field: it runs past the end
def test_crc_failures_twins_agree_on_valid_and_damaged_runs(
    payloads: list[bytes], log_flips: list[int], crc_flips: list[int], count: int, cut: int
) -> None:
    """Whole runs, runs with flipped log or checksum bits (sizes too: a record
    then runs past the end), cut short, and counts below, at and past the run."""
    assert NATIVE is not None
    log, crcs = _records(payloads)
    damaged = bytearray(log)
    for f in log_flips:
        if f < len(damaged) * 8:
            damaged[f // 8] ^= 1 << (f % 8)
    wrong = bytearray(crcs)
    for f in crc_flips:
        if f < len(wrong):
            wrong[f] ^= 0x10
    for lg in (log, bytes(damaged), bytes(damaged[: max(0, len(damaged) - cut)])):
        for cs in (crcs, bytes(wrong), crcs[: max(0, len(crcs) - cut)]):
            assert _crc_outcome(crc_failures, lg, cs, count) == _crc_outcome(NATIVE.crc_failures, lg, cs, count)


@needs_native
@settings(max_examples=800, deadline=None)
@given(
    st.one_of(st.binary(max_size=80), st.binary(max_size=8).map(bytearray), st.none(), st.just("log"),
              st.binary(min_size=16, max_size=40)),
    st.one_of(st.binary(max_size=24), st.binary(max_size=8).map(memoryview), st.none()),
    st.one_of(INTS, st.none(), st.booleans(), st.just(1.0)),
)
@example(b"\xff\xff\xff\xff" + bytes(12), b"\0\0\0\0", 1)  # a 4 GiB size in a 16-byte log
@example(b"\xff\xff\xff\x7f" + bytes(12), b"\0\0\0\0", 1)
@example(bytes(16), b"\0\0\0\0", 1 << 64)
@example(bytes(16), b"\0\0\0\0", -(1 << 64))
def test_crc_failures_twins_agree_on_hostile_arguments(log: Any, crcs: Any, count: Any) -> None:
    """Garbage sizes (bounded by the log before anything is read), wrong types,
    counts far out of range: the same result or the same error, type and message."""
    assert NATIVE is not None
    assert _crc_outcome(crc_failures, log, crcs, count) == _crc_outcome(NATIVE.crc_failures, log, crcs, count)
