"""The ``.crc`` side file (ours): its bytes, torn unacknowledged records never
coming back as data (the stress suite's seed 1804949558), checksum damage in the
middle as corruption, and segments without a ``.crc`` file (wallaby's) still opening."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.applog import AppendLog, LogReader
from engine.applog.codec import (
    CRC_MAGIC,
    HEADER_SIZE,
    crc_count,
    crc_offset,
    encode_crc,
    encode_header,
    encode_record,
    parse_segment_name,
    record_crc,
    segment_name,
)
from engine.applog.handler import HANDLER
from engine.errors import CorruptFileError
from engine.fs import OpenMode, default_fs, make_dirs
from stress.simfs import SimFS

DIR = "/db"

FS = default_fs()


def _patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _files(d: str, base: int = 0) -> tuple[str, str, str]:
    return tuple(os.path.join(d, segment_name(base, s)) for s in (".log", ".idx", ".crc"))  # type: ignore[return-value]


# -- bytes -----------------------------------------------------------------------------
def test_crc_file_bytes(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    with AppendLog.open(d, sync="never") as log:
        log.append(b"hello", flags=1, time_ns=1000)
        log.append(b"", flags=0, time_ns=2000)
    logf, _idxf, crcf = _files(d)
    with open(crcf, "rb") as f:
        crc = f.read()
    assert crc == bytes.fromhex(
        "435243 01 00000000 0000000000000000"  # "CRC", version 1, flags 0, reserved 0
        "a226b738"  # crc32(05000000 01000000 e803000000000000 "hello") = 0x38b726a2
        "c703012f"  # crc32(00000000 00000000 d007000000000000)          = 0x2f0103c7
    )
    with open(logf, "rb") as f:
        log_bytes = f.read()
    # The log itself is wallaby's format, byte for byte (no checksum in it).
    assert log_bytes == bytes.fromhex(
        "4c4f4701 00000000 0000000000000000"
        "05000000 01000000 e803000000000000 68656c6c6f"
        "00000000 00000000 d007000000000000"
    )
    assert crc_offset(1) == HEADER_SIZE + 4
    assert HANDLER.sniff(FS, crcf, crc[:16], False)
    summary = HANDLER.summarize(FS, crcf)
    assert summary["checksums"] == 2 and summary["records"] == 2
    assert "checksums verified" in HANDLER.verify(FS, crcf)[0]


def test_crc_codec() -> None:
    assert encode_header(CRC_MAGIC, 0).hex() == "43524301" + "00" * 12
    rec = encode_record(b"hello", 1, 1000)
    assert record_crc(rec[:16], rec[16:]) == 0x38B726A2
    assert encode_crc(0x38B726A2) == bytes.fromhex("a226b738")
    assert crc_count(16) == 0 and crc_count(16 + 4 * 3 + 2) == 3
    assert parse_segment_name(segment_name(42, ".crc")) == (42, ".crc")


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=2, max_size=8),
    victim=st.integers(0, 7),
    where=st.floats(0, 1, exclude_max=True),
)
def test_property_damage_is_cut_at_the_tail_and_an_error_in_the_middle(
    sizes: list[int], victim: int, where: float
) -> None:
    """One damaged byte in a record: the newest record is cut as a torn tail, any
    other gives CorruptFileError at that record's offset; never wrong data."""
    victim %= len(sizes)
    sim = SimFS()
    make_dirs(sim, DIR)
    expected = [bytes([65 + k]) * n for k, n in enumerate(sizes)]
    offsets = []
    with AppendLog.open(DIR, sync="never", fs=sim) as log:
        for k, data in enumerate(expected):
            log.append(data, flags=k, time_ns=10 + k)
        offsets = [s.log_bytes for s in log.segments()]
    ends = [HEADER_SIZE]
    for n in sizes:
        ends.append(ends[-1] + 16 + n)
    assert offsets == [ends[-1]]
    start = ends[victim]
    at = start + 16 + int(where * sizes[victim]) if sizes[victim] else start + 4  # data, or the flags field
    with sim.open(f"{DIR}/{segment_name(0, '.log')}", OpenMode.WRITE) as h:
        byte = h.read_at(at, 1)
        h.write_at(at, bytes([byte[0] ^ 0x5A]))
    if victim == len(sizes) - 1:
        with AppendLog.open(DIR, fs=sim) as log:
            assert log.recovery.total("cut", "records") == 1
            assert [r.data for r in log.scan()] == expected[:-1]
            assert log.verify() == []
    else:
        with pytest.raises(CorruptFileError) as err:
            AppendLog.open(DIR, fs=sim)
        assert err.value.path.endswith(".log") and err.value.offset == start


# -- the stress repro ------------------------------------------------------------------
def _check_whole(fs: Any, marks: list[Any], expected: list[bytes], desc: str) -> None:
    acked = set(marks)
    log = AppendLog.open(DIR, segment_bytes=1024, fs=fs)
    try:
        log.verify()
        recs = list(log.scan(log.first_index))
        for r in recs:
            assert r.data == expected[r.index], f"record {r.index} was never written like this: {desc}"
        for i in acked:
            assert log.first_index <= i < log.next_index, f"acknowledged record {i} lost: {desc}"
    finally:
        log.close()


def test_torn_unacknowledged_record_never_comes_back() -> None:
    """docs/reliability.md, seed 1804949558: the in-flight append is torn (header
    intact, data zeros/garbage); before the .crc file, recovery rebuilt its index
    entry and the torn record came back.  Now it is cut as a torn tail."""
    sim = SimFS()
    make_dirs(sim, DIR)
    log = AppendLog.open(DIR, segment_bytes=1024, sync="always", fs=sim)
    expected = [ch * n for ch, n in ((b"A", 74), (b"B", 170), (b"C", 210), (b"D", 600))]
    for i, data in enumerate(expected):
        assert log.append(data) == i
        sim.mark(i)
    log.close()
    states = 0
    for state in sim.crash_states(limit=5000, seed=7):
        if not state.fs().exists(f"{DIR}/.lock"):
            continue
        states += 1
        _check_whole(state.fs(), state.marks, expected, state.describe())
    assert states > 10


def test_torn_batch_in_flight_never_comes_back() -> None:
    """The stress suite's bounded run (seed 1862591194): an ``append_many`` of
    143, 176, 58 and 58 bytes in flight when the power fails; the write crossing
    the 512-byte tear point left record 3 with zeros for data."""
    sim = SimFS()
    make_dirs(sim, DIR)
    log = AppendLog.open(DIR, segment_bytes=1024, sync="always", fs=sim)
    expected = [bytes([65 + k]) * n for k, n in enumerate((143, 176, 58, 58))]
    assert log.append_many(expected) == range(4)
    for k in range(4):
        sim.mark(k)
    more = [b"E" * 100, b"F" * 300]
    assert log.append_many(more) == range(4, 6)
    expected += more
    log.close()
    for state in sim.crash_states(limit=2000, seed=3):
        if state.fs().exists(f"{DIR}/.lock"):
            _check_whole(state.fs(), state.marks, expected, state.describe())


# -- damage ----------------------------------------------------------------------------
def _make(d: str, n: int = 3) -> None:
    with AppendLog.open(d) as log:
        for k in range(n):
            log.append(b"payload-%d" % k, time_ns=100 + k)


def _offsets(d: str) -> list[int]:
    _logf, idxf, _crcf = _files(d)
    with open(idxf, "rb") as f:
        raw = f.read()
    return [int.from_bytes(raw[p + 16 : p + 24], "little") for p in range(HEADER_SIZE, len(raw), 24)]


def test_checksum_mismatch_in_the_middle_is_corruption(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d)
    logf, _idxf, _crcf = _files(d)
    off1 = _offsets(d)[1]
    _patch(logf, off1 + 16, b"X")  # record 1's data: header and index still agree
    with pytest.raises(CorruptFileError) as err:
        AppendLog.open(d)
    assert err.value.path == logf and err.value.offset == off1
    with LogReader.open(d) as reader:
        assert reader.next_index == 3  # the tail verifies: the damage is not a tail
        with pytest.raises(CorruptFileError) as scan_err:
            list(reader.scan())  # scans check every record's checksum
        assert scan_err.value.path == logf and scan_err.value.offset == off1
        with pytest.raises(CorruptFileError):
            reader.verify()
    with pytest.raises(CorruptFileError):
        HANDLER.verify(FS, d)
    with pytest.raises(CorruptFileError):
        HANDLER.verify(FS, logf)


def test_checksum_mismatch_at_the_tail_is_cut_and_reported(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    d = str(tmp_path)
    _make(d)
    logf, idxf, crcf = _files(d)
    off2 = _offsets(d)[2]
    _patch(logf, off2 + 16, b"\0\0\0")  # the newest record's data, torn to zeros
    with LogReader.open(d) as reader:  # the reader does not show it either
        assert reader.next_index == 2
        assert any("torn tail" in n for n in reader.verify())
    with caplog.at_level(logging.WARNING, logger="engine.applog"):
        with AppendLog.open(d) as log:
            assert log.recovery.total("cut", "records") == 1
            assert log.recovery.total("dropped", "entries") == 1
            assert sum(a.count for a in log.recovery.of("dropped") if a.path == crcf) == 4
            assert log.recovery.total("cut", "bytes") == 16 + 9
            assert log.next_index == 2 and [r.data for r in log.scan()] == [b"payload-0", b"payload-1"]
            assert log.verify() == []
    assert "torn" in caplog.text
    assert os.path.getsize(logf) == off2
    assert os.path.getsize(idxf) == HEADER_SIZE + 2 * 24
    assert os.path.getsize(crcf) == HEADER_SIZE + 2 * 4


def test_missing_checksum_cuts_the_record(tmp_path: os.PathLike[str]) -> None:
    """A record whose .crc entry never reached the disk was never acknowledged."""
    d = str(tmp_path)
    _make(d)
    _logf, _idxf, crcf = _files(d)
    os.truncate(crcf, HEADER_SIZE + 4 + 2)  # entry 1 torn, entry 2 gone
    with AppendLog.open(d) as log:
        assert log.next_index == 1 and log.recovery.total("cut", "records") == 1
        assert log.verify() == []


def test_damaged_crc_header_is_a_format_error(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d)
    _logf, _idxf, crcf = _files(d)
    _patch(crcf, 0, b"XYZ")
    with pytest.raises(CorruptFileError) as err:
        AppendLog.open(d)
    assert err.value.path == crcf and err.value.offset == 0


# -- segments without a .crc file --------------------------------------------------------
def test_segments_without_crc_still_open(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    with AppendLog.open(d, segment_bytes=16 + 4 * 25) as log:  # segments of 4 records
        for k in range(10):
            log.append(b"payload-%d" % k, time_ns=100 + k)
    for name in os.listdir(d):
        if name.endswith(".crc"):
            os.unlink(os.path.join(d, name))  # as wallaby (or an older engine) left it
    with LogReader.open(d) as reader:
        assert [r.data for r in reader.scan()] == [b"payload-%d" % k for k in range(10)]
    with AppendLog.open(d, segment_bytes=16 + 4 * 25) as log:
        # The newest segment (records 8, 9) has no .crc: sealed, a new one starts.
        assert [s.first_index for s in log.segments()] == [0, 4, 8, 10]
        assert log.append(b"payload-10", time_ns=200) == 10
        notes = log.verify()
        assert sum("no .crc file" in n for n in notes) == 3
        assert [r.data for r in log.scan()] == [b"payload-%d" % k for k in range(11)]
    assert os.path.exists(os.path.join(d, segment_name(10, ".crc")))
    assert not os.path.exists(os.path.join(d, segment_name(8, ".crc")))
    assert str(HANDLER.summarize(FS, os.path.join(d, segment_name(0, ".log")))["checksums (.crc)"]).startswith("no")


def test_empty_segment_without_crc_gets_one(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    AppendLog.open(d).close()
    _logf, _idxf, crcf = _files(d)
    os.unlink(crcf)  # a crash between creating the log and the .crc file
    with AppendLog.open(d) as log:
        assert log.append(b"x", time_ns=5) == 0
        assert log.verify() == []
    with open(crcf, "rb") as f:
        assert len(f.read()) == HEADER_SIZE + 4


def test_segment_without_crc_keeps_the_weaker_rule(tmp_path: os.PathLike[str]) -> None:
    """Documented limitation: without a .crc file, a record whose header is intact
    but whose data is torn cannot be told from a written one."""
    d = str(tmp_path)
    _make(d)
    logf, _idxf, crcf = _files(d)
    os.unlink(crcf)
    _patch(logf, _offsets(d)[2] + 16, b"\0\0\0")
    with AppendLog.open(d) as log:
        assert log.get(2).data == b"\0\0\0load-2"


def test_deletion_removes_crc_files(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    with AppendLog.open(d, ttl_ns=10, segment_bytes=16 + 4 * 25) as log:
        for k in range(13):
            log.append(b"payload-%d" % k, time_ns=100 + k)
        log.truncate_before(5)
        assert log.expire(now_ns=10**6) > 0
        bases = {s.first_index for s in log.segments()}
    crcs = {int(n[:20]) for n in os.listdir(d) if n.endswith(".crc")}
    logs = {int(n[:20]) for n in os.listdir(d) if n.endswith(".log")}
    assert crcs == logs == bases
