"""Damage in any segment's files: every read path returns exactly the records
written, or raises CorruptFileError naming the damaged file (issue "Zero silent
wrong answers").  Only a torn tail of the newest segment may be cut, reported."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

import pytest

from engine.applog import AppendLog, LogReader
from engine.applog.codec import crc_offset, entry_offset, segment_name
from engine.errors import CorruptFileError, EngineError

SEG = 16 + 4 * 25  # segments of 4 records of 9 bytes
N = 40  # 10 segments: 0, 4, ..., 36


def _make(path: str, n: int = N) -> list[tuple[int, int, int, bytes]]:
    with AppendLog.open(path, segment_bytes=SEG) as log:
        for k in range(n):
            log.append(b"payload-%d" % (k % 10), flags=k, time_ns=100 + k)
        return [tuple(r) for r in log.scan()]  # type: ignore[misc]


def _patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _flip(path: str, offset: int) -> None:
    with open(path, "rb") as f:
        f.seek(offset)
        b = f.read(1)
    _patch(path, offset, bytes([b[0] ^ 0x10]))


def _reader_scan(d: str) -> list[tuple[int, int, int, bytes]]:
    with LogReader.open(d) as reader:
        return [tuple(r) for r in reader.scan(reader.first_index, reader.next_index)]  # type: ignore[misc]


def _files(d: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = f.read()
    return out


def _off(d: str, base: int, position: int) -> int:
    with open(os.path.join(d, segment_name(base, ".idx")), "rb") as f:
        raw = f.read()
    return int.from_bytes(raw[entry_offset(position) + 16 : entry_offset(position) + 24], "little")


@pytest.mark.parametrize("suffix", [".log", ".idx", ".crc"])
def test_reader_never_cuts_a_sealed_segment_silently(tmp_path: os.PathLike[str], suffix: str) -> None:
    """The adversarial run: damage at the end of sealed segment 28 made scan()
    return the records up to it, with no error and next_index unchanged."""
    d = str(tmp_path)
    clean = _make(d)
    path = os.path.join(d, segment_name(28, suffix))
    offset = {".log": _off(d, 28, 3) + 17, ".idx": entry_offset(3) + 9, ".crc": crc_offset(3)}[suffix]
    _flip(path, offset)
    with pytest.raises(CorruptFileError) as err:
        got = _reader_scan(d)
        assert got == clean  # unreachable unless the damage is harmless
    assert segment_name(28, "") in err.value.path
    if suffix == ".idx":  # derived data: the writer rebuilds the entry from the log, and says so
        with AppendLog.open(d) as log:
            assert log.recovery.total("rebuilt", "entries") == 1
            assert [tuple(r) for r in log.scan()] == clean
        return
    with pytest.raises(CorruptFileError) as err:
        AppendLog.open(d).close()
    assert segment_name(28, "") in err.value.path


def test_writer_open_names_the_damaged_sealed_segment_and_changes_nothing(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d)
    logf = os.path.join(d, segment_name(28, ".log"))
    off = _off(d, 28, 3)
    _flip(logf, off + 20)  # the sealed segment's last record
    before = _files(d)
    with pytest.raises(CorruptFileError) as err:
        AppendLog.open(d)
    assert err.value.path == logf and err.value.offset == off
    assert _files(d) == before  # nothing "repaired" away


def test_sealed_log_cut_at_a_record_boundary_is_corruption(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d)
    logf = os.path.join(d, segment_name(8, ".log"))
    off = _off(d, 8, 2)
    os.truncate(logf, off)
    for opener in (AppendLog.open, _reader_scan):
        with pytest.raises(CorruptFileError) as err:
            opener(d)
        assert err.value.path == logf and err.value.offset == off


def test_damage_inside_a_sealed_segment_fails_every_read(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    clean = _make(d)
    logf = os.path.join(d, segment_name(12, ".log"))
    off = _off(d, 12, 1)
    _flip(logf, off + 18)  # record 13's data; first and last records intact
    with AppendLog.open(d) as log:  # the cheap check passes: the reads must catch it
        assert log.get(12) == clean[12]
        with pytest.raises(CorruptFileError) as err:
            log.get(13)
        assert err.value.path == logf and err.value.offset == off
        for _ in range(3):  # uncached, then cached
            with pytest.raises(CorruptFileError):
                log.get(13)
        with pytest.raises(CorruptFileError):
            list(log.scan())
        with pytest.raises(CorruptFileError):
            list(log.between(start_ns=0, end_ns=1 << 40))
        with pytest.raises(CorruptFileError):
            log.verify()
    with LogReader.open(d) as reader:
        with pytest.raises(CorruptFileError):
            reader.get(13)
        with pytest.raises(CorruptFileError):
            list(reader.scan())


def test_crc_entry_damage_names_both_files(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d)
    crcf = os.path.join(d, segment_name(12, ".crc"))
    _flip(crcf, crc_offset(1) + 2)
    with LogReader.open(d) as reader, pytest.raises(CorruptFileError) as err:
        reader.get(13)
    assert err.value.path == os.path.join(d, segment_name(12, ".log")) and crcf in str(err.value)


def test_damaged_index_time_never_moves_between(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    clean = _make(d)
    idxf = os.path.join(d, segment_name(20, ".idx"))
    _patch(idxf, entry_offset(1), (10**6).to_bytes(8, "little"))  # record 21's time in the index
    with LogReader.open(d) as reader:
        for t0 in range(100, 100 + N):
            try:
                got = [tuple(r) for r in reader.between(start_ns=t0, end_ns=t0 + 5)]
            except CorruptFileError as exc:
                assert exc.path == idxf and exc.offset == entry_offset(1)
                continue
            assert got == [r for r in clean if t0 <= r[1] < t0 + 5]


def test_reader_reports_a_torn_tail_of_the_newest_segment(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    d = str(tmp_path)
    clean = _make(d, n=N + 2)  # newest segment 40: records 40, 41
    logf = os.path.join(d, segment_name(40, ".log"))
    os.truncate(logf, _off(d, 40, 1) + 20)  # record 41 torn
    with caplog.at_level(logging.WARNING, logger="engine.applog"):
        with LogReader.open(d) as reader:
            assert [tuple(r) for r in reader.scan()] == clean[:41]
            assert reader.recovery.total("dropped", "entries") == 1
    assert any("41" in r.getMessage() for r in caplog.records)
    with AppendLog.open(d) as log:  # the writer cuts it and says so too
        assert log.recovery.repaired and log.next_index == 41


def test_missing_sealed_index_is_an_error_for_the_reader_and_rebuilt_by_the_writer(
    tmp_path: os.PathLike[str],
) -> None:
    d = str(tmp_path)
    clean = _make(d)
    os.unlink(os.path.join(d, segment_name(16, ".idx")))
    with pytest.raises(CorruptFileError):
        _reader_scan(d)
    with AppendLog.open(d) as log:
        assert log.recovery.total("rebuilt", "entries") == 4
        assert [tuple(r) for r in log.scan()] == clean


def _read_all(d: str, writer: bool) -> list[tuple[int, int, int, bytes]] | str:
    try:
        if writer:
            with AppendLog.open(d) as log:
                got = [tuple(r) for r in log.scan(log.first_index)]
                if log.recovery.repaired:
                    return "reported"
                return got  # type: ignore[return-value]
        return _reader_scan(d)
    except CorruptFileError:
        return "error"


@pytest.mark.parametrize("suffix", [".log", ".idx", ".crc"])
def test_every_bit_flip_in_a_sealed_segment_is_caught_or_harmless(tmp_path: os.PathLike[str], suffix: str) -> None:
    """Flip one bit of every byte of a sealed segment's file: the reader and the
    writer return exactly the records written, raise, or (writer) report a repair."""
    src = os.path.join(str(tmp_path), "src")
    os.mkdir(src)
    clean = _make(src, n=16)
    name = segment_name(4, suffix)
    size = os.path.getsize(os.path.join(src, name))
    for offset in range(size):
        for writer in (False, True):
            d = os.path.join(str(tmp_path), f"v{offset}{writer}")
            shutil.copytree(src, d)
            _flip(os.path.join(d, name), offset)
            got = _read_all(d, writer)
            assert got in ("error", "reported") or got == clean, (suffix, offset, writer)
            shutil.rmtree(d)


def test_cli_on_a_symlink_loop_is_one_line_without_traceback(tmp_path: os.PathLike[str]) -> None:
    d = str(tmp_path)
    _make(d, n=8)
    idx = os.path.join(d, segment_name(0, ".idx"))
    os.unlink(idx)
    os.symlink(segment_name(0, ".idx"), idx)
    for argv in (["stats", d], ["tail", d], ["get", d, "1"], ["between", d, "0", "999"], ["expire", d]):
        out = subprocess.run([sys.executable, "-m", "engine", "log", *argv], capture_output=True, text=True)
        assert out.returncode == 1, (argv, out.stderr)
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def _read_paths(d: str) -> dict[str, object]:
    """What every LogReader read path returns (next_index, scan, get, between,
    index_at_time, segments), and the reader's recovery report."""
    with LogReader.open(d) as reader:
        out: dict[str, object] = {"next": reader.next_index}
        out["scan"] = [tuple(r) for r in reader.scan(reader.first_index, reader.next_index)]
        got = []
        for i in range(N):
            try:
                got.append(tuple(reader.get(i)))
            except IndexError:
                break
        out["get"] = got
        out["between"] = [tuple(r) for r in reader.between(start_ns=0, end_ns=1 << 40)]
        out["at_time"] = [reader.index_at_time(time_ns=100 + k) for k in range(0, N, 7)]
        out["segments"] = len(reader.segments())
        out["repaired"] = reader.recovery.repaired
    return out


@pytest.mark.parametrize("base", [36, 28], ids=["newest", "sealed"])
@pytest.mark.parametrize("length", range(0, 16 + 3))
def test_index_cut_below_its_header_is_never_silent(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture, base: int, length: int
) -> None:
    """The stress run (seed 2026112417): the newest segment's .idx cut to 14 or 15
    bytes made LogReader show the log without that segment's records, no error,
    no warning, while AppendLog.open rebuilds the index.  Cut to every length up
    to the header plus two: each read path returns exactly the records written,
    raises CorruptFileError naming the index, or (the newest segment only, header
    whole, no writer live) shows every record through the index rebuilt in memory
    as the writer's open rebuilds it on disk, and reports it, with a warning (it
    showed the prefix before that segment: records the writer shows, missing)."""
    d = str(tmp_path)
    clean = _make(d)
    ipath = os.path.join(d, segment_name(base, ".idx"))
    os.truncate(ipath, length)
    with caplog.at_level(logging.WARNING, logger="engine.applog"):
        try:
            got = _read_paths(d)
        except CorruptFileError as exc:
            assert exc.path == ipath
            assert exc.offset == (min(length, 16) if length < 16 or base == 36 else 16)
            got = None
    if got is not None:
        assert base == 36 and length >= 16, "only a newest segment's whole header may be read on"
        assert got["scan"] == got["get"] == got["between"] == clean
        assert got["next"] == len(clean) and got["repaired"]
        assert any(segment_name(base, ".idx") in r.getMessage() for r in caplog.records)
    with AppendLog.open(d) as log:  # the writer rebuilds the index from the log
        assert [tuple(r) for r in log.scan()] == clean
    assert _read_paths(d)["scan"] == clean


def test_missing_newest_index_with_records_is_an_error_for_the_reader(tmp_path: os.PathLike[str]) -> None:
    """The newest segment's index deleted while its log holds records: no live
    writer leaves that (it creates the index before any record), so the reader
    names the missing index rather than showing the log without them."""
    d = str(tmp_path)
    clean = _make(d)
    ipath = os.path.join(d, segment_name(36, ".idx"))
    os.remove(ipath)
    with pytest.raises(CorruptFileError) as err:
        _read_paths(d)
    assert err.value.path == ipath
    with AppendLog.open(d) as log:
        assert [tuple(r) for r in log.scan()] == clean


def test_reader_beside_a_live_writer_does_not_report_unindexed_records(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A record in the newest log without its entry is what a live writer shows
    between writing the record and its entry: while the writer holds its lock the
    reader shows the indexed records only, and reports nothing."""
    d = str(tmp_path)
    clean = _make(d)
    with AppendLog.open(d) as log:
        ipath = os.path.join(d, segment_name(36, ".idx"))
        os.truncate(ipath, entry_offset(2))  # as if entries 38 and 39 were not written yet
        with caplog.at_level(logging.WARNING, logger="engine.applog"), LogReader.open(d) as reader:
            assert [tuple(r) for r in reader.scan(0, reader.next_index)] == clean[:38]
            assert not reader.recovery.repaired
        assert not caplog.records
        assert log.next_index == N


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open descriptors through /proc")
def test_a_reader_refused_by_damage_leaks_no_handles(tmp_path: os.PathLike[str]) -> None:
    """LogReader.open raising CorruptFileError closes every segment it opened (the
    stress run ran out of file descriptors reading damaged copies)."""
    d = str(tmp_path)
    _make(d)
    os.truncate(os.path.join(d, segment_name(36, ".idx")), 15)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(CorruptFileError):
            LogReader.open(d)
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("garbage", [b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80"])
def test_garbage_offsets_in_an_index_are_typed_errors_not_huge_reads(tmp_path, garbage) -> None:  # type: ignore[no-untyped-def]
    """Found by the stress suite (seed 20261124): 4 garbage bytes in the newest
    segment's first index entry made LogReader.scan allocate the offset's size
    (MemoryError).  Index entries carry no checksum; they are bounded by the log."""
    import glob

    src = tmp_path / "db"
    with AppendLog.open(str(src), segment_bytes=4096, sync="never") as log:
        for _ in range(200):
            log.append(bytes(50))
    for target in sorted(glob.glob(str(src / "*.idx"))):
        for pos in range(16, 60, 3):
            copy = tmp_path / "copy"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(src, copy)
            with open(copy / os.path.basename(target), "r+b") as f:
                f.seek(pos)
                f.write(garbage)
            try:
                with LogReader.open(str(copy)) as reader:
                    records = list(reader.scan(reader.first_index, reader.next_index))
                assert len(records) == 200 and all(r.data == bytes(50) for r in records)
            except EngineError:
                pass



@pytest.mark.parametrize(
    "damage",
    ["cut to the header", "cut mid-entry", "last entry zeroed", "an entry's time flipped", "last entry flipped"],
)
def test_reader_shows_what_the_writer_shows_when_the_newest_index_is_damaged(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """The stress run's "damage" attack: the newest segment's .idx damaged (cut,
    zeroed, flipped) while its log and checksums are whole, no writer live.
    AppendLog.open rebuilds the index from the log; LogReader showed fewer records
    (a prefix, with a warning).  Now the reader reconciles the index with the log
    as the writer's recovery does, in memory: the same records, and no file
    changed."""
    d = str(tmp_path)
    clean = _make(d, n=N + 3)  # newest segment 40: records 40, 41, 42
    ipath = os.path.join(d, segment_name(40, ".idx"))
    size = os.path.getsize(ipath)
    if damage == "cut to the header":
        os.truncate(ipath, 16)
    elif damage == "cut mid-entry":
        os.truncate(ipath, entry_offset(1) + 5)
    elif damage == "last entry zeroed":
        _patch(ipath, size - 24, bytes(24))
    elif damage == "an entry's time flipped":
        _patch(ipath, entry_offset(2), (1 << 40).to_bytes(8, "little"))
    else:
        _patch(ipath, size - 10, b"\xff" * 10)
    before = _files(d)
    with caplog.at_level(logging.WARNING, logger="engine.applog"):
        got = _read_paths(d)
    assert got["scan"] == got["between"] == clean and got["get"] == clean[:N]
    assert got["next"] == len(clean) and got["repaired"]
    assert any(segment_name(40, ".idx") in r.getMessage() for r in caplog.records)
    assert _files(d) == before  # a reader never writes
    with AppendLog.open(d) as log:
        assert [tuple(r) for r in log.scan()] == clean


def test_a_reconciled_reader_follows_the_writer_that_repairs_the_index(tmp_path: os.PathLike[str]) -> None:
    """A reader showing a damaged newest segment through its in-memory index reads
    the files again once a writer has opened (repairing them) and appended past it."""
    d = str(tmp_path)
    clean = _make(d, n=N + 3)
    os.truncate(os.path.join(d, segment_name(40, ".idx")), 16)
    with LogReader.open(d) as reader:
        assert [tuple(r) for r in reader.scan()] == clean
        with AppendLog.open(d, segment_bytes=SEG) as log:
            for k in range(N + 3, N + 12):
                log.append(b"payload-%d" % (k % 10), flags=k, time_ns=100 + k)
            everything = [tuple(r) for r in log.scan()]
        reader.refresh()
        assert len(everything) == N + 12 and reader.next_index == N + 12
        assert [tuple(r) for r in reader.scan()] == everything
        assert [tuple(reader.get(i)) for i in range(N + 12)] == everything
