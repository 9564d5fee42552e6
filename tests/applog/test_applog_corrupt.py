"""Bad input: foreign files, wrong versions, damage in the middle, torn tails."""

from __future__ import annotations

import logging
import os

import pytest

from engine.applog import AppendLog, LogReader
from engine.applog.codec import entry_offset, segment_name
from engine.applog.handler import HANDLER
from engine.errors import CorruptFileError, FormatError
from engine.fs import default_fs

FS = default_fs()


def _make(path: str, n: int = 6, segment_bytes: int = 1 << 20) -> None:
    with AppendLog.open(path, segment_bytes=segment_bytes) as log:
        for k in range(n):
            log.append(b"payload-%d" % k, time_ns=100 + k)


def _patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_foreign_log_file_is_a_format_error(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    with open(os.path.join(d, segment_name(0, ".log")), "wb") as f:
        f.write(bytes.fromhex("27642603") + b"\x00" * 40)  # a kestrel journal
    with pytest.raises(FormatError) as err:
        AppendLog.open(d)
    assert err.value.path.endswith(segment_name(0, ".log")) and err.value.offset == 0
    with pytest.raises(FormatError):
        LogReader.open(d)


def test_wrong_version_is_a_format_error(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d)
    _patch(os.path.join(d, segment_name(0, ".idx")), 3, b"\x02")
    with pytest.raises(FormatError, match="version 1"):
        AppendLog.open(d)


def test_index_disagreeing_in_the_middle_is_corruption(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d)
    idx = os.path.join(d, segment_name(0, ".idx"))
    _patch(idx, entry_offset(2) + 16, (999).to_bytes(8, "little"))  # entry 2's offset
    with pytest.raises(CorruptFileError) as err:
        AppendLog.open(d)
    assert err.value.path == idx and err.value.offset == entry_offset(2)
    with LogReader.open(d) as reader:
        with pytest.raises(CorruptFileError):
            reader.get(2)
        assert reader.get(1).data == b"payload-1"
        with pytest.raises(CorruptFileError):
            reader.verify()
    with pytest.raises(CorruptFileError):
        HANDLER.verify(FS, d)


def test_log_damaged_in_the_middle_is_corruption(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d)
    logf = os.path.join(d, segment_name(0, ".log"))
    with open(os.path.join(d, segment_name(0, ".idx")), "rb") as f:
        raw = f.read()
    off3 = int.from_bytes(raw[entry_offset(3) + 16 : entry_offset(3) + 24], "little")
    _patch(logf, off3 + 8, b"\xff" * 8)  # record 3's time
    with pytest.raises(CorruptFileError) as err:
        AppendLog.open(d)
    # The record no longer matches its checksum and valid records follow it: the
    # log is damaged at record 3 (before .crc files, the index entry was blamed).
    assert err.value.path == logf and err.value.offset == off3


def test_sealed_segment_damage_found_by_verify(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d, n=12, segment_bytes=16 + 4 * 25)  # segments of 4 records
    idx0 = os.path.join(d, segment_name(0, ".idx"))
    _patch(idx0, entry_offset(1), (101 + 1000).to_bytes(8, "little"))  # entry 1's time
    with AppendLog.open(d) as log, pytest.raises(CorruptFileError) as err:
        log.verify()
    assert err.value.path == idx0


def test_gap_between_segments_is_corruption(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d, n=12, segment_bytes=16 + 4 * 25)
    os.unlink(os.path.join(d, segment_name(4, ".log")))
    os.unlink(os.path.join(d, segment_name(4, ".idx")))
    with pytest.raises(CorruptFileError, match="starting at index 4"):
        AppendLog.open(d)


def test_torn_tail_is_cut_and_reported(tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture) -> None:
    d = str(tmp_path)
    _make(d)
    logf = os.path.join(d, segment_name(0, ".log"))
    size = os.path.getsize(logf)
    with open(logf, "ab") as f:
        f.write(b"\x07\x00\x00\x00\x00\x00\x00\x00\x10\x27\x00\x00\x00\x00\x00\x00ab")  # 2 of 7 bytes
    with caplog.at_level(logging.WARNING, logger="engine.applog"):
        log = AppendLog.open(d)
    try:
        assert log.recovery.total("cut", "bytes") == 18
        assert any("recovered" in r.message for r in caplog.records)
        assert os.path.getsize(logf) == size and log.next_index == 6
        log.verify()
    finally:
        log.close()


def test_missing_index_is_rebuilt(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d, n=12, segment_bytes=16 + 4 * 25)
    for base in (0, 8):
        os.unlink(os.path.join(d, segment_name(base, ".idx")))
    with AppendLog.open(d) as log:
        assert log.recovery.total("rebuilt", "entries") == 4 + 3  # segments [0,4) and [8,11)
        assert [r.data for r in log.scan()] == [b"payload-%d" % k for k in range(12)]
        log.verify()


def test_orphan_index_is_removed(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d, n=12, segment_bytes=16 + 4 * 25)
    os.unlink(os.path.join(d, segment_name(0, ".log")))  # an interrupted deletion
    with AppendLog.open(d) as log:
        removed = sorted(os.path.basename(a.path) for a in log.recovery.of("removed"))
        assert removed == [segment_name(0, ".crc"), segment_name(0, ".idx")]
        assert log.first_index == 4
    assert not os.path.exists(os.path.join(d, segment_name(0, ".idx")))
    assert not os.path.exists(os.path.join(d, segment_name(0, ".crc")))


def test_handler_sniffs_and_handles_truncated_files(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d)
    logf = os.path.join(d, segment_name(0, ".log"))
    with open(logf, "rb") as f:
        head = f.read(64)
    assert HANDLER.sniff(FS, d, b"", True) and HANDLER.sniff(FS, logf, head, False)
    assert not HANDLER.sniff(FS, logf, b"LOG\x02", False)
    summary = HANDLER.summarize(FS, d)
    assert summary["records"] == 6 and summary["segments"] == 1
    assert HANDLER.summarize(FS, logf)["records"] == 6
    short = os.path.join(d, "short")
    os.mkdir(short)
    with open(os.path.join(short, segment_name(0, ".log")), "wb") as f:
        f.write(head[:10])
    with pytest.raises(CorruptFileError) as info:
        HANDLER.summarize(FS, os.path.join(short, segment_name(0, ".log")))
    assert info.value.offset == 10, "a truncated header is reported where the file ends"
    assert HANDLER.verify(FS, logf) == ["6 records, checksums verified"]


def test_handler_reads_through_the_file_system_it_is_given() -> None:
    """inspect/verify callbacks take the file system first: a log that exists only
    in the crash simulator is recognised, summarised and verified."""
    from stress.simfs import SimFS

    sim = SimFS()
    with AppendLog.open("/db/log", fs=sim) as log:
        for k in range(3):
            log.append(b"r%d" % k, time_ns=10 + k)
    logf = "/db/log/" + segment_name(0, ".log")
    with sim.open(logf) as h:
        head = h.read_at(0, 64)
    assert HANDLER.sniff(sim, "/db/log", b"", True) and HANDLER.sniff(sim, logf, head, False)
    assert HANDLER.summarize(sim, "/db/log")["records"] == 3
    assert HANDLER.summarize(sim, logf)["records"] == 3
    assert HANDLER.verify(sim, logf) == ["3 records, checksums verified"]
    assert HANDLER.verify(sim, "/db/log") == []
