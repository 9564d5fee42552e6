"""engine.fs.words: u32 / u64 words shared by every handle and process that maps
one file, with sleeps and wakes.

Both implementations (the mapped futex one of the real file system on Linux, and
the one through a handle's reads and writes that the crash simulator gets) must
behave the same: values seen by every mapping, sleeps that end at a change, a
wake, or the timeout.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.fs import OpenMode, SharedWords, default_fs
from engine.fs.osfs import OsFileSystem
from engine.fs.words import HAVE_FUTEX, FileWords, MappedWords
from stress.simfs import SimFS

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(params=["os", "file-words-on-os", "simfs"])
def words_pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[SharedWords, SharedWords]]:
    """Two mappings of one file (as two producers would have)."""
    path = str(tmp_path / "w")
    if request.param == "simfs":
        from stress.simfs import SimFS

        sim = SimFS()
        path = "/w"
        handles = [sim.open(path, OpenMode.CREATE) for _ in range(2)]
        words = [h.map_words(4) for h in handles]
    else:
        handles = [default_fs().open(path, OpenMode.CREATE) for _ in range(2)]
        if request.param == "os":
            words = [h.map_words(4) for h in handles]
        else:
            for h in handles:
                h.map_words(4).close()  # the file grown to hold them
            words = [FileWords(h, 4) for h in handles]
    yield words[0], words[1]
    for w in words:
        w.close()
    for h in handles:
        h.close()


def test_the_real_file_system_maps_the_words_where_futexes_exist(tmp_path: Path) -> None:
    with default_fs().open(str(tmp_path / "w"), OpenMode.CREATE) as handle:
        words = handle.map_words(2)
        try:
            assert isinstance(words, MappedWords if HAVE_FUTEX else FileWords)
        finally:
            words.close()
    if sys.platform.startswith("linux") and os.uname().machine in ("x86_64", "aarch64"):
        assert HAVE_FUTEX


def test_values_are_shared_between_mappings(words_pair: tuple[SharedWords, SharedWords]) -> None:
    a, b = words_pair
    assert [a.get(i) for i in range(4)] == [0, 0, 0, 0]  # a new file: zeros
    a.set(0, 7)
    b.set(1, 2**32 + 5)  # stored mod 2**32
    assert (b.get(0), a.get(1)) == (7, 5)
    a.set64(2, 2**40 + 3)
    assert b.get64(2) == 2**40 + 3
    assert (b.get(2), b.get(3)) == (3, 2**8)  # little-endian halves
    b.set64(2, 2**64 + 1)
    assert a.get64(2) == 1


def test_indexes_are_checked(words_pair: tuple[SharedWords, SharedWords]) -> None:
    a, _ = words_pair
    for bad in (-1, 4):
        with pytest.raises(IndexError):
            a.get(bad)
        with pytest.raises(IndexError):
            a.set(bad, 1)
        with pytest.raises(IndexError):
            a.wake(bad)
    for bad in (1, 3, 4, -2):  # u64s sit at even indexes, two words inside the count
        with pytest.raises(IndexError):
            a.get64(bad)
        with pytest.raises(IndexError):
            a.set64(bad, 1)


def test_wait_returns_at_once_when_the_word_differs(words_pair: tuple[SharedWords, SharedWords]) -> None:
    a, b = words_pair
    a.set(0, 3)
    started = time.monotonic()
    b.wait(0, 2, 30.0)  # not 2: no sleep at all
    assert time.monotonic() - started < 5.0


def test_wait_ends_at_the_timeout(words_pair: tuple[SharedWords, SharedWords]) -> None:
    a, _ = words_pair
    started = time.monotonic()
    a.wait(0, 0, 0.05)
    assert time.monotonic() - started >= 0.04


def test_a_change_and_a_wake_end_a_sleep_in_another_thread(words_pair: tuple[SharedWords, SharedWords]) -> None:
    a, b = words_pair
    woke = threading.Event()

    def sleeper() -> None:
        while b.get(0) == 0:
            b.wait(0, 0, 30.0)
        woke.set()

    t = threading.Thread(target=sleeper)
    t.start()
    time.sleep(0.05)
    assert not woke.is_set()
    a.set(0, 1)
    a.wake(0)
    assert woke.wait(10.0)  # long before the 30 s timeout
    t.join()


def test_map_words_grows_a_short_file_and_never_shrinks_one(tmp_path: Path) -> None:
    path = str(tmp_path / "w")
    with default_fs().open(path, OpenMode.CREATE) as handle:
        handle.write_at(0, b"\1\0\0\0" + b"x" * 60)
        words = handle.map_words(2)
        try:
            assert words.get(0) == 1  # the bytes that were there
        finally:
            words.close()
        assert handle.size() == 64
    with default_fs().open(str(tmp_path / "empty"), OpenMode.CREATE) as handle:
        handle.map_words(3).close()
        assert handle.size() == 12
        with pytest.raises(ValueError, match="at least 1"):
            handle.map_words(0)


@pytest.mark.skipif(not HAVE_FUTEX, reason="the futex words exist on Linux x86-64 / arm64 only")
def test_a_wake_reaches_a_sleeper_in_another_process(tmp_path: Path) -> None:
    """The words are shared across processes, and a wake ends a sleep there (not
    its 30 s timeout)."""
    path = str(tmp_path / "w")
    child = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {ROOT!r})
        from engine.fs import OpenMode, default_fs
        handle = default_fs().open({path!r}, OpenMode.CREATE)
        words = handle.map_words(2)
        words.set(1, 1)  # asleep from here on
        started = time.monotonic()
        while words.get(0) == 0:
            words.wait(0, 0, 30.0)
        print(round(time.monotonic() - started, 3), words.get(0))
        """
    )
    with default_fs().open(path, OpenMode.CREATE) as handle:
        words = handle.map_words(2)
        try:
            proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 30
            while words.get(1) == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.1)  # into its sleep
            words.set(0, 9)
            words.wake(0)
            out, _ = proc.communicate(timeout=60)
        finally:
            words.close()
    slept, value = out.split()
    assert value == "9"
    assert float(slept) < 20.0


def test_closed_words_cannot_be_used(tmp_path: Path) -> None:
    with default_fs().open(str(tmp_path / "w"), OpenMode.CREATE) as handle:
        words = handle.map_words(2)
        words.close()
        words.close()  # twice is fine
        if isinstance(words, MappedWords):
            with pytest.raises(AttributeError):
                words.get(0)  # never a read of unmapped memory


def test_watched_words_see_the_stores_and_refuse_their_own(tmp_path: Path) -> None:
    """watch_words: a read-only mapping (a reader's handle) of words another
    handle stores; None while the file is too short to hold them."""
    path = str(tmp_path / "w")
    fs = default_fs()
    with fs.open(path, OpenMode.CREATE) as writer, fs.open(path, OpenMode.READ) as reader:
        assert reader.watch_words(4) is None  # nobody made them yet
        stores = writer.map_words(4)
        watched = reader.watch_words(4)
        assert watched is not None
        load = watched.loader64(2)
        assert load() == 0
        assert stores.add64(2, 5) == 5 and stores.add64(2, 2**64 - 1) == 4  # mod 2**64
        assert load() == 4 and watched.get64(2) == 4
        stores.set(0, 7)
        assert watched.get(0) == 7 and watched.read_bytes(0, 4) == stores.read_bytes(0, 4)
        with pytest.raises(Exception):  # noqa: B017 - read-only: io.UnsupportedOperation
            watched.set(0, 1)
        with pytest.raises(IndexError):
            watched.loader64(1)
        watched.close()
        stores.close()


def test_gated_lock_change_count_and_ring(tmp_path: Path) -> None:
    """Every exclusive hold moves the count by two (odd while held); the ids a
    hold notes reach a shared holder's written_since; a hold that notes
    nothing, or more than the ring holds, reads as "anything changed"."""
    from engine.fs import GatedLock
    from engine.fs.lock import RING

    path = str(tmp_path / "f")
    fs = default_fs()
    fs.open(path + "-gate", OpenMode.CREATE).close()
    with fs.open(path, OpenMode.CREATE) as wh, fs.open(path, OpenMode.READ) as rh:
        writer = GatedLock(fs, wh, path + "-gate", what="x")
        reader = GatedLock(fs, rh, path + "-gate", what="x")
        assert reader.changes() is None and reader.written_since(None) is None  # no count before a writer
        writer.acquire(exclusive=True, wait=0)
        count = reader.changes()
        assert count is not None and count() == 1  # odd: held
        writer.note_written([3, 9])
        writer.release()
        assert count() == 2
        assert reader.written_since(None) == (2, None)  # no head seen yet: unknown
        for n in range(3 * RING // 2):  # around the ring more than once
            writer.acquire(exclusive=True, wait=0)
            writer.note_written([n, n + 1])
            writer.release()
            assert reader.written_since(2 + 2 * n) == (4 + 2 * n, [n, n + 1])
        head = 2 + 3 * RING
        writer.acquire(exclusive=True, wait=0)
        writer.release()  # noted nothing: anything may have changed
        assert reader.written_since(head) == (head + RING + 1, None)
        writer.acquire(exclusive=True, wait=0)
        writer.note_written(range(RING + 1))
        writer.release()
        assert reader.written_since(head + RING + 1) == (head + 2 * (RING + 1), None)
        assert count() % 2 == 0
        reader.close()
        writer.close()


def test_scratch_words_are_the_mapped_words_on_the_os(tmp_path: Path) -> None:
    """On the OS, scratch words are the file's first bytes, mapped (map_words)."""
    path = str(tmp_path / "gate")
    with OsFileSystem().open(path, OpenMode.CREATE) as handle, OsFileSystem().open(path) as reader:
        assert reader.watch_scratch_words(2) is None  # nobody made them yet
        words = handle.map_scratch_words(2)
        watched = reader.watch_scratch_words(2)
        assert watched is not None
        words.set64(0, 7)
        assert watched.get64(0) == 7 and handle.read_at(0, 8) == struct.pack("<Q", 7)
        watched.close()
        words.close()


def test_scratch_words_in_the_simulator_are_shared_memory_outside_the_file() -> None:
    """In the crash simulator, scratch words are shared by every handle of the
    inode, seen by tests, and no part of the file (stress/simwords.py)."""
    sim = SimFS()
    with sim.open("/gate", OpenMode.CREATE) as handle, sim.open("/gate") as reader:
        assert reader.watch_scratch_words(4) is None
        words = handle.map_scratch_words(4)
        watched = reader.watch_scratch_words(4)
        assert watched is not None
        operations = sim.operation_count()
        words.set64(0, 5)
        words.write_bytes(8, b"abcd")
        assert watched.get64(0) == 5 and watched.read_bytes(8, 4) == b"abcd" and watched.get(2) == 0x64636261
        with pytest.raises(OSError):
            watched.set(0, 1)
        assert sim.operation_count() == operations and sim.file_size("/gate") == 0
        assert sim.scratch_words("/gate") == struct.pack("<Q", 5) + b"abcd" + bytes(4)
        woken = threading.Event()

        def sleeper() -> None:
            words.wait(3, 0, 30.0)
            woken.set()

        thread = threading.Thread(target=sleeper)
        thread.start()
        words.set(3, 1)
        words.wake(3)
        thread.join(30.0)
        assert woken.is_set()
        words.close()
        with pytest.raises(ValueError):
            words.get(0)
