"""The append log on the store core (issue 28): one open sequence, the core's
failure latch and sync driver, close once, and read-only access in the one shape
every store has (``Store.open_reader`` = ``Reader.open``, the event journal's
option names)."""

from __future__ import annotations

import errno
import inspect
import os
import time

import pytest

from engine.applog import AppendLog, LogReader
from engine.applog.segment import log_path
from engine.errors import ClosedError, CorruptFileError, PoisonedError
from engine.events import EventJournal
from engine.events.reader import EventReader
from engine.fs import make_dirs
from stress.faults import FaultyFS
from stress.simfs import SimFS

RECORD = b"r" * 40
SEGMENT_BYTES = 16 + 3 * 56  # three records a segment


def _options(function: object) -> dict[str, object]:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()  # type: ignore[arg-type]
            if p.kind is p.KEYWORD_ONLY}


def test_read_only_access_has_the_event_journals_shape(tmp_path: os.PathLike[str]) -> None:
    """``AppendLog.open_reader`` is ``LogReader.open``, with the keyword options
    of ``EventJournal.open_reader`` that apply (``readahead`` is the journal's
    own); neither takes a lock, so neither has ``lock_wait``."""
    assert _options(AppendLog.open_reader) == _options(LogReader.open) == {"serializer": None, "fs": None}
    shared = set(_options(EventJournal.open_reader)) - {"readahead"}
    assert shared == set(_options(AppendLog.open_reader))
    assert set(_options(EventReader.open)) - {"readahead"} == shared
    d = os.path.join(str(tmp_path), "log")
    with AppendLog.open(d, sync="never", buffer_bytes=0, serializer="json") as log:
        log.append({"a": 1})
        assert not log.read_only
        with AppendLog.open_reader(d, serializer="json") as reader:
            assert type(reader) is LogReader and reader.read_only
            assert [r.value for r in reader.scan()] == [{"a": 1}]
        assert reader.closed
        with pytest.raises(ClosedError, match="append log is closed"):
            reader.get(0)
        reader.close()  # once: a second close does nothing


def test_a_failed_open_releases_the_writer_lock(tmp_path: os.PathLike[str]) -> None:
    """The core's open sequence: recovery raising releases the lock and the files
    taken, so a second open meets the same damage, not LockedError."""
    d = os.path.join(str(tmp_path), "log")
    with AppendLog.open(d, sync="never", segment_bytes=SEGMENT_BYTES, buffer_bytes=0) as log:
        while len(log.segments()) < 3:
            log.append(RECORD)
        first = log.segments()[0].first_index
    path = log_path(d, first)
    os.unlink(path)
    os.symlink(os.path.join(str(tmp_path), "gone"), path)
    for _ in range(2):
        with pytest.raises(CorruptFileError):
            AppendLog.open(d)


def test_a_failed_background_sync_poisons_the_next_append() -> None:
    """``sync=<period>``: the core's driver syncs from its thread; a failed fsync
    there trips the core's latch, and the next append raises it (the fast path
    included), typed, until a reopen."""
    sim = SimFS()
    make_dirs(sim, "/db")
    ffs = FaultyFS(sim, errno=errno.EIO, kinds=("fsync",))
    log = AppendLog.open("/db", sync=0.01, buffer_bytes=0, fs=ffs)
    try:
        log.append(b"before", time_ns=1)
        ffs.fail_at = ffs.ops + 1
        log.append(b"dirty", time_ns=2)  # the next round has something to sync, and fails
        deadline = time.monotonic() + 30.0
        with pytest.raises(PoisonedError):
            while time.monotonic() < deadline:
                log.append(b"more", time_ns=3)
                time.sleep(0.005)
        with pytest.raises(PoisonedError):
            log.flush()
    finally:
        log.close()  # writes nothing more, releases the lock
    with AppendLog.open("/db", fs=sim) as again:
        again.verify()
        assert again.get(0).data == b"before"


def test_close_happens_once_and_refuses_later_use(tmp_path: os.PathLike[str]) -> None:
    d = os.path.join(str(tmp_path), "log")
    log = AppendLog.open(d, sync=0.05)
    log.append(b"x")
    log.close()
    log.close()
    assert log.closed
    for call in (lambda: log.append(b"y"), lambda: log.append(bytearray(b"y")), lambda: log.append_many([b"y"]),
                 log.flush, log.sync, lambda: log.get(0)):
        with pytest.raises(ClosedError, match="append log is closed"):
            call()
    with AppendLog.open(d, lock_wait=0) as again:  # the lock was released
        assert [r.data for r in again.scan()] == [b"x"]
