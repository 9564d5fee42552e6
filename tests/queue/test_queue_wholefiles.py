"""Whole-file damage is reported, never silent (docs/formats/queue.md, "Whole
files"): a deleted reader checkpoint, a deleted, emptied or cut newest writer
file, a symbolic link where a queue's file belongs.  ``verify()`` raises and
``engine verify`` says so (exit 2, "damaged", as for every store: docs/index.md);
an open repairs what it can without losing anything and reports it in
``recovery``, or refuses."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.errors import CorruptFileError
from engine.fs import default_fs
from engine.queue import Queue, repair, verify_queue

NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0}


def queue_with_readers(d: Path, items: int = 60, journal_size: int = 1024) -> list[str]:
    """Queue "jobs" with readers a and b at the start, ``items`` items in several
    writer files; returns the writer files, oldest first."""
    with Queue.open(str(d), "jobs", journal_size=journal_size, **NOCKPT) as q:
        q.reader("a")
        q.reader("b")
        q.put_many([b"item-%02d" % i for i in range(items)])
        files = q.journal_files
    assert len(files) >= 2
    return files


def drain(reader: Any) -> list[bytes]:
    got = []
    while (item := reader.get(timeout=0)) is not None:
        got.append(item.data)
        reader.confirm(item.id)
    return got


def verify_exit(d: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["verify", str(d)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_a_deleted_reader_checkpoint_is_reported_and_its_items_delivered_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queue_with_readers(tmp_path)
    os.unlink(tmp_path / "jobs.read.b")
    code, out = verify_exit(tmp_path, capsys)
    assert code == 2 and "jobs.read.b" in out and "checkpoint" in out
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        (reset,) = q.recovery.of("reset")
        assert reset.path.endswith("jobs.read.b") and "delivered again" in reset.detail
        assert drain(q.reader("b")) == [b"item-%02d" % i for i in range(60)]  # all 60, not 0
    assert main(["verify", str(tmp_path)]) == 0


def test_a_deleted_reader_checkpoint_found_by_a_remote_reader(tmp_path: Path) -> None:
    queue_with_readers(tmp_path)
    os.unlink(tmp_path / "jobs.read.b")
    r = Queue.open_reader(str(tmp_path), "jobs", "b", **NOCKPT)
    assert [a.kind for a in r.recovery.actions] == ["reset"]
    assert len(drain(r)) == 60
    r.close()


def test_nothing_is_retired_while_a_reader_checkpoint_is_missing(tmp_path: Path) -> None:
    queue_with_readers(tmp_path)
    os.unlink(tmp_path / "jobs.read.b")
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    os.unlink(tmp_path / "jobs.read.b")  # (the open restored it: gone again, with q open)
    a = q.reader("a")
    drain(a)
    q.checkpoint()
    assert q.deleted_files == []  # b's items may all be needed
    q.close()


def test_a_deleted_newest_writer_file_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = queue_with_readers(tmp_path)
    os.unlink(files[-1])
    code, out = verify_exit(tmp_path, capsys)
    assert code == 2 and os.path.basename(files[-1]) in out and "deleted" in out
    with pytest.raises(CorruptFileError, match="deleted"):
        verify_queue(default_fs(), str(tmp_path), "jobs")
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        lost = [a for a in q.recovery.of("reset") if a.unit == "files"]
        assert lost and lost[0].path == files[-1] and "deleted" in lost[0].detail
        got = drain(q.reader("a"))
        assert 0 < len(got) < 60  # what is left, and the loss was said
    assert main(["verify", str(tmp_path)]) == 0  # said once; the queue goes on


def test_an_emptied_newest_writer_file_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = queue_with_readers(tmp_path)
    with open(files[-1], "r+b") as f:
        f.truncate(0)
    code, out = verify_exit(tmp_path, capsys)
    assert code == 2 and "emptied" in out
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        assert any("emptied" in a.detail for a in q.recovery.actions)


def test_a_newest_writer_file_cut_after_the_close_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = queue_with_readers(tmp_path)
    with open(files[-1], "r+b") as f:
        f.truncate(os.path.getsize(files[-1]) // 2)
    code, out = verify_exit(tmp_path, capsys)
    assert code == 2 and "cut short after the queue was closed" in out
    report = repair(default_fs(), str(tmp_path), "jobs")
    assert report.repaired  # the loss accepted explicitly
    assert main(["verify", str(tmp_path)]) == 0


@pytest.mark.parametrize("which", ["reader", "writer", "dangling"])
def test_a_symbolic_link_where_a_queue_file_belongs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    files = queue_with_readers(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = str(tmp_path / "jobs.read.b") if which == "reader" else files[0]
    moved = str(elsewhere / os.path.basename(victim))
    os.rename(victim, moved)
    os.symlink(moved if which != "dangling" else str(elsewhere / "gone"), victim)
    code, out = verify_exit(tmp_path, capsys)
    assert code == 2 and "symbolic link" in out
    with pytest.raises(CorruptFileError, match="symbolic link"):
        Queue.open(str(tmp_path), "jobs", **NOCKPT)
    with pytest.raises(CorruptFileError, match="symbolic link"):
        Queue.open_reader(str(tmp_path), "jobs", "a", **NOCKPT)


@pytest.mark.parametrize("cut_to", [0, 4, 10, 12])
def test_a_newest_file_cut_inside_its_header_is_reported_and_the_queue_goes_on(tmp_path: Path, cut_to: int) -> None:
    """The stress suite's finding: the newest writer file truncated inside its
    13-byte header (magic and EMPTY_CHECK) made the next open fail with
    ``struct.error: argument out of range`` (a negative written length)."""
    d = str(tmp_path)
    with Queue.open(d, "jobs") as q:
        q.reader("r").close()
        for n in (282, 60, 53):
            q.put(b"x" * n)
    newest = max(tmp_path.glob("jobs.[0-9]*"), key=lambda p: int(p.suffix[1:]))
    os.truncate(newest, cut_to)
    with Queue.open(d, "jobs") as q:
        assert any(a.kind == "reset" and a.path == str(newest) for a in q.recovery.actions)
        xid = q.put(b"after")
        q.verify()
    reader = Queue.open_reader(d, "jobs", "r")
    item = reader.get(timeout=0)
    assert item is not None and item.id == xid and item.data == b"after"
    reader.close()
