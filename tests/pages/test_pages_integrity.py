"""Zero silent wrong answers: a missing, broken or orphaned journal, a full disk
during recovery and damaged pages are typed errors naming the file, never an
empty or shorter store read back as if nothing were wrong."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from engine.errors import CorruptFileError, DiskFullError, PageError
from engine.fs import OsFileSystem, make_dirs
from engine.pages import PageStore, store_codec
from engine.pages.diagnose import read_page, verify_files
from stress.faults import FaultyFS
from stress.simfs import SimFS


def _crashed_copy(tmp_path: Path, *, with_journal: bool) -> tuple[str, bytes]:
    """A copy of a store taken while its writer is alive with a commit that is
    only in the journal (what a crash leaves); returns (path, committed bytes)."""
    src = tmp_path / "live"
    src.mkdir()
    store = PageStore.open(str(src / "s.db"), page_size=512)
    with store.transaction() as tx:
        page = tx.allocate()
        tx.write(page, 0, b"committed")
    dst = tmp_path / "crashed"
    dst.mkdir()
    names = ["s.db", "s.db-sums"] + (["s.db-journal"] if with_journal else [])
    for name in names:
        shutil.copyfile(src / name, dst / name)
    store.close()
    return str(dst / "s.db"), b"committed"


def test_a_deleted_journal_with_commits_only_in_it_is_refused(tmp_path: Path) -> None:
    path, _ = _crashed_copy(tmp_path, with_journal=False)
    jpath = path + "-journal"
    for open_it in (
        lambda: PageStore.open(path),
        lambda: PageStore.open_reader(path),
        lambda: verify_files(OsFileSystem(), path),
    ):
        with pytest.raises(CorruptFileError, match="journal") as info:
            open_it()
        assert info.value.path == jpath
    assert not os.path.exists(jpath)  # nothing was created over the loss


def test_the_crashed_copy_with_its_journal_recovers(tmp_path: Path) -> None:
    path, data = _crashed_copy(tmp_path, with_journal=True)
    with PageStore.open(path) as store:
        assert store.read(1)[: len(data)] == data
        assert store.recovery.total("redone", "transactions") == 1


def test_a_cleanly_closed_store_opens_without_its_journal(tmp_path: Path) -> None:
    """A clean close clears JOURNAL_LIVE; files of the previous version never had it."""
    path = str(tmp_path / "s.db")
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"kept")
    with open(path, "rb") as f:
        assert not store_codec.decode_header(f.read(40)).flags & store_codec.JOURNAL_LIVE
    os.unlink(path + "-journal")
    with PageStore.open_reader(path) as reader:
        assert reader.read(1)[:4] == b"kept"
    with PageStore.open(path) as store:
        assert store.read(1)[:4] == b"kept"


@pytest.mark.parametrize("link", ["loop", "dangling"])
def test_a_journal_that_is_a_broken_link_is_a_typed_error(tmp_path: Path, link: str) -> None:
    path = str(tmp_path / "s.db")
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"x")
    jpath = path + "-journal"
    os.unlink(jpath)
    os.symlink("s.db-journal" if link == "loop" else "nowhere", jpath)
    for open_it in (lambda: PageStore.open(path), lambda: PageStore.open_reader(path)):
        with pytest.raises(CorruptFileError, match="link") as info:
            open_it()
        assert info.value.path == jpath


def test_a_checksum_file_that_is_a_broken_link_is_a_typed_error(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"x")
    spath = path + "-sums"
    os.unlink(spath)
    os.symlink("s.db-sums", spath)
    with pytest.raises(CorruptFileError, match="link") as info:
        PageStore.open(path)
    assert info.value.path == spath
    with PageStore.open_reader(path) as reader, pytest.raises(CorruptFileError, match="link"):
        reader.read(1)  # never unchecked data


def test_a_deleted_store_file_is_not_recreated_over_its_journal(tmp_path: Path) -> None:
    path, _ = _crashed_copy(tmp_path, with_journal=True)
    os.unlink(path)
    with pytest.raises(CorruptFileError, match="deleted") as info:
        PageStore.open(path)
    assert info.value.path == path and "1 committed transaction" in str(info.value)
    assert not os.path.exists(path)


def test_recovery_on_a_full_disk_says_so_and_succeeds_after(tmp_path: Path) -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    store = PageStore.open("/db/s", page_size=512, fs=sim)
    with store.transaction() as tx:
        tx.write(tx.allocate(), 0, b"must survive")
    crashed = sim.durable_image().fs()  # the writer dies here
    full = FaultyFS(crashed, fail_at=1, errno=errno.ENOSPC, persistent=True)
    with pytest.raises(DiskFullError, match="recovery of /db/s"):
        PageStore.open("/db/s", fs=full)
    with PageStore.open("/db/s", fs=crashed) as reopened:  # space freed
        assert reopened.read(1)[:12] == b"must survive"


def test_commits_on_a_full_disk_raise_disk_full_not_a_raw_os_error() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    PageStore.open("/db/s", page_size=512, fs=sim).close()
    full = FaultyFS(sim, errno=errno.ENOSPC, persistent=True)
    store = PageStore.open("/db/s", fs=full)
    full.fail_at = full.ops + 1
    with pytest.raises(DiskFullError):
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"no room")
    store.close()  # poisoned: closes without writing
    with PageStore.open("/db/s", fs=sim) as reopened:
        assert reopened.page_count == 0


def test_a_damaged_page_is_an_error_on_every_read_path(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"A" * 512)
    with open(path, "r+b") as f:
        f.seek(512 + 100)
        f.write(b"B")
    with pytest.raises(CorruptFileError) as info:
        read_page(OsFileSystem(), path, 1)
    assert info.value.path == path and info.value.offset == 512
    with PageStore.open_reader(path) as reader, pytest.raises(CorruptFileError):
        reader.read(1)
    with PageStore.open(path) as store, pytest.raises(CorruptFileError):
        store.read(1)


def test_verify_and_reader_messages_say_what_is_true(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"x")
        notes = store.verify()
        assert not any("not flagged complete" in n for n in notes)
        assert any(
            "1 committed transaction in the journal, not yet checkpointed into the store file "
            "(normal while a writer is open" in n
            for n in notes
        ), notes
        assert any("1 page of 512 bytes (1 live, 0 free)" in n for n in notes), notes
        with PageStore.open_reader(path) as reader:
            with pytest.raises(PageError) as info:
                reader.read(1)
            text = str(info.value)
            assert "beyond what the store file holds yet (the store file holds no pages yet)" in text
            assert "next flush or checkpoint" in text and 'apply="commit"' in text
            assert "never allocated" not in text and "1..0" not in text
        with store.transaction() as tx:
            tx.allocate()
        store.flush()
        with PageStore.open_reader(path) as reader:
            assert reader.read(2)[:1] == b"\0"
            with pytest.raises(PageError, match="the store file holds pages 1 to 2"):
                reader.read(3)
        store.checkpoint()
        assert not any("committed transaction" in n for n in store.verify())


def test_verify_fails_when_the_checksums_file_header_is_damaged(tmp_path: Path) -> None:
    """No page is checked then: not a pass (the writer's open rebuilds the file)."""
    path = str(tmp_path / "s.db")
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"x")
    with open(path + "-sums", "r+b") as f:
        f.seek(3)
        f.write(b"?")
    with pytest.raises(CorruptFileError) as info:
        verify_files(OsFileSystem(), path)
    assert info.value.path == path + "-sums" and info.value.offset == 0
    with PageStore.open_reader(path) as reader, pytest.raises(CorruptFileError):
        reader.verify()
    with PageStore.open(path) as store:
        assert store.recovery.of("rebuilt")
        store.verify()


def test_a_reader_never_reads_pages_it_cannot_check(tmp_path: Path) -> None:
    """With ``-sums`` there but its header damaged, ``PageReader.read`` returned page
    bytes unchecked (a damaged page too), where verify, dump and Spark failed naming
    the sums file: now every read fails the same way until a writer rebuilds it."""
    path = str(tmp_path / "s.db")
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"A" * 512)
    with open(path + "-sums", "r+b") as f:
        f.write(b"XXXX")
    with open(path, "r+b") as f:
        f.seek(512)
        f.write(b"B")
    with PageStore.open_reader(path) as reader:
        with pytest.raises(CorruptFileError) as info:
            reader.read(1)
        assert info.value.path == path + "-sums" and info.value.offset == 0


def test_in_every_crash_state_a_clear_flag_means_the_store_file_has_every_commit() -> None:
    """The invariant behind JOURNAL_LIVE: delete the journal from any crash image;
    the open either refuses (flag set) or finds every acknowledged commit."""
    sim = SimFS()
    make_dirs(sim, "/db")
    store = PageStore.open("/db/s", page_size=512, checkpoint_bytes=1500, fs=sim)
    for i in range(1, 7):
        with store.transaction() as tx:
            page = tx.allocate() if i == 1 else 1
            tx.write(page, 0, bytes([i]) * 100)
        sim.mark(i)
    store.close()
    sim.mark("closed")
    refused = opened = 0
    for state in sim.crash_states(limit=300, seed=5):
        acked = [m for m in state.marks if isinstance(m, int)]
        files = dict(state.files)
        if not acked or "/db/s" not in files:
            continue
        files.pop("/db/s-journal", None)
        fs = SimFS.from_image(files, state.dirs)
        try:
            reopened = PageStore.open("/db/s", fs=fs)
        except CorruptFileError as exc:
            assert exc.path == "/db/s-journal", state.describe()
            refused += 1
            continue
        with reopened:
            got = reopened.read(1)[:100] if reopened.page_count else b""
            # the last acknowledged commit, or the one in flight at the crash
            assert got in (bytes([acked[-1]]) * 100, bytes([acked[-1] + 1]) * 100), state.describe()
        opened += 1
    assert refused and opened


def test_a_close_with_nothing_to_write_clears_the_flag_too(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    PageStore.open(path, page_size=512).close()
    with PageStore.open(path) as store:
        with store.transaction() as tx:
            tx.allocate()
        store.checkpoint()
    with open(path, "rb") as f:
        assert store_codec.decode_header(f.read(40)).flags == 0


def test_a_damaged_free_list_leaves_the_page_count_and_fails_the_reads(tmp_path: Path) -> None:
    """The page count is a header field: a reader gives it over a free list whose
    link points outside the store (a planner splits the pages into ranges, as
    PagesSource does from the header), while what walks the list refuses it."""
    path = str(tmp_path / "s.db")
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            pages = [tx.allocate() for _ in range(4)]
            for p in pages:
                tx.write(p, 0, b"x")
        with store.transaction() as tx:
            tx.free(pages[2])
    with open(path, "r+b") as f:
        f.seek(pages[2] * 512)
        f.write((99 * 512).to_bytes(8, "little"))  # the head's link: past the store's end
    with PageStore.open_reader(path) as reader:
        assert reader.page_count == 4
        for walk in (lambda: reader.free_pages, lambda: reader.read(1), reader.verify, reader.stats):
            with pytest.raises(CorruptFileError, match="a free page offset inside the store") as info:
                walk()
            assert info.value.path == path and info.value.offset == pages[2] * 512
