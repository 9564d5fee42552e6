"""The crash simulator's model of what survives a power loss."""

from __future__ import annotations

import errno

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import LockedError, PoisonedError
from engine.fs import FileHandle, OpenMode, make_dirs
from stress.attack_sim import current_image
from stress.faults import FaultyFS, OpKind
from stress.simevents import Mark, Sync, Truncate, Write
from stress.simfs import CrashState, SimFS


def states(sim: SimFS, **kw):  # type: ignore[no-untyped-def]
    return list(sim.crash_states(**kw))


def test_behaves_like_a_file_system() -> None:
    sim = SimFS()
    make_dirs(sim, "/a/b")
    with sim.open("/a/b/f", OpenMode.NEW) as f:
        f.append(b"hello")
        f.write_at(10, b"x")
        assert f.read_all() == b"hello\0\0\0\0\0x"
    sim.rename("/a/b/f", "/a/g")
    assert sim.listdir("/a") == ["b", "g"]
    assert sim.file_size("/a/g") == 11
    sim.unlink("/a/g")
    assert not sim.exists("/a/g")
    with pytest.raises(FileNotFoundError):
        sim.open("/a/g")
    with pytest.raises(FileNotFoundError):
        sim.open("/nope/x", OpenMode.CREATE)
    with pytest.raises(OSError) as info:
        sim.rmdir("/a")
    assert info.value.errno == errno.ENOTEMPTY


def test_unsynced_write_may_be_lost_synced_one_not() -> None:
    sim = SimFS()
    make_dirs(sim, "/d")
    f = sim.open("/d/f", OpenMode.NEW)
    sim.fsync_dir("/d")
    f.append(b"A" * 100)
    f.fsync()
    f.append(b"B" * 100)
    final = states(sim, points=[len(sim.trace)])
    contents = {s.files["/d/f"] for s in final}
    assert contents == {b"A" * 100, b"A" * 100 + b"B" * 100}


def test_torn_write_at_sector_boundaries() -> None:
    sim = SimFS()
    make_dirs(sim, "/d")
    f = sim.open("/d/f", OpenMode.NEW)
    sim.fsync_dir("/d")
    f.fsync()
    f.append(b"x" * 1500)
    final = {s.files["/d/f"] for s in states(sim, points=[len(sim.trace)])}
    assert b"" in final and b"x" * 1500 in final
    assert b"x" * 512 + bytes(988) in final
    assert b"x" * 1024 + bytes(476) in final
    assert any(c.startswith(b"x" * 512) and c[512:] not in (bytes(988), b"x" * 988) for c in final), "garbage tear"


def test_directory_entry_needs_directory_fsync() -> None:
    sim = SimFS()
    make_dirs(sim, "/d")
    with sim.open("/d/f", OpenMode.NEW) as f:
        f.append(b"data")
        f.fsync()
    end = states(sim, points=[len(sim.trace)])
    assert {("/d/f" in s.files) for s in end} == {True, False}
    sim.fsync_dir("/d")
    end = states(sim, points=[len(sim.trace)])
    assert [s.files["/d/f"] for s in end] == [b"data"]


def test_new_directory_lost_takes_its_files() -> None:
    sim = SimFS()
    sim.mkdir("/d")  # parent "/" not fsynced
    with sim.open("/d/f", OpenMode.NEW) as f:
        f.fsync()
    sim.fsync_dir("/d")
    end = states(sim, points=[len(sim.trace)])
    assert any("/d" not in s.dirs and "/d/f" not in s.files for s in end)


def test_marks_travel_with_states() -> None:
    sim = SimFS()
    make_dirs(sim, "/d")
    sim.mark("one")
    with sim.open("/d/f", OpenMode.NEW) as f:
        f.append(b"1")
        f.fsync()
    sim.fsync_dir("/d")
    sim.mark("two")
    all_states = states(sim)
    assert all_states[-1].marks == ["one", "two"]
    assert all(s.marks == ["one"] for s in all_states if s.index < len(sim.trace) - 1 and s.index > 2)


def test_sampling_is_seeded_and_bounded() -> None:
    sim = SimFS()
    make_dirs(sim, "/d")
    handles = [sim.open(f"/d/f{i}", OpenMode.NEW) for i in range(4)]
    for round_ in range(6):
        for h in handles:
            h.append(bytes([round_]) * 700)
    a = [s.digest() for s in sim.crash_states(limit=50, seed=3)]
    stats = sim.last_stats
    b = [s.digest() for s in sim.crash_states(limit=50, seed=3)]
    assert stats is not None and not stats.exhaustive and stats.seed == 3
    assert a == b
    assert 0 < len(a) <= 50 < stats.possible


def test_from_image_and_materialize(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sim = SimFS.from_image({"/d/x": b"1", "/y": b"2"}, {"/", "/d"})
    assert sim.open("/d/x").read_all() == b"1"
    (state,) = list(sim.crash_states())
    state.materialize(str(tmp_path))
    assert (tmp_path / "d" / "x").read_bytes() == b"1"
    assert (tmp_path / "y").read_bytes() == b"2"


def test_locks_are_modelled() -> None:
    sim = SimFS()
    a = sim.open("/l", OpenMode.CREATE)
    b = sim.open("/l", OpenMode.CREATE)
    a.lock(exclusive=True)
    with pytest.raises(LockedError):
        b.lock(exclusive=False)
    a.close()
    b.lock(exclusive=False)


def test_faulty_over_sim() -> None:
    sim = SimFS()
    faulty = FaultyFS(sim, fail_at=1)
    with pytest.raises(OSError):
        faulty.mkdir("/d")
    assert not sim.exists("/d")


def _apply(data: bytes, op: tuple[str, int, bytes]) -> bytes:
    kind, offset, payload = op
    if kind == "append":
        return data + payload
    return data[:offset] + bytes(max(0, offset - len(data)))


def _legal(got: bytes, synced: bytes, later: list[tuple[str, int, bytes]]) -> bool:
    """``got`` is ``synced`` plus a prefix of ``later``, the last one possibly torn."""
    cands = [synced]
    for op in later:
        cands.append(_apply(cands[-1], op))
    if got in cands:
        return True
    for j, (kind, _, payload) in enumerate(later):
        if kind != "append":
            continue
        start, after = len(cands[j]), cands[j + 1]
        if len(got) != len(after) or got[:start] != after[:start]:
            continue
        for cut in range((start // 512 + 1) * 512, start + len(payload), 512):
            if got[:cut] == after[:cut]:
                return True
    return False


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "fsync", "trunc"]), st.binary(min_size=1, max_size=1100)),
                max_size=6))
def test_durable_prefix_property(ops) -> None:  # type: ignore[no-untyped-def]
    """Whatever the crash, a file holds its last fsynced contents plus a prefix of
    the later operations, the last one possibly torn: never anything else."""
    sim = SimFS()
    make_dirs(sim, "/d")
    f = sim.open("/d/f", OpenMode.NEW)
    sim.fsync_dir("/d")
    f.fsync()
    history: list[tuple[int, bytes, list[tuple[str, int, bytes]]]] = [(len(sim.trace), b"", [])]
    for kind, data in ops:
        if kind == "append":
            f.append(data)
            history[-1][2].append(("append", 0, data))
        elif kind == "trunc":
            f.truncate(len(data) // 2)
            history[-1][2].append(("trunc", len(data) // 2, b""))
        else:
            f.fsync()
            history.append((len(sim.trace), f.read_all(), []))
    for state in sim.crash_states(limit=400, seed=1, points=range(history[0][0], len(sim.trace) + 1)):
        epoch = max(h for h in history if h[0] <= state.index)
        taken = sum(1 for e in sim.trace[epoch[0] : state.index] if isinstance(e, Write | Truncate))
        assert _legal(state.files["/d/f"], epoch[1], epoch[2][:taken]), state.describe()


def _synced_a_file() -> tuple[SimFS, FileHandle]:
    """A simulator with /d/f holding 1,024 bytes of "A", all durable."""
    sim = SimFS()
    make_dirs(sim, "/d")
    f = sim.open("/d/f", OpenMode.NEW)
    sim.fsync_dir("/d")
    f.write_at(0, b"A" * 1024)
    f.fsync()
    return sim, f


def test_durable_write_survives_when_earlier_writes_are_lost() -> None:
    """An O_DSYNC write is durable by itself: every crash after it keeps it, while
    an unsynced write before it may be lost; before it returned it is an ordinary
    unsynced write (kept in order, or torn)."""
    sim, f = _synced_a_file()
    f.write_at(0, b"B" * 10)  # unsynced
    f.write_durable_at(512, [b"C" * 512, b"D" * 512])
    base = b"A" * 512 + b"C" * 512 + b"D" * 512
    after = {s.files["/d/f"] for s in states(sim, points=[len(sim.trace)])}
    assert after == {base, b"B" * 10 + base[10:]}
    between = {s.files["/d/f"] for s in states(sim, points=[len(sim.trace) - 1])}  # written, not yet synced
    assert b"A" * 1024 in between and b"B" * 10 + base[10:] in between and base not in between
    assert any(c[512:1024] == b"C" * 512 and c[1024:] != b"D" * 512 for c in between), "torn at 1024"


def test_parts_write_is_one_unsynced_write() -> None:
    """``write_parts_at`` is one write of the joined parts: lost, kept or torn by a
    crash before the next sync, durable after it."""
    sim, f = _synced_a_file()
    f.write_parts_at(256, [b"B" * 256, bytearray(b"C" * 256), memoryview(b"D" * 256)])
    assert f.read_all() == b"A" * 256 + b"B" * 256 + b"C" * 256 + b"D" * 256
    assert isinstance(sim.trace[-1], Write) and sim.trace[-1].data == b"B" * 256 + b"C" * 256 + b"D" * 256
    before = {s.files["/d/f"] for s in states(sim, points=[len(sim.trace)])}
    assert b"A" * 1024 in before and f.read_all() in before
    f.fsync()
    assert {s.files["/d/f"] for s in states(sim, points=[len(sim.trace)])} == {f.read_all()}


def _digest(files: dict[str, bytes], dirs: set[str]) -> str:
    return CrashState(0, files, dirs, [], "", "").digest()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sampling_always_includes_both_extremes_of_every_crash_point(seed: int) -> None:
    """Far more crash points than ``limit`` (the old sampler then dropped half of
    the points): still, at every point, the image where nothing unsynced survived
    and the one where everything did (whole) are among the states."""
    sim = SimFS()
    make_dirs(sim, "/d")
    handles = [sim.open(f"/d/f{i}", OpenMode.NEW) for i in range(3)]
    expected: set[str] = set()
    for round_ in range(40):
        h = handles[round_ % 3]
        h.append(bytes([round_]) * 1300)  # tearable: the "everything" option is not the last one
        if round_ % 7 == 6:
            h.fsync()
        if round_ % 11 == 10:
            sim.fsync_dir("/d")
        if round_ % 13 == 12:
            h.truncate(700)
        expected.add(sim.durable_image().digest())
        expected.add(_digest(*current_image(sim)))
    got = {s.digest() for s in sim.crash_states(limit=30, seed=seed)}
    stats = sim.last_stats
    assert stats is not None and not stats.exhaustive and stats.operations > 30
    assert expected <= got, f"{len(expected - got)} extreme images missing"


def test_trace_holds_typed_events() -> None:
    sim, f = _synced_a_file()
    sim.mark("acked")
    f.truncate(10)
    trace = sim.trace
    assert isinstance(trace[-2], Mark) and trace[-2].label == "acked"
    assert trace[-1] == Truncate(trace[-3].ino, 10) and isinstance(trace[-3], Sync)  # type: ignore[union-attr]
    assert sim.operation_count() == len(trace) - 1
    with pytest.raises(AttributeError):
        trace[-1].size = 3  # type: ignore[misc]  # frozen


def test_faulty_delegates_block_size_and_durable_writes() -> None:
    class Blocky(SimFS):
        def block_size(self, path: str) -> int:
            return 65536

    sim = Blocky()
    faulty = FaultyFS(sim)
    assert faulty.block_size("/") == 65536
    make_dirs(faulty, "/d")
    with faulty.open("/d/f", OpenMode.NEW) as f:
        f.fsync()
        faulty.fsync_dir("/d")
        f.write_at(0, b"A" * 10)  # unsynced
        f.write_durable_at(512, [b"C" * 512])
    # The simulator saw a durable write (those bytes only), not a whole-file sync.
    after = {s.files["/d/f"] for s in states(sim, points=[len(sim.trace)])}
    assert after == {bytes(512) + b"C" * 512, b"A" * 10 + bytes(502) + b"C" * 512}
    assert [e.kind for e in faulty.log[-2:]] == [OpKind.WRITE, OpKind.FSYNC]


def test_faulty_durable_write_that_fails_its_sync_is_written_not_durable() -> None:
    sim, _ = _synced_a_file()
    faulty = FaultyFS(sim, kinds=("fsync",))
    f = faulty.open("/d/f", OpenMode.WRITE)
    faulty.fail_at = 1
    with pytest.raises(PoisonedError):
        f.write_durable_at(0, [b"Z" * 512])
    assert sim.open("/d/f").read_at(0, 512) == b"Z" * 512
    assert faulty.failed_since(0, OpKind.FSYNC)[0].path == "/d/f"
    after = {s.files["/d/f"] for s in states(sim, points=[len(sim.trace)])}
    assert b"A" * 1024 in after  # not durable: the crash may lose it
