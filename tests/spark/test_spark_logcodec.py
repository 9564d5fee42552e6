"""The vectorised LOG/IDX decoder: hand-written bytes, round trips against the store's one encoder,
damage, and the store's own files."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.applog import codec
from engine.applog.batch import encode_batch, new_state
from engine.errors import CorruptFileError, FormatError
from engine.spark import logcodec as lc


def encode(payloads: list[bytes], times: object, flags: object, first: int, offset: int) -> tuple[bytes, bytes]:
    """Log and index bytes of records written by the store's encoder, one call per record
    (each has its own time and flags)."""
    log, crc, idx = bytearray(), bytearray(), bytearray()
    state = new_state(log, crc, idx, first, first, offset, 1 << 62, -(1 << 63))
    for k, (p, t, f) in enumerate(zip(payloads, times, flags)):  # type: ignore[call-overload]
        assert encode_batch([p], int(f), int(t), state) == first + k  # the record's index
    return bytes(log), bytes(idx)

# Two records, "hi" (flags 1, time 0x10) and "" (flags 0, time 0x20), indexes 5 and 6,
# the first one right after the 16-byte file header.
LOG_HEX = (
    "02000000" "01000000" "1000000000000000" "6869"  # size 2, flags 1, time 16, "hi"
    "00000000" "00000000" "2000000000000000"  # size 0, flags 0, time 32
)
IDX_HEX = (
    "1000000000000000" "0500000000000000" "1000000000000000"  # time 16, index 5, offset 16
    "2000000000000000" "0600000000000000" "2200000000000000"  # time 32, index 6, offset 34
)


def test_the_store_encoder_matches_hand_written_bytes() -> None:
    log, idx = encode([b"hi", b""], [16, 32], [1, 0], 5, 16)
    assert log.hex() == LOG_HEX
    assert idx.hex() == IDX_HEX


def test_headers_hand_written() -> None:
    assert codec.encode_header(codec.LOG_MAGIC, 1_000).hex() == "4c4f4701" "00000000" "e803000000000000"
    assert codec.encode_header(codec.IDX_MAGIC, 0).hex() == "49445801" "00000000" "0000000000000000"
    h = codec.check_header(bytes.fromhex("4c4f470100000000e803000000000000"), codec.LOG_MAGIC, "x.log")
    assert (h.version, h.flags, h.ttl_ns) == (1, 0, 1000)


def test_the_numpy_views_are_the_store_layouts() -> None:
    entry = codec.encode_entry(-5, 7, 99)
    assert lc.decode_index(entry).tolist() == [(-5, 7, 99)]
    head = codec.RECORD_HEADER.pack(3, 0xFFFFFFFF, -1)
    assert np.frombuffer(head, dtype=lc.RECORD_DTYPE).tolist() == [(3, 0xFFFFFFFF, -1)]


def test_decode_hand_written_bytes() -> None:
    run = lc.decode_run(bytes.fromhex(LOG_HEX), 16, lc.decode_index(bytes.fromhex(IDX_HEX)), "s.log", 5)
    assert run.index.tolist() == [5, 6]
    assert run.time_ns.tolist() == [16, 32]
    assert run.flags.tolist() == [1, 0]
    assert run.data.to_pylist() == [b"hi", b""]


def test_foreign_and_truncated_headers() -> None:
    with pytest.raises(FormatError) as e:
        codec.check_header(codec.encode_header(codec.IDX_MAGIC, 0), codec.LOG_MAGIC, "a.log")
    assert e.value.path == "a.log" and e.value.offset == 0
    with pytest.raises(FormatError) as e2:
        codec.check_header(b"LOG\x02" + bytes(12), codec.LOG_MAGIC, "a.log")
    assert e2.value.offset == 3
    with pytest.raises(CorruptFileError) as e3:
        codec.check_header(b"LOG\x01", codec.LOG_MAGIC, "a.log")
    assert e3.value.offset == 4


def _run(n: int) -> tuple[bytes, np.ndarray]:
    log, idx = encode([bytes([i % 251]) * (i % 7) for i in range(n)], np.arange(n) * 10, np.zeros(n), 0, 16)
    return log, lc.decode_index(idx).copy()


def test_index_gap_is_reported_with_idx_offset() -> None:
    log, entries = _run(5)
    entries["index"][3] = 9
    with pytest.raises(CorruptFileError) as e:
        lc.decode_run(log, 16, entries, "d/0.log", 0)
    assert e.value.path == "d/0.idx" and e.value.offset == 16 + 24 * 3 + 8


def test_size_disagreeing_with_index_spacing() -> None:
    log, entries = _run(5)
    raw = bytearray(log)
    off = int(entries["offset"][2]) - 16
    raw[off] += 1  # record 2 claims one byte more than the index leaves it
    with pytest.raises(CorruptFileError) as e:
        lc.decode_run(bytes(raw), 16, entries, "d/0.log", 0)
    assert e.value.path == "d/0.log" and e.value.offset == int(entries["offset"][2])


def test_time_disagreeing_with_index() -> None:
    log, entries = _run(4)
    entries["time"][1] += 1
    with pytest.raises(CorruptFileError) as e:
        lc.decode_run(log, 16, entries, "d/0.log", 0)
    assert e.value.offset == int(entries["offset"][1]) + 8


def test_last_record_past_the_bytes() -> None:
    log, entries = _run(4)
    with pytest.raises(CorruptFileError):
        lc.decode_run(log[:-1] if len(log) else log, 16, entries, "d/0.log", 0)


@settings(max_examples=60, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=80),
    first=st.integers(0, 2**40),
    t0=st.integers(-(2**40), 2**60),
    steps=st.data(),
)
def test_round_trip(payloads: list[bytes], first: int, t0: int, steps: st.DataObject) -> None:
    n = len(payloads)
    gaps = steps.draw(st.lists(st.integers(0, 10**9), min_size=n, max_size=n))
    times = np.cumsum(np.asarray(gaps, dtype=np.int64)) + t0
    flags = np.asarray(steps.draw(st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n)), dtype=np.int64)
    log, idx = encode(payloads, times, flags, first, 16)
    assert log == b"".join(codec.encode_record(p, int(f), int(t)) for p, t, f in zip(payloads, times, flags))
    out = lc.decode_run(log, 16, lc.decode_index(idx), "x.log", first)
    assert out.data.to_pylist() == payloads
    assert out.time_ns.tolist() == times.tolist()
    assert out.flags.tolist() == flags.tolist()
    assert out.index.tolist() == list(range(first, first + n))


def test_agrees_with_the_append_log_store(tmp_path: object) -> None:
    applog = pytest.importorskip("engine.applog")
    from engine.spark import logfiles

    d = str(tmp_path) + "/log"
    with applog.AppendLog.open(d, segment_bytes=4096, sync="never") as log:
        for i in range(300):
            log.append(b"r%03d" % i * (i % 5), flags=i % 3, time_ns=1000 + i)
    segs = logfiles.list_segments(d)
    assert len(segs) > 1 and logfiles.visible_count(segs) == 300
    got = [r for seg in segs for run in logfiles.read_range(logfiles.resolve(None), seg, 0, seg.count, 37)
           for r in zip(run.index.tolist(), run.time_ns.tolist(), run.flags.tolist(), run.data.to_pylist())]
    assert got == [(i, 1000 + i, i % 3, b"r%03d" % i * (i % 5)) for i in range(300)]


@settings(max_examples=60, deadline=None)
@given(size=st.integers(0, 40), n=st.integers(1, 60), last=st.integers(0, 40), damage=st.integers(-1, 59))
def test_evenly_spaced_records(size: int, n: int, last: int, damage: int) -> None:
    """Same-size records (the headers are read as a column of the bytes, not
    gathered), with a last record of another size, and one whose size field
    disagrees with the index's spacing: the same answers as any other run."""
    payloads = [bytes([k % 256]) * size for k in range(n - 1)] + [b"z" * last]
    log, idx = encode(payloads, range(n), [k % 7 for k in range(n)], 3, 16)
    out = lc.decode_run(log, 16, lc.decode_index(idx), "x.log", 3)
    assert out.data.to_pylist() == payloads and out.flags.tolist() == [k % 7 for k in range(n)]
    if 0 <= damage < n - 1:
        raw = bytearray(log)
        raw[(16 + size) * damage] ^= 0x01  # record `damage`'s size field
        with pytest.raises(CorruptFileError) as e:
            lc.decode_run(bytes(raw), 16, lc.decode_index(idx), "x.log", 3)
        assert e.value.path == "x.log"
