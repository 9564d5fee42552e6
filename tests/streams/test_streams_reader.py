"""StreamJournal.open_reader / StreamReader: read-only access in the store core's
one shape (no writer lock, no repair), and the writer's open on the core."""

from __future__ import annotations

import datetime as dt
import gc
import pathlib

import pytest

from engine.errors import ClosedError, ConfigError, FormatError, LockedError
from engine.streams import StreamJournal, StreamReader, read_streams


def _journal(tmp_path: pathlib.Path) -> StreamJournal:
    return StreamJournal.open(tmp_path / "j", size=64 * 512, page_size=512, sync_delay=0)


def test_a_reader_runs_beside_the_writer_and_takes_no_lock(tmp_path: pathlib.Path) -> None:
    with _journal(tmp_path) as journal:
        with journal.open_stream("one") as s:
            s.write(b"1" * 100)
        left = journal.open_stream("left")
        left.write(b"x" * 9000)  # one record journaled, the stream still open
        journal.sync()
        with pytest.raises(LockedError, match="writer lock of the stream journal"):
            StreamJournal.open(tmp_path / "j", lock_wait=0)
        with StreamJournal.open_reader(tmp_path / "j") as reader:
            assert [(s.ident, s.status) for s in reader.streams()] == [(b"one", "complete"), (b"left", "open")]
            assert reader.stats()["streams_open"] == 1
            assert reader.verify() == ["1 stream(s) left open (not complete)"]
            with journal.open_stream("two") as s:
                s.write(b"2")
            # Each call reads what is committed now.
            assert [s.ident for s in reader.streams() if s.complete] == [b"one", b"two"]
    assert [s.ident for s in read_streams(tmp_path / "j")] == [b"one", b"two", b"left"]


def test_a_reader_refuses_what_is_not_a_journal(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such stream journal"):
        StreamReader.open(tmp_path / "nothing")
    (tmp_path / "foreign").write_bytes(b"not a journal at all, but long enough" * 4)
    with pytest.raises(FormatError):
        StreamJournal.open_reader(tmp_path / "foreign")


def test_a_closed_reader_refuses_reads_and_closes_once(tmp_path: pathlib.Path) -> None:
    _journal(tmp_path).close()
    reader = StreamReader.open(tmp_path / "j")
    reader.close()
    reader.close()
    with pytest.raises(ClosedError):
        reader.events()


def test_a_dropped_reader_is_closed_with_a_resource_warning(tmp_path: pathlib.Path) -> None:
    _journal(tmp_path).close()
    reader = StreamReader.open(tmp_path / "j")
    with pytest.warns(ResourceWarning, match="unclosed stream journal reader"):
        del reader
        gc.collect()


def test_a_failed_write_latches_the_journal_until_reopened(tmp_path: pathlib.Path) -> None:
    journal = _journal(tmp_path)
    stream = journal.open_stream("s")
    stream.write(b"a")

    def broken() -> None:
        raise OSError(5, "Input/output error")

    handle = journal._ring.handle
    handle.fdatasync = broken  # type: ignore[method-assign]
    with pytest.raises(Exception, match="Input/output error"):
        stream.close()
    for call in (lambda: journal.open_stream("t"), journal.sync):
        with pytest.raises(Exception, match="Input/output error") as info:
            call()
        assert type(info.value).__name__ == "PoisonedError"
    journal.close()
    with _journal(tmp_path) as again:  # the lock was released; recovery decides what is on disk
        again.verify()


@pytest.mark.parametrize("sync", ["never", 0.05, "0.05", dt.timedelta(milliseconds=50), False])
def test_sync_other_than_always_is_refused_with_the_reason(tmp_path: pathlib.Path, sync: object) -> None:
    with pytest.raises(ConfigError, match=r"sync must be 'always' for a stream journal.*acknowledgement"):
        StreamJournal.open(tmp_path / "j", size=64 * 512, page_size=512, sync=sync)
    assert not (tmp_path / "j").exists() and not (tmp_path / "j.lock").exists()  # refused before anything is made
    with StreamJournal.open(tmp_path / "j", size=64 * 512, page_size=512, sync="always") as journal:
        assert str(journal.sync_policy) == "always"
