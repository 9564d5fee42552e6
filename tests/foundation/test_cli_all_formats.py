"""`engine inspect` / `engine verify` across all five formats: each store's files
are recognised, verified, and damage gets a clear message and a non-zero status."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import engine
from engine.cli import main


def make_queue(root: Path) -> Path:
    q = engine.Queue.open(str(root), "jobs")
    for i in range(5):
        q.put(b"item %d" % i)
    q.close()
    return root / next(n for n in os.listdir(root) if n.startswith("jobs.") and n[5:].isdigit())


def make_pages(root: Path) -> Path:
    store = engine.PageStore.open(str(root / "pages.db"))
    with store.transaction() as tx:
        page = tx.allocate()
        tx.write(page, 0, b"hello")
    store.close()
    return root / "pages.db"


def make_streams(root: Path) -> Path:
    path = root / "streams.jnl"
    journal = engine.StreamJournal.open(str(path), size=64 * 4096)
    s = journal.open_stream("one")
    s.write(b"x" * 5000)
    s.close()
    journal.close()
    return path


def make_applog(root: Path) -> Path:
    log = engine.AppendLog.open(str(root / "log"))
    for i in range(10):
        log.append(b"rec %d" % i)
    log.close()
    return root / "log"


def make_events(root: Path) -> Path:
    journal = engine.EventJournal.open(str(root / "events"))
    journal.write("id-1", [(1, b"a"), (2, b"b")])
    journal.close()
    return root / "events"


MAKERS: dict[str, Callable[[Path], Path]] = {
    "queue": make_queue,
    "pages": make_pages,
    "streams": make_streams,
    "applog": make_applog,
    "events": make_events,
}


def _damage_target(path: Path) -> Path:
    """The file to damage: the path itself, or the biggest file of a directory store."""
    if path.is_dir():
        files = [p for p in path.iterdir() if p.is_file() and p.stat().st_size > 0 and not p.name.endswith("lock")]
        return max(files, key=lambda p: p.stat().st_size)
    return path


@pytest.mark.parametrize("store", sorted(MAKERS))
def test_inspect_and_verify_recognise_each_format(store, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = MAKERS[store](tmp_path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert store in out
    assert main(["verify", str(path)]) == 0
    assert "ok" in capsys.readouterr().out


@pytest.mark.parametrize("store", sorted(MAKERS))
def test_truncated_header_is_a_clear_error(store, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A file cut inside its header: never a traceback, always a message and status."""
    path = MAKERS[store](tmp_path)
    target = _damage_target(path)
    with open(target, "r+b") as f:
        f.truncate(3)
    status_inspect = main(["inspect", str(target)])
    status_verify = main(["verify", str(path)])
    captured = capsys.readouterr()
    assert status_verify != 0, f"verify accepted a {store} file cut to 3 bytes"
    assert status_inspect != 0, f"inspect summarised a {store} file cut to 3 bytes"
    assert "Traceback" not in captured.err
    assert target.name in captured.err or str(path) in captured.err


@pytest.mark.parametrize("store", sorted(MAKERS))
def test_foreign_bytes_are_refused(store, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = MAKERS[store](tmp_path)
    target = _damage_target(path)
    size = target.stat().st_size
    target.write_bytes(b"\xde\xad\xbe\xef" * (size // 4 + 1))
    assert main(["verify", str(path)]) != 0
    assert "Traceback" not in capsys.readouterr().err
