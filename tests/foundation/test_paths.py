"""Every store's ``open()`` takes ``str`` or any ``os.PathLike``; anything else is
a ``TypeError`` in the user's terms."""

from __future__ import annotations

from pathlib import Path

import pytest

import engine
from engine.applog import LogReader
from engine.fs import as_path
from engine.streams import read_streams

OPENERS = {
    "Queue": lambda p: engine.Queue.open(p / "queues", "jobs"),
    "PageStore": lambda p: engine.PageStore.open(p / "pages.db"),
    "AppendLog": lambda p: engine.AppendLog.open(p / "log"),
    "EventJournal": lambda p: engine.EventJournal.open(p / "events"),
    "StreamJournal": lambda p: engine.StreamJournal.open(p / "streams.jd", size=1 << 20),
    "KV": lambda p: engine.KV.open(p / "kv.db"),
}


@pytest.mark.parametrize("store", sorted(OPENERS))
def test_open_takes_a_pathlib_path(tmp_path: Path, store: str) -> None:
    with OPENERS[store](tmp_path):
        pass
    with OPENERS[store](tmp_path):  # and reopens
        pass


def test_readers_take_a_pathlib_path(tmp_path: Path) -> None:
    with engine.AppendLog.open(tmp_path / "log") as log:
        log.append(b"x")
    with LogReader.open(tmp_path / "log") as reader:
        assert reader.next_index - reader.first_index == 1
    with engine.StreamJournal.open(tmp_path / "s.jd", size=1 << 20) as journal:
        with journal.open_stream("a") as stream:
            stream.write(b"data")
    assert [s.data for s in read_streams(tmp_path / "s.jd")] == [b"data"]
    with engine.EventJournal.open(tmp_path / "ev") as journal:
        journal.write("id", [(1, b"e")])
    reader = engine.EventJournal.open_reader(tmp_path / "ev")
    assert [e.payload for e in reader.replay("id")] == [b"e"]
    reader.close()
    q = engine.Queue.open(tmp_path / "q", "jobs")
    q.put(b"x")
    q.close()
    r = engine.Queue.open_reader(tmp_path / "q", "jobs")
    r.close()


@pytest.mark.parametrize("bad", [3, None, b"bytes/path"])
def test_anything_else_is_a_type_error_naming_the_argument(bad: object) -> None:
    with pytest.raises(TypeError, match=r"path must be a str or an os\.PathLike"):
        engine.PageStore.open(bad)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="directory must be a str"):
        engine.AppendLog.open(bad)  # type: ignore[arg-type]
    assert as_path(Path("a") / "b") == "a/b"
