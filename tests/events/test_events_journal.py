"""Unit and property tests of EventJournal's behaviour (on the real file system and the simulator)."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import ClosedError, ConfigError, CorruptFileError, FormatError, FullError, LockedError
from engine.events import EventJournal, SequenceNumberError
from engine.events.codec import MetaBlock, encode_block, encode_data_header, encode_meta
from engine.fs import make_dirs
from stress.simfs import SimFS


def seqs(journal: EventJournal, pid: str, *args: int | None) -> list[int]:
    return [e.sequence_nr for e in journal.replay(pid, *args)]  # type: ignore[arg-type]


@pytest.fixture()
def jdir(tmp_path: Path) -> str:
    return str(tmp_path / "journal")


def test_write_replay_highest_and_reopen(jdir: str) -> None:
    with EventJournal.open(jdir) as j:
        assert j.persistence_ids() == [] and j.highest_sequence_nr("a") == 0
        j.write("a", [(1, b"a1"), (2, b"a2")])
        j.write("b", [(1, b"b1")])
        j.write("a", [(3, b"a3")])
        assert [tuple(e) for e in j.replay("a")] == [(1, b"a1"), (2, b"a2"), (3, b"a3")]
        assert j.highest_sequence_nr("a") == 3 and j.highest_sequence_nr("b") == 1
    with EventJournal.open(jdir) as j:
        assert j.persistence_ids() == ["a", "b"]
        assert [e.payload for e in j.replay("b")] == [b"b1"]
        j.write("b", [(2, b"b2")])
        assert j.verify() == []
    # The files of the format, and the writer lock.
    assert sorted(p.name for p in Path(jdir).iterdir()) == [".lock", "data", "data.crc", "meta", "meta.crc"]


def test_replay_ranges_and_max(jdir: str) -> None:
    with EventJournal.open(jdir) as j:
        for start in range(1, 40, 4):
            j.write("x", [(s, bytes([s])) for s in range(start, start + 4)])
        j.write("y", [(1, b"")])
        assert seqs(j, "x") == list(range(1, 41))
        assert seqs(j, "x", 5, 9) == [5, 6, 7, 8, 9]
        assert seqs(j, "x", 35) == list(range(35, 41))  # found walking back from the last block
        assert seqs(j, "x", 3, None, 2) == [3, 4]
        assert seqs(j, "x", 38, 100, 10) == [38, 39, 40]
        assert seqs(j, "x", 10, 5) == [] and seqs(j, "x", 1, None, 0) == []
        assert seqs(j, "nobody") == []
        assert [e.payload for e in j.replay("y")] == [b""]


def test_sequence_numbers_must_continue_by_one(jdir: str) -> None:
    with EventJournal.open(jdir) as j:
        with pytest.raises(SequenceNumberError, match="expected 1"):
            j.write("a", [(2, b"x")])
        j.write("a", [(1, b"x")])
        for bad in ([(1, b"y")], [(3, b"y")], [(2, b"y"), (4, b"z")], [(2, b"y"), (2, b"z")]):
            with pytest.raises(SequenceNumberError):
                j.write("a", bad)
        with pytest.raises(TypeError, match="encode it"):
            j.write("a", [(2, "text")])  # type: ignore[list-item]
        with pytest.raises(ConfigError):
            j.write("", [(1, b"x")])
        j.write("a", [])  # an empty batch is nothing
        assert j.highest_sequence_nr("a") == 1 and j.verify() == []


def test_delete_to_keeps_highest(jdir: str) -> None:
    with EventJournal.open(jdir) as j:
        j.write("a", [(s, b"%d" % s) for s in range(1, 11)])
        j.delete_to("a", 3)
        assert seqs(j, "a") == list(range(4, 11)) and j.lowest_sequence_nr("a") == 4
        j.delete_to("a", 2)  # already deleted: no change
        assert seqs(j, "a", 1, 5) == [4, 5]
        j.delete_to("a", 10**9)
        assert seqs(j, "a") == [] and j.highest_sequence_nr("a") == 10
        j.write("a", [(11, b"11")])  # continues after the highest, links to the deleted chain
        assert seqs(j, "a") == [11]
        j.delete_to("ghost", 5)
        assert j.verify() == []
    with EventJournal.open(jdir) as j:
        assert seqs(j, "a") == [11] and j.highest_sequence_nr("a") == 11
        info = j.id_info("a")
        assert info is not None and (info.lowest, info.highest, info.live) == (11, 11, 1)


def test_writer_lock_and_read_only_snapshot(jdir: str) -> None:
    writer = EventJournal.open(jdir)
    writer.write("a", [(1, b"1")])
    with pytest.raises(LockedError):
        EventJournal.open(jdir)
    reader = EventJournal.open_read_only(jdir)
    writer.write("a", [(2, b"2")])
    writer.write("b", [(1, b"b")])
    assert seqs(reader, "a") == [1] and reader.persistence_ids() == ["a"]
    with pytest.raises(ConfigError):
        reader.write("a", [(2, b"x")])
    reader.refresh()
    assert seqs(reader, "a") == [1, 2] and reader.persistence_ids() == ["a", "b"]
    assert [(i.persistence_id, i.lowest, i.highest) for i in reader.ids()] == [("a", 1, 2), ("b", 1, 1)]
    assert reader.verify() == []
    reader.close()
    writer.close()
    with pytest.raises(ClosedError):
        writer.write("a", [(3, b"3")])


def test_read_only_needs_a_journal(tmp_path: Path) -> None:
    # No journal there: "no such event journal" (FileNotFoundError, exit 1 in the CLI).
    with pytest.raises(FileNotFoundError, match="no such event journal"):
        EventJournal.open_read_only(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no such event journal"):
        EventJournal.open(str(tmp_path / "nope"), create=False)
    # Half a journal: not an event journal (a damaged or foreign directory).
    (tmp_path / "meta").write_bytes(b"")
    with pytest.raises(ConfigError, match="not an event journal"):
        EventJournal.open_read_only(str(tmp_path))


def test_data_cap_is_a_clear_error(jdir: str) -> None:
    with EventJournal.open(jdir, max_data_size=200) as j:
        j.write("a", [(1, b"x" * 100)])
        with pytest.raises(FullError, match="i32 offset limit"):
            j.write("a", [(2, b"y" * 100)])
        j.write("a", [(2, b"small")])  # the refused batch left nothing behind
        assert seqs(j, "a") == [1, 2] and j.verify() == []


def test_replay_reads_only_its_own_blocks(jdir: str) -> None:
    with EventJournal.open(jdir, readahead=4096, sync="never") as j:
        for round_ in range(20):
            for i in range(50):
                j.write(f"id{i}", [(round_ * 5 + k + 1, b"e" * 100) for k in range(5)])
        reads: list[tuple[int, int]] = []
        original = j._data.read_at

        def spy(offset: int, size: int) -> bytes:
            reads.append((offset, size))
            return original(offset, size)

        j._data.read_at = spy  # type: ignore[method-assign]
        assert seqs(j, "id7") == list(range(1, 101))
        # 20 runs of 5 adjacent blocks: about one read per run, never a scan.
        assert len(reads) <= 25
        assert sum(size for _o, size in reads) <= 25 * 4096


def _write_files(root: Path, meta: bytes, data: bytes) -> str:
    root.mkdir()
    (root / "meta").write_bytes(meta)
    (root / "data").write_bytes(data)
    return str(root)


def test_reads_files_written_with_the_original_magic(tmp_path: Path) -> None:
    # Two events for "P1" (one block each) as the original code lays them out,
    # with its AKFM meta magic.
    b1 = encode_block(8, 0, 33, 1, b"\x0b")
    b2 = encode_block(33, 8, 0, 2, b"\x0c")
    data = encode_data_header(len(b1) + len(b2)) + b1 + b2
    meta = encode_meta([MetaBlock("P1", 8, 33, 2)], magic=b"AKFM")
    d = _write_files(tmp_path / "j", meta, data)
    with EventJournal.open_read_only(d) as j:
        assert [tuple(e) for e in j.replay("P1")] == [(1, b"\x0b"), (2, b"\x0c")]
        assert j.stats()["meta_magic"] == "AKFM"
        assert j.verify() == [f"no checksums: {d}/data.crc, {d}/meta.crc missing (a writer's open adds them)"]
    with EventJournal.open(d) as j:
        # A writer adds the checksum side files (the original reader ignores them).
        assert [(a.kind, a.count, a.path) for a in j.recovery.actions] == [
            ("rebuilt", 1, f"{d}/meta.crc"), ("rebuilt", 2, f"{d}/data.crc")]
        j.write("P1", [(3, b"\x0d")])
        assert j.verify() == [str(a) for a in j.recovery.actions]
    assert (tmp_path / "j" / "meta").read_bytes()[:4] == b"AKFM"  # kept as found


def test_broken_links_and_foreign_files_are_typed_errors(tmp_path: Path) -> None:
    b1 = encode_block(8, 0, 0, 1, b"x")
    data = encode_data_header(len(b1)) + b1
    # meta's last points 4 bytes into the block: the own-offset check catches it.
    d = _write_files(tmp_path / "a", encode_meta([MetaBlock("P", 8, 12, 1)]), data)
    with pytest.raises(CorruptFileError) as info:
        EventJournal.open(d)
    assert info.value.path.endswith("data") and info.value.offset == 12
    # a block whose own-offset field is wrong
    bad = encode_block(9, 0, 0, 1, b"x")
    d = _write_files(tmp_path / "b", encode_meta([MetaBlock("P", 8, 8, 1)]), encode_data_header(len(bad)) + bad)
    with pytest.raises(CorruptFileError, match="own-offset"):
        EventJournal.open_read_only(d)
    # meta says highest 5 but the last block holds 1
    d = _write_files(tmp_path / "c", encode_meta([MetaBlock("P", 8, 8, 5)]), data)
    with pytest.raises(CorruptFileError, match="highest"):
        EventJournal.open(d)
    # foreign meta file
    d = _write_files(tmp_path / "d", b"SQLite format 3\x00" + bytes(84), data)
    with pytest.raises(FormatError):
        EventJournal.open(d)
    # truncated meta (size says more blocks than the file holds)
    meta = encode_meta([MetaBlock("P", 8, 8, 1)])
    d = _write_files(tmp_path / "e", meta[:-3], data)
    with pytest.raises(CorruptFileError):
        EventJournal.open(d)
    # a broken next link in the middle of a chain: found by replay and verify
    c1 = encode_block(8, 0, 60, 1, b"x")
    c2 = encode_block(33, 8, 0, 2, b"y")
    d = _write_files(tmp_path / "f", encode_meta([MetaBlock("P", 8, 33, 2)]),
                     encode_data_header(len(c1) + len(c2)) + c1 + c2)
    with EventJournal.open_read_only(d) as j:
        with pytest.raises(CorruptFileError):
            list(j.replay("P"))
        with pytest.raises(CorruptFileError):
            j.verify()


def test_orphan_block_fails_verify(tmp_path: Path) -> None:
    b1 = encode_block(8, 0, 0, 1, b"x")
    b2 = encode_block(33, 0, 0, 1, b"y")  # nobody's block, but below the committed end
    b3 = encode_block(58, 0, 0, 1, b"z")
    meta = encode_meta([MetaBlock("P", 8, 8, 1), MetaBlock("Q", 58, 58, 1)])
    d = _write_files(tmp_path / "j", meta, encode_data_header(75) + b1 + b2 + b3)
    with EventJournal.open(d) as j, pytest.raises(CorruptFileError, match="orphan"):
        j.verify()


def test_torn_tail_is_cut_and_reported(jdir: str, caplog: pytest.LogCaptureFixture) -> None:
    with EventJournal.open(jdir) as j:
        j.write("a", [(1, b"one")])
        end = j.committed_size
    # Simulate a batch whose blocks were written (and linked) but never committed.
    data_path = Path(jdir) / "data"
    raw = bytearray(data_path.read_bytes())
    raw[8 + 12 : 8 + 16] = struct.pack(">i", end)  # old last block's next -> new block
    raw += encode_block(end, 8, 0, 2, b"two")[:20]  # torn half-way
    raw[4:8] = struct.pack(">i", len(raw) - 8)
    data_path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="engine.events"), EventJournal.open(jdir) as j:
        assert j.recovery.total("cut", "bytes") == 20 and j.recovery.of("cut")[0].offset == end
        assert any("uncommitted" in r.getMessage() for r in caplog.records)
        assert seqs(j, "a") == [1]
        assert j.verify() == [str(a) for a in j.recovery.actions]  # only what open repaired
        j.write("a", [(2, b"two")])
    assert data_path.stat().st_size == end + 27


def test_interrupted_creation_is_completed() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    with EventJournal.open("/db", fs=sim) as j:
        j.write("a", [(1, b"x")])
    for state in sim.crash_states(limit=500, seed=3):
        fs2 = state.fs()
        with EventJournal.open("/db", fs=fs2) as j:
            assert j.highest_sequence_nr("a") in (0, 1)
            j.verify()


# -- property test against a model -------------------------------------------------
ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from("abcde"), st.lists(st.binary(max_size=60), min_size=1,
                                                                        max_size=5)),
        st.tuples(st.just("delete"), st.sampled_from("abcde"), st.integers(0, 30)),
        st.tuples(st.just("reopen"), st.just(""), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(ops)
def test_matches_a_model(program: list[tuple[str, str, object]]) -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    model: dict[str, list[tuple[int, bytes]]] = {}
    highest: dict[str, int] = {}
    j = EventJournal.open("/db", fs=sim, sync="never", preallocate=300)
    try:
        for kind, pid, arg in program:
            if kind == "write":
                assert isinstance(arg, list)
                h = highest.get(pid, 0)
                batch = [(h + i + 1, p) for i, p in enumerate(arg)]
                j.write(pid, batch)
                model.setdefault(pid, []).extend(batch)
                highest[pid] = h + len(batch)
            elif kind == "delete":
                assert isinstance(arg, int)
                j.delete_to(pid, arg)
                model[pid] = [e for e in model.get(pid, []) if e[0] > arg]
            else:
                j.close()
                j = EventJournal.open("/db", fs=sim, sync="never", preallocate=300)
            for p in "abcde":
                assert [tuple(e) for e in j.replay(p)] == model.get(p, [])
                assert j.highest_sequence_nr(p) == highest.get(p, 0)
        assert j.persistence_ids() == [p for p in dict.fromkeys(pid for k, pid, _ in program if k == "write")]
        assert j.verify() == []
        for p, events in model.items():
            for lo in range(0, highest.get(p, 0) + 2, 3):
                assert [tuple(e) for e in j.replay(p, lo, lo + 4, 3)] == [e for e in events if lo <= e[0] <= lo + 4][:3]
    finally:
        j.close()


def test_damaged_meta_is_not_mistaken_for_a_torn_tail(jdir: str) -> None:
    with EventJournal.open(jdir) as j:
        for i in range(3):
            j.write(f"id{i}", [(1, b"a"), (2, b"b")])
        j.write("id0", [(3, b"c")])
    meta = Path(jdir) / "meta"
    good = meta.read_bytes()
    # Zero meta's size field: the three blocks now sit past the committed size.
    meta.write_bytes(good[:4] + b"\0\0\0\0" + good[8:])
    with pytest.raises(CorruptFileError) as info:
        EventJournal.open(jdir)
    assert info.value.path.endswith("meta") and "salvage" in str(info.value)
    blocks = good[8:]
    size0 = int.from_bytes(blocks[:2], "big")  # every id here is 3 bytes: equal sizes
    only = {k: blocks[k * size0 : (k + 1) * size0] for k in range(3)}
    # Only id0 left (its last block ends the file): meta.crc checksums three ids,
    # meta has one (a crash leaves at most one id past the committed blocks).
    meta.write_bytes(good[:4] + size0.to_bytes(4, "big") + only[0])
    with pytest.raises(CorruptFileError, match="salvage"):
        EventJournal.open_read_only(jdir)
    with pytest.raises(CorruptFileError, match="salvage"):
        EventJournal.open(jdir)
    # Without meta.crc (a journal older than it) the other ids' blocks are in
    # nobody's chain, which verify() reports.
    crc = Path(jdir) / "meta.crc"
    saved = crc.read_bytes()
    crc.unlink()
    with EventJournal.open_read_only(jdir) as j, pytest.raises(CorruptFileError, match="orphan"):
        j.verify()
    crc.write_bytes(saved)
    # Only id2 left: id0's last batch would be cut, but it links back to a block
    # that is no id's last, which a crash cannot produce: refused.
    meta.write_bytes(good[:4] + size0.to_bytes(4, "big") + only[2])
    with pytest.raises(CorruptFileError) as info:
        EventJournal.open(jdir)
    # (meta's first block is now id2's, which fails id0's checksum in meta.crc)
    assert info.value.path.endswith("meta")
    # The files were not touched by the refused opens; salvage cuts on request.
    with EventJournal.open(jdir, salvage=True) as j:
        assert seqs(j, "id2") == [1, 2] and j.persistence_ids() == ["id2"]
        assert j.recovery.total("cut") > 0


def test_sync_never_crash_needs_salvage() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    with EventJournal.open("/db", fs=sim, preallocate=0) as j:
        j.write("a", [(1, b"x")])
        j.write("b", [(1, b"x")])
    j = EventJournal.open("/db", fs=sim, sync="never", preallocate=0)
    for s in range(2, 6):  # interleaved ids: unmistakably more than one batch
        j.write("a", [(s, b"x")])
        j.write("b", [(s, b"x")])
    image = sim.durable_image()  # the crash: nothing unsynced survived...
    files = dict(image.files)
    # ...except data's blocks, without the links to them (no order without syncs).
    data = bytearray(sim.snapshot()["/db/data"])
    data[8 + 12 : 8 + 16] = bytes(4)  # a1.next
    data[33 + 12 : 33 + 16] = bytes(4)  # b1.next
    files["/db/data"] = bytes(data)
    fs2 = SimFS.from_image(files, image.dirs)
    with pytest.raises(CorruptFileError):
        EventJournal.open("/db", fs=fs2)
    with EventJournal.open("/db", fs=fs2, salvage=True) as j2:
        assert seqs(j2, "a") == [1] and seqs(j2, "b") == [1] and j2.verify() == [str(a) for a in j2.recovery.actions]
    j.close()


def test_the_real_2gib_cap(tmp_path: Path) -> None:
    """A data file whose last block ends 100 bytes short of 2^31 - 1 (sparse)."""
    from engine.events.codec import MAX_DATA_SIZE

    last_at = MAX_DATA_SIZE - 100 - 25
    block = encode_block(last_at, 0, 0, 1, b"z")
    root = tmp_path / "j"
    root.mkdir()
    with open(root / "data", "wb") as out:
        out.write(encode_data_header(last_at + 25 - 8))
        out.seek(last_at)
        out.write(block)
    (root / "meta").write_bytes(encode_meta([MetaBlock("P", last_at, last_at, 1)]))
    # The checksum side files by hand: the zeros before the block are no block
    # (the writer would rebuild entries by walking blocks from offset 8), so one
    # entry covers them (its checksum is never checked here: replay reads only
    # the block) and one the block.
    from engine.events import sums

    (root / "data.crc").write_bytes(
        sums.encode_data_sums_header(2)
        + sums.encode_batch_sum(last_at, 8, 0)
        + sums.encode_batch_sum(last_at + 25, last_at, sums.batch_crc(block, 0, 0, len(block)))
    )
    (root / "meta.crc").write_bytes(sums.encode_header(sums.META_SUMS_MAGIC) + sums.encode_id_sum(b"P", 1))
    with EventJournal.open(str(root), preallocate=0) as j:
        assert j.committed_size == MAX_DATA_SIZE - 100
        with pytest.raises(FullError, match="2147483647"):
            j.write("P", [(2, b"x" * 100)])
        j.write("P", [(2, b"x" * 70)])  # 94 bytes: ends 6 bytes short of the cap
        assert [e.sequence_nr for e in j.replay("P")] == [1, 2]
        with pytest.raises(FullError):
            j.write("Q", [(1, b"")])


def test_sync_counts_per_batch_shape() -> None:
    """One fdatasync for a batch inside one sector, two otherwise, four for a new id
    (its meta.crc entry is synced before the meta size commits the id)."""
    from stress.faults import FaultyFS

    sim = SimFS()
    make_dirs(sim, "/db")
    counter = FaultyFS(sim, kinds=("fsync",))
    with EventJournal.open("/db", fs=counter, preallocate=4096) as j:
        j.write("a", [(1, b"x")])
        before = counter.ops
        j.write("a", [(2, b"y"), (3, b"z"), (4, b"w")])  # 3 x 25 bytes, inside one sector
        assert counter.ops - before == 1 and j.single_sync_batches == 1
        before = counter.ops
        j.write("a", [(5, b"p" * 600)])  # straddles a sector boundary
        assert counter.ops - before == 2
        before = counter.ops
        j.write("b", [(1, b"new id")])
        assert counter.ops - before == 4
    with EventJournal.open("/db", fs=sim) as j:
        assert seqs(j, "a") == [1, 2, 3, 4, 5] and not j.recovery.repaired


def test_writer_lock_is_the_lock_file_and_recovery_is_empty_when_clean(jdir: str) -> None:
    """The writer lock is ``DIR/.lock`` (named by LockedError); a new or cleanly
    closed journal reports no recovery; a reader's report is always empty."""
    with EventJournal.open(jdir) as j:
        assert not j.recovery.repaired and j.recovery.summary() == "clean"
        # The shared report replaced the journal's own recovery attributes.
        assert not any(hasattr(j, name) for name in ("recovered_bytes", "repairs", "rolled_forward"))
        j.write("a", [(1, b"1")])
        with pytest.raises(LockedError) as info:
            EventJournal.open(jdir)
        assert info.value.path == jdir + "/.lock"
        with EventJournal.open_read_only(jdir) as reader:
            assert not reader.recovery.repaired
    with EventJournal.open(jdir) as j:  # released on close
        assert j.recovery.actions == [] and j.stats()["recovery_actions"] == 0


def test_create_false_on_an_empty_directory_leaves_nothing(tmp_path: Path) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    with pytest.raises(FileNotFoundError, match="no such event journal"):
        EventJournal.open(str(d), create=False)
    assert list(d.iterdir()) == []


def test_stray_meta_tmp_is_removed_and_reported() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    with EventJournal.open("/db", fs=sim) as j:
        j.write("a", [(1, b"1")])
    with sim.open("/db/meta.tmp", "c") as handle:  # a crash during an atomic meta rewrite
        handle.write_at(0, b"APFM")
    with EventJournal.open("/db", fs=sim) as j:
        assert [(a.kind, a.path, a.count, a.unit) for a in j.recovery.actions] == [
            ("removed", "/db/meta.tmp", 1, "files")]
        assert seqs(j, "a") == [1]
    assert not sim.exists("/db/meta.tmp")


def test_format_handler_reads_through_the_given_file_system() -> None:
    """The handler's callbacks take the file system first: a journal that exists
    only in the crash simulator is recognised, summarised and verified."""
    from engine.events.handler import HANDLER

    sim = SimFS()
    make_dirs(sim, "/db")
    with EventJournal.open("/db", fs=sim) as j:
        j.write("a", [(1, b"1"), (2, b"2")])
    assert HANDLER.sniff(sim, "/db", b"", True)
    assert not HANDLER.sniff(sim, "/", b"", True)
    with sim.open("/db/data") as handle:
        head = handle.read_at(0, 64)
    assert HANDLER.sniff(sim, "/db/data", head, False)
    summary = HANDLER.stats(sim, "/db")
    assert summary["persistence_ids"] == 1 and summary["live_events"] == 2
    assert HANDLER.stats(sim, "/db/meta")["persistence_ids"] == 1
    assert HANDLER.verify(sim, "/db") == []
    assert HANDLER.verify(sim, "/db/data") == []
