"""Zero silent wrong answers for the KV: its journal deleted after a crash, a
full disk, and a backup taken beside a live writer (the copy has no journal and
must open)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from engine.errors import CorruptFileError, DiskFullError
from engine.fs import make_dirs
from engine.kv import KV
from stress.faults import FaultyFS
from stress.simfs import SimFS


def test_a_deleted_journal_after_a_crash_is_refused(tmp_path: Path) -> None:
    live = tmp_path / "live"
    crashed = tmp_path / "crashed"
    live.mkdir()
    crashed.mkdir()
    kv = KV.open(str(live / "s.kv"), page_size=512)
    kv[b"key"] = b"committed"  # only in the journal until a checkpoint
    for name in ("s.kv", "s.kv-sums"):  # what a crash leaves, minus the journal
        shutil.copyfile(live / name, crashed / name)
    kv.close()
    path = str(crashed / "s.kv")
    with pytest.raises(CorruptFileError, match="journal") as info:
        KV.open(path)
    assert info.value.path == path + "-journal"
    with pytest.raises(CorruptFileError, match="journal"):
        KV.open_reader(path)
    assert not os.path.exists(path + "-journal")


def test_a_backup_beside_a_live_writer_opens_without_a_journal(tmp_path: Path) -> None:
    path = str(tmp_path / "s.kv")
    dest = str(tmp_path / "copy.kv")
    with KV.open(path, page_size=512) as kv:
        kv[b"a"] = b"1"
        kv.checkpoint()
        kv.backup(dest)
    with KV.open_reader(dest) as copy:
        assert copy[b"a"] == b"1"
    with KV.open(dest) as copy:
        assert copy[b"a"] == b"1"


def test_a_full_disk_is_disk_full_error_and_recovery_waits_for_space() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    kv = KV.open("/db/s", page_size=512, fs=sim)
    kv[b"k"] = b"v"
    crashed = sim.durable_image().fs()
    with pytest.raises(DiskFullError, match="recovery"):
        KV.open("/db/s", fs=FaultyFS(crashed, fail_at=1, errno=errno.ENOSPC, persistent=True))
    with KV.open("/db/s", fs=crashed) as reopened:
        assert reopened[b"k"] == b"v"
    kv.close()


def test_a_commit_on_a_full_disk_is_disk_full_error() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    full = FaultyFS(sim, errno=errno.ENOSPC, persistent=True)
    kv = KV.open("/db/s", page_size=512, fs=full)
    full.fail_at = full.ops + 1
    with pytest.raises(DiskFullError):
        kv[b"k"] = b"v"
    kv.close()
    with KV.open("/db/s", fs=sim) as reopened:
        assert reopened.get(b"k") is None


def test_a_backup_killed_at_any_point_leaves_no_checksums_without_a_store() -> None:
    """Issue 28: the backup renamed ``<dest>-sums`` into place before ``<dest>``, so a
    kill between the two left an orphan checksums file and no store.  In every crash
    state of a backup: either no ``<dest>`` and no ``<dest>-sums``, or a ``<dest>``
    that opens with every key."""
    sim = SimFS()
    make_dirs(sim, "/db")
    kv = KV.open("/db/s", page_size=512, fs=sim)
    with kv.transaction() as tx:
        for i in range(40):
            tx[b"k%03d" % i] = b"v" * 30
    kv.checkpoint()
    sim.mark("before")
    kv.backup("/db/copy")
    kv.close()
    seen = {"none": 0, "whole": 0}
    for state in sim.crash_states(limit=200, seed=3):
        if "before" not in state.marks:
            continue
        fs = state.fs()
        if not fs.exists("/db/copy"):
            assert not fs.exists("/db/copy-sums"), "a checksums file with no store"
            seen["none"] += 1
            continue
        with KV.open("/db/copy", fs=fs) as copy:
            assert len(copy) == 40 and copy[b"k039"] == b"v" * 30
            copy.verify()
        seen["whole"] += 1
    assert seen["none"] and seen["whole"]
