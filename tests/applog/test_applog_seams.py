"""Seams between the append log's writer and its readers (issue 28, item 5).

* A :class:`LogReader` that lists, opens and checks segments while the writer
  deletes the oldest ones (``truncate_before``, ``expire``: oldest first, each log
  before its index and ``.crc`` file) sees a healthy log: it drops what was
  deleted, never reports it as damage.  The interleavings are made exact here: a
  file system hook runs the writer's ``truncate_before`` at the moment the reader
  opens a chosen file (the races a reader in another process met, 22 times in
  1,539 scans, as CorruptFileError).
* A segment file whose name is listed but that opens nothing (a dangling symbolic
  link) is damage, never a deleted segment: the reader and ``AppendLog.open``
  raise CorruptFileError naming it, and never show a log with records missing as
  a clean one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from engine.applog import AppendLog, LogReader
from engine.applog.segment import crc_path, idx_path, log_path
from engine.errors import CorruptFileError
from engine.fs import FileHandle, OpenMode
from engine.fs.osfs import OsFileSystem

RECORD = b"r" * 40  # 56 bytes a record: three records a segment below
SEGMENT_BYTES = 16 + 3 * 56


class HookedFS(OsFileSystem):
    """The real file system; ``before_open[name]()`` runs (once) just before a
    file of that name is opened: the writer acting between two of the reader's
    steps."""

    def __init__(self) -> None:
        self.before_open: dict[str, Callable[[], object]] = {}

    def open(self, path: str, mode: OpenMode | str = OpenMode.READ) -> FileHandle:
        hook = self.before_open.pop(os.path.basename(path), None)
        if hook is not None:
            hook()
        return super().open(path, mode)


def _fill(log: AppendLog, segments: int) -> None:
    """Append until the log has ``segments`` segments (the newest holding one record)."""
    while len(log.segments()) < segments:
        log.append(RECORD)


@contextmanager
def _writer_and_reader(tmp_path: os.PathLike[str]) -> Iterator[tuple[str, HookedFS, AppendLog, LogReader]]:
    """A writer (every append written out) and a reader on the hooked file
    system that knows the log's first segment, holding one record."""
    d = os.path.join(str(tmp_path), "log")
    fs = HookedFS()
    with AppendLog.open(d, sync="never", segment_bytes=SEGMENT_BYTES, buffer_bytes=0) as log:
        log.append(RECORD)
        with LogReader.open(d, fs=fs) as reader:
            assert reader.next_index == 1
            yield d, fs, log, reader


def _bases(log: AppendLog) -> list[int]:
    return [s.first_index for s in log.segments()]


def _reads_from(reader: LogReader, first: int, end: int) -> None:
    """The reader shows exactly records first..end-1, whole, and nothing is reported."""
    assert (reader.first_index, reader.next_index) == (first, end)
    assert [r.index for r in reader.scan(first)] == list(range(first, end))
    assert all(r.data == RECORD for r in reader.scan(first))
    assert not reader.recovery.repaired and reader.verify() == []


def test_a_segment_deleted_between_its_log_and_its_index_is_not_damage(tmp_path: os.PathLike[str]) -> None:
    """The reader knows segment A (then the newest); the writer rolls to B and C.
    The reader lists A, B, C and opens B's log; before it opens B's index the
    writer truncates before C (A and B deleted, logs first).  B's index is then
    missing, after A (known, checked) in the listing: once "expected the index of
    a sealed segment, found no file"."""
    with _writer_and_reader(tmp_path) as (d, fs, log, reader):
        _fill(log, 3)
        a, b, c = _bases(log)
        fs.before_open[os.path.basename(idx_path(d, b))] = lambda: log.truncate_before(c)
        reader.refresh()
        assert not fs.before_open  # the writer did act at that moment
        _reads_from(reader, c, log.next_index)
        assert a == 0 and not os.path.exists(log_path(d, a))


def test_a_segment_deleted_between_listing_and_opening_leaves_no_gap(tmp_path: os.PathLike[str]) -> None:
    """The reader knows segment A; the writer rolls to B, C, D.  The reader lists
    them and, before it opens B's log, the writer truncates before C (A and B
    deleted).  A (known, its files open) is then followed by C in the reader's
    list: once "expected a segment starting at index <B> ... found <C>"."""
    with _writer_and_reader(tmp_path) as (d, fs, log, reader):
        _fill(log, 4)
        _a, b, c, _d = _bases(log)
        fs.before_open[os.path.basename(log_path(d, b))] = lambda: log.truncate_before(c)
        reader.refresh()
        assert not fs.before_open
        _reads_from(reader, c, log.next_index)


def test_the_newest_listed_segment_deleted_meanwhile_is_not_damage(tmp_path: os.PathLike[str]) -> None:
    """The reader knows segment A; the writer rolls to S.  The reader lists A, S
    and opens S's log; before it opens S's index the writer fills S, rolls to T
    and truncates before T (A and S deleted).  S, the newest as listed, then has
    records and no index: once "expected a 16-byte IDX header (the log ... holds
    records ...), found no file" (seen by a reader in another process)."""
    with _writer_and_reader(tmp_path) as (d, fs, log, reader):
        _fill(log, 2)
        _a, s = _bases(log)

        def roll_and_truncate() -> None:
            _fill(log, 3)
            log.truncate_before(_bases(log)[-1])

        fs.before_open[os.path.basename(idx_path(d, s))] = roll_and_truncate
        reader.refresh()
        assert not fs.before_open
        t = _bases(log)[0]
        assert reader.first_index == t and not reader.recovery.repaired
        reader.refresh()
        _reads_from(reader, t, log.next_index)


def test_expire_while_the_reader_opens_is_not_damage(tmp_path: os.PathLike[str]) -> None:
    """The same with ``expire`` deleting the segments (by time, oldest first)."""
    d = os.path.join(str(tmp_path), "log")
    fs = HookedFS()
    t = 10**18
    with AppendLog.open(d, sync="never", segment_bytes=SEGMENT_BYTES, buffer_bytes=0, ttl=60) as log:
        log.append(RECORD, time_ns=t)
        with LogReader.open(d, fs=fs) as reader:
            assert reader.next_index == 1
            while len(log.segments()) < 4:
                log.append(RECORD, time_ns=t)
            log.append(RECORD, time_ns=t + 10**12)  # the newest segment expires later
            _a, b, _c, newest = _bases(log)
            fs.before_open[os.path.basename(log_path(d, b))] = lambda: log.expire(now_ns=t + 61 * 10**9)
            reader.refresh()
            assert not fs.before_open
            assert reader.first_index == newest and [r.index for r in reader.scan()] == list(
                range(newest, log.next_index)
            )


def test_a_missing_index_of_a_listed_sealed_segment_is_still_damage(tmp_path: os.PathLike[str]) -> None:
    """What the reader tells from a deletion: a sealed segment whose log is still
    listed but whose index is gone is damage (CorruptFileError naming the index)."""
    d = os.path.join(str(tmp_path), "log")
    with AppendLog.open(d, sync="never", segment_bytes=SEGMENT_BYTES, buffer_bytes=0) as log:
        _fill(log, 3)
        a, b, _c = _bases(log)
    os.unlink(idx_path(d, b))
    with pytest.raises(CorruptFileError) as err:
        LogReader.open(d)
    assert err.value.path == idx_path(d, b)
    assert a == 0


@pytest.mark.parametrize("which", [log_path, idx_path, crc_path])
@pytest.mark.parametrize("oldest", [True, False])
def test_a_dangling_symlink_for_a_segment_file_is_damage(
    tmp_path: os.PathLike[str], which: Callable[[str, int], str], oldest: bool
) -> None:
    """A segment file replaced by a dangling symbolic link: the reader raises
    CorruptFileError naming it (once: it showed the log from the next segment on
    with "recovery clean"), and so does AppendLog.open (once: a bare
    FileNotFoundError), which changes nothing."""
    d = os.path.join(str(tmp_path), "log")
    with AppendLog.open(d, sync="never", segment_bytes=SEGMENT_BYTES, buffer_bytes=0) as log:
        _fill(log, 3)
        bases = _bases(log)
    path = which(d, bases[0] if oldest else bases[1])
    os.unlink(path)
    os.symlink(os.path.join(str(tmp_path), "gone"), path)
    before = sorted(os.listdir(d))
    with pytest.raises(CorruptFileError) as err:
        LogReader.open(d)
    assert err.value.path == path and "dangling symbolic link" in str(err.value)
    with pytest.raises(CorruptFileError) as err:
        AppendLog.open(d)
    assert err.value.path == path and "dangling symbolic link" in str(err.value)
    assert sorted(os.listdir(d)) == before and not os.path.exists(os.path.join(str(tmp_path), "gone"))
