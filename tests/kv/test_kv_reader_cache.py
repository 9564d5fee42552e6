"""A reader's cached pages across a writer's commits (issue 29): kept where the
page's checksum entry did not change, dropped where it did (a page rewritten in
place with the same id is never served stale), and a get with nothing written
since the last snapshot answered from memory (no system call); beside a writer in
another process every snapshot is one commit and no key's value goes back."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from engine.kv import KV, KVReader
from engine.kv.api import DEFAULT_TREE
from engine.kv.node import Branch

KEYS = [b"k%05d" % i for i in range(400)]


def _store(path: str) -> None:
    with KV.open(path, page_size=512) as kv:
        kv.update({k: b"v0-" + k for k in KEYS})


def _leaves(reader: KVReader) -> list[int]:
    """The leaf pages of the default tree (a tree of height 2 here)."""
    info = reader.tree_info(DEFAULT_TREE)
    assert info is not None and info.height == 2
    root = reader.node(info.root)
    assert isinstance(root, Branch)
    return list(root.children)


def test_a_commit_drops_only_the_pages_it_changed(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "s.kv")
    _store(path)
    with KV.open(path, page_size=512) as kv, KV.open_reader(path) as reader:
        assert all(reader[k] == b"v0-" + k for k in KEYS)  # every leaf cached
        leaves = _leaves(reader)
        assert len(leaves) > 10
        before = {page: reader.cached(page) for page in leaves}
        assert all(node is not None for node in before.values())
        kv[KEYS[0]] = b"v1-" + KEYS[0]  # same length: its leaf rewritten in place
        assert reader[KEYS[0]] == b"v1-" + KEYS[0]
        assert _leaves(reader) == leaves  # same pages: the leaf kept its id
        first = leaves[0]
        assert reader.cached(first) is not before[first]  # dropped, read again
        # Every other leaf is the very node cached before the commit (the old
        # reader dropped its whole cache at every commit).
        assert [p for p in leaves[1:] if reader.cached(p) is not before[p]] == []


def test_a_page_rewritten_in_place_is_never_served_stale(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "s.kv")
    _store(path)
    with KV.open(path, page_size=512) as kv, KV.open_reader(path) as reader:
        assert all(reader[k] == b"v0-" + k for k in KEYS)
        for i in range(1, 30):
            key = KEYS[(i * 37) % len(KEYS)]
            kv[key] = b"v%d-" % (i % 10) + key  # same length, the same leaf page
            assert reader[key] == b"v%d-" % (i % 10) + key
            with reader.snapshot() as snap:
                assert snap.txid == kv.txid
        assert reader.verify()


def _count_calls(monkeypatch: pytest.MonkeyPatch, module: Any, names: list[str]) -> list[str]:
    calls: list[str] = []
    for name in names:
        real: Callable[..., Any] = getattr(module, name)

        def counted(*args: Any, _real: Callable[..., Any] = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return calls


def test_a_get_with_nothing_written_makes_no_system_call(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = os.path.join(str(tmp_path), "s.kv")
    _store(path)
    with KV.open(path, page_size=512) as kv, KV.open_reader(path) as reader:
        assert all(reader[k] == b"v0-" + k for k in KEYS)
        calls = _count_calls(monkeypatch, os, ["pread", "fstat", "stat", "open"])
        calls += _count_calls(monkeypatch, fcntl, ["flock"])
        assert all(reader[k] == b"v0-" + k for k in KEYS)
        assert calls == []  # (before: a lock, the header, mtime and the meta page per get)
        monkeypatch.undo()
        kv[KEYS[5]] = b"new"  # the change count moves: the next get takes a snapshot
        assert reader[KEYS[5]] == b"new"
        assert reader[KEYS[6]] == b"v0-" + KEYS[6]


WRITER = textwrap.dedent(
    """
    import sys
    from engine.kv import KV
    keys = [b"k%05d" % i for i in range(400)]
    watched = keys[::40]
    kv = KV.open(sys.argv[1], page_size=512)
    print("ready", flush=True)
    for i in range(1, int(sys.argv[2]) + 1):
        with kv.transaction() as tx:
            for k in watched:
                tx[k] = b"%08d" % i
            tx[b"n:%05d" % i] = b"x" * (i % 200)
    kv.close()
    """
)


def test_readers_see_whole_commits_beside_a_writer_process(tmp_path: os.PathLike[str]) -> None:
    """History check: commit i sets every watched key (in different leaves) to i.
    A snapshot sees them all equal to the count of ``n:`` keys (one commit); a
    run of single gets (answered from memory while nothing moved) never sees a
    key go back, nor one ahead of a later snapshot."""
    path = os.path.join(str(tmp_path), "s.kv")
    watched = KEYS[::40]
    with KV.open(path, page_size=512) as kv:
        kv.update({k: b"%08d" % 0 for k in KEYS})
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    count = 300
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, str(count)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    seen: set[int] = set()
    try:
        with KV.open_reader(path) as reader:
            last = dict.fromkeys(watched, 0)
            while proc.poll() is None:
                for k in watched:
                    got = int(reader[k])
                    assert got >= last[k], (k, got, last[k])
                    last[k] = got
                with reader.snapshot() as snap:
                    values = {int(snap[k]) for k in watched}
                    n = len(list(snap.prefix(b"n:")))
                assert values == {n}, (values, n)
                assert max(last.values()) <= n
                seen.add(n)
    finally:
        proc.wait()
    assert proc.returncode == 0
    with KV.open_reader(path) as reader:
        assert {reader[k] for k in watched} == {b"%08d" % count}
        reader.verify()
    assert len(seen) > 1  # the reader really ran beside the writer


def test_a_get_after_a_commit_takes_no_lock(tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The first get after a writer's commit takes the new state without the
    store file's lock (the page reader's seqlock): no flock, a few preads (the
    header, the written pages' checksum entries, the meta page, pages not at hand)."""
    path = os.path.join(str(tmp_path), "s.kv")
    _store(path)
    with KV.open(path, page_size=512) as kv, KV.open_reader(path) as reader:
        assert all(reader[k] == b"v0-" + k for k in KEYS)
        for i in range(5):
            kv[KEYS[i * 50]] = b"v%d-" % (i + 1) + KEYS[i * 50]
            locks = _count_calls(monkeypatch, fcntl, ["flock"])
            reads = _count_calls(monkeypatch, os, ["pread"])
            assert reader[KEYS[i * 50]] == b"v%d-" % (i + 1) + KEYS[i * 50]
            assert all(reader[k] == b"v0-" + k for k in KEYS[i * 50 + 1 : i * 50 + 50])
            monkeypatch.undo()
            assert locks == []  # (before: the gate's and the file's shared locks, four flock calls)
            assert 0 < len(reads) <= 12, reads
        with reader.snapshot() as snap:
            assert snap.txid == kv.txid
        assert reader.verify()


def test_a_commit_during_a_get_without_the_lock_sends_it_to_the_locked_path(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seqlock's second look: a writer that commits while the reader reads
    the new state without the lock (here: between the reader's look at the
    change count and its read of the meta page) moves the count; what was read
    is dropped and the get takes the lock, seeing one whole commit (without the
    second look, the meta page of the later commit fails its checksum entry
    of the earlier one, or a stale state is kept)."""
    from engine.fs.osfs import OsFileHandle

    path = os.path.join(str(tmp_path), "s.kv")
    _store(path)
    with KV.open(path, page_size=512) as kv, KV.open_reader(path) as reader:
        assert all(reader[k] == b"v0-" + k for k in KEYS)
        real = OsFileHandle.read_at
        armed = [True]

        def read_at(handle: OsFileHandle, offset: int, size: int) -> bytes:
            if armed[0] and handle.path == path and offset == 512 and not handle.writable:
                armed[0] = False  # the reader's read of the meta page: a commit first
                kv[KEYS[1]] = b"v2-" + KEYS[1]
                kv[b"new key"] = b"x" * 300
            return real(handle, offset, size)

        monkeypatch.setattr(OsFileHandle, "read_at", read_at)
        kv[KEYS[1]] = b"v1-" + KEYS[1]
        assert reader[KEYS[1]] == b"v2-" + KEYS[1]
        assert not armed[0]  # (the commit did happen in the middle)
        assert reader[b"new key"] == b"x" * 300
        monkeypatch.undo()
        assert all(reader[k] == b"v0-" + k for k in KEYS[2:])
        assert reader.verify()
