"""Issue "Zero silent wrong answers", the queue's share: each defect an adversarial
run reproduced, pinned by a test that fails on the previous version.

1. Readers delivered damaged bytes from checksummed writer files (only verify()
   noticed): every read path now checks the CHECK records it passes.
2. Queue names whose files collide with another queue's (``a`` and ``a.read``),
   over-long names and bad ``expired=`` / ``error_queue=`` targets: ConfigError
   before any file is created.
3. A reader refused a valid file holding an item over its own max_item_size;
   creating N readers cost O(N) directory listings each.
4. A full disk: DiskFullError from every write path, every time, and a reopen
   after space is freed recovers.
5. Reader checkpoints carry a checksum: damage to them is detected.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from engine.errors import ConfigError, CorruptFileError, DiskFullError, FormatError, PoisonedError
from engine.fs import FileSystem, make_dirs
from engine.queue import Queue, codec, repair
from engine.queue import queue as queue_module
from engine.queue.diagnose import iter_file_records, queue_names
from stress.faults import FaultyFS
from stress.simfs import SimFS

NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0}
READER = "/db/q.read."


def new_sim() -> SimFS:
    sim = SimFS()
    make_dirs(sim, "/db")
    return sim


def read_file(sim: SimFS, path: str) -> bytes:
    with sim.open(path) as h:
        return h.read_all()


def write_file(sim: SimFS, path: str, data: bytes) -> None:
    with sim.open(path, "c") as h:
        h.truncate(0)
        h.write_at(0, data)
        h.fsync()


# -- 1. readers verify the CHECK records ------------------------------------------------


def _sealed_file_queue() -> tuple[SimFS, str, dict[int, bytes]]:
    """A queue whose first writer file is sealed (a later one exists), holding three
    single-put batches and one batch of two."""
    sim = new_sim()
    q = Queue.open("/db", "q", fs=sim, journal_size=256, **NOCKPT)
    items = {q.put(b"alpha-%d" % i * 3): b"alpha-%d" % i * 3 for i in range(3)}
    items.update(zip(q.put_many([b"bb", b"ccc"]), [b"bb", b"ccc"], strict=True))
    first = q.journal_files[0]
    while len(q.journal_files) < 2:
        xid = q.put(b"later" * 10)
        items[xid] = b"later" * 10
    q.close()
    return sim, first, items


def _drain(reader: Any) -> list[tuple[int, bytes]]:
    got = []
    while (item := reader.get(timeout=0)) is not None:
        got.append((item.id, item.data))
        reader.confirm(item.id)
    return got


def _writer_reads(sim: SimFS, path: str) -> list[tuple[int, bytes]]:
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    try:
        return _drain(q.reader())
    finally:
        for reader in q.readers.values():
            reader.close(checkpoint_first=False)  # nothing confirmed reaches the disk
        q.close()


def _remote_reads(sim: SimFS, path: str) -> list[tuple[int, bytes]]:
    r = Queue.open_reader("/db", "q", "", fs=sim, **NOCKPT)
    try:
        return _drain(r)
    finally:
        r.close(checkpoint_first=False)


def _dumped(sim: SimFS, path: str) -> list[tuple[int, bytes]]:
    return [(r.xid, r.data) for _, r in iter_file_records(sim, path) if isinstance(r, codec.Put)]


def _each_byte_damaged(
    sim: SimFS, path: str, pristine: bytes, masks: Sequence[int] = (0x01, 0x80)
) -> Iterator[tuple[int, int]]:
    """Write ``pristine`` to ``path`` with the byte at each offset in turn xored
    with each mask, yielding ``(offset, mask)``; the pristine bytes are written
    back after each."""
    for offset in range(len(pristine)):
        for mask in masks:
            damaged = bytearray(pristine)
            damaged[offset] ^= mask
            write_file(sim, path, bytes(damaged))
            try:
                yield offset, mask
            finally:
                write_file(sim, path, pristine)


def test_no_read_path_delivers_a_damaged_byte_of_a_sealed_file() -> None:
    """Every single-byte damage of a sealed writer file: the writer's own reader, a
    reader in another process and the file dump either raise CorruptFileError (a
    FormatError for the magic) or deliver exactly what was put, never other bytes."""
    sim, first, items = _sealed_file_queue()
    pristine = read_file(sim, first)
    caught = 0
    for offset, mask in _each_byte_damaged(sim, first, pristine):
        for read in (_writer_reads, _remote_reads, _dumped):
            try:
                got = read(sim, first)
            except CorruptFileError:  # FormatError included
                caught += 1
                continue
            assert all(items.get(xid) == data for xid, data in got), (offset, mask, got)
    assert caught > len(pristine)  # the damage was met, not skipped


def test_items_checked_before_damage_are_delivered_before_the_error() -> None:
    """Damage in the last batch of a sealed file: a reader first delivers the items
    the CHECKs before it vouched for (decoded in the same read as the damage), then
    raises CorruptFileError at the damage, and again on the next get; and the open
    that lists the files (each file's first id) is not stopped by it."""
    sim, first, items = _sealed_file_queue()
    pristine = read_file(sim, first)
    damaged = bytearray(pristine)
    damaged[len(pristine) - 12] ^= 0x01  # inside the batch of two (its last payload bytes)
    write_file(sim, first, bytes(damaged))
    writer = Queue.open("/db", "q", fs=sim, **NOCKPT)
    try:
        for opened in (writer.reader, lambda: Queue.open_reader("/db", "q", "", fs=sim, **NOCKPT)):
            r = opened()
            got = []
            with pytest.raises(CorruptFileError):
                while (item := r.get(timeout=0)) is not None:
                    got.append(item.data)
            assert got == [items[xid] for xid in (1, 2, 3)]  # the batch of two is the damaged one
            with pytest.raises(CorruptFileError):
                r.get(timeout=0)
            r.close(checkpoint_first=False)
    finally:
        writer.close()


def test_damage_in_the_newest_file_is_never_a_silent_cut(caplog: pytest.LogCaptureFixture) -> None:
    """Every single-byte damage of the newest writer file (no writer open), read by
    a reader in another process polling with no wait: an error, exactly what was
    put, or fewer items *with* the torn-tail warning, never fewer items silently.
    (A reader that rewound to the last CHECK used to return "nothing now" there,
    so a caller polling with ``timeout=0`` saw the rest of the file missing.)"""
    sim = new_sim()
    q = Queue.open("/db", "q", fs=sim, sync="always", **NOCKPT)
    items = {q.put(b"item-%d" % i * 4): b"item-%d" % i * 4 for i in range(5)}
    newest = q.journal_files[-1]
    q.close()
    pristine = read_file(sim, newest)
    assert sorted(_remote_reads(sim, newest)) == sorted(items.items())
    errors = 0
    for offset, mask in _each_byte_damaged(sim, newest, pristine):
        caplog.clear()
        try:
            got = _remote_reads(sim, newest)
        except CorruptFileError:
            errors += 1
            continue
        assert all(items.get(xid) == data for xid, data in got), (offset, mask, got)
        if len(got) < len(items):
            assert "not a whole, checked write" in caplog.text, (offset, mask, got)
    assert errors > len(pristine)


def test_a_reader_does_not_deliver_records_no_check_vouches_for() -> None:
    """A sealed file ending in records without their CHECK (damage: the writer ends
    every write with one) is an error naming where they start, not delivered."""
    sim, first, _ = _sealed_file_queue()
    data = read_file(sim, first)
    extra = codec.encode_put(999, 1, b"unvouched")
    write_file(sim, first, data + extra)
    r = Queue.open_reader("/db", "q", "", fs=sim, **NOCKPT)
    with pytest.raises(CorruptFileError) as info:
        _drain(r)
    assert info.value.path == first and info.value.offset == len(data)
    r.close(checkpoint_first=False)


def test_dump_of_a_damaged_file_exits_non_zero_without_printing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main

    d = str(tmp_path)
    q = Queue.open(d, "jobs", **NOCKPT)
    q.put(b"first-item")
    q.put(b"secret-item")
    path = q.journal_files[0]
    q.close()
    data = bytearray(Path(path).read_bytes())
    data[data.index(b"secret") + 2] ^= 0x20  # "secret" -> "seCret"
    Path(path).write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["queue", "dump", path]) != 0
    out = capsys.readouterr()
    assert "first-item" in out.out and "seCret" not in out.out + out.err
    assert main(["queue", "dump", d, "jobs"]) != 0
    out = capsys.readouterr()
    assert "seCret" not in out.out + out.err


def test_libkestrel_files_without_checks_are_still_read() -> None:
    """A writer file with no CHECK records (libkestrel's) cannot be verified: its
    records are delivered as before."""
    sim = new_sim()
    records = codec.encode_put(1, 5, b"from") + codec.encode_put(2, 6, b"libkestrel")
    write_file(sim, "/db/q.1", codec.WRITER_MAGIC + records)
    write_file(sim, READER, codec.READER_MAGIC + codec.encode_read_head(0))
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert _drain(q.reader()) == [(1, b"from"), (2, b"libkestrel")]
    q.close()


# -- 2. names ---------------------------------------------------------------------------


def test_a_queue_named_like_another_queues_reader_files_is_refused() -> None:
    sim = new_sim()
    q = Queue.open("/db", "a", fs=sim, **NOCKPT)
    q.put(b"x")
    q.reader("first")  # takes over the default reader: it has item 1
    q.reader("5")  # a.read.5: would be writer file 5 of a queue "a.read"
    q.close()
    before = sorted(sim.listdir("/db"))
    for bad in ("a.read", "a.read.x", "a.rlock", "b.rlock.c"):
        with pytest.raises(ConfigError, match="collide"):
            Queue.open("/db", bad, fs=sim, **NOCKPT)
        with pytest.raises(ConfigError, match="collide"):
            Queue.open_reader("/db", bad, "", fs=sim, **NOCKPT)
        with pytest.raises(ConfigError, match="collide"):
            repair(sim, "/db", bad)
    assert sorted(sim.listdir("/db")) == before  # not even a lock file
    q = Queue.open("/db", "a", fs=sim, **NOCKPT)
    assert q.reader("5").get(0) is None and _drain(q.reader("first")) == [(1, b"x")]
    assert q.verify() == []
    q.close()
    assert queue_names(sim, "/db") == ["a"]  # a.read.5 is not a queue "a.read"
    for fine in ("read", "a.reader", "a.5", "a.lock"):
        Queue.open("/db", fine, fs=sim, **NOCKPT).close()


def test_over_long_names_are_config_errors_not_enametoolong(tmp_path: Path) -> None:
    d = str(tmp_path)
    with pytest.raises(ConfigError, match="too long"):
        Queue.open(d, "q" * 300, **NOCKPT)
    with pytest.raises(ConfigError, match="too long"):
        Queue.open_reader(d, "q" * 300, "", **NOCKPT)
    q = Queue.open(d, "q" * 200, **NOCKPT)  # the longest names still fit
    with pytest.raises(ConfigError, match="too long"):
        q.reader("r" * 300)
    with pytest.raises(ConfigError, match="too long"):
        Queue.open_reader(d, "q" * 200, "r" * 60, **NOCKPT)
    q.put(b"still fine")
    q.close()


@pytest.mark.parametrize(
    "option,target,why",
    [
        ("expired", "q", "own queue"),
        ("error_queue", "q", "own queue"),
        ("expired", "q.read", "collide"),
        ("error_queue", "x/y", "invalid"),
        ("error_queue", "", "invalid"),
        ("expired", "e" * 300, "too long"),
    ],
)
def test_punt_targets_are_checked_at_open(option: str, target: str, why: str) -> None:
    sim = new_sim()
    extra: dict[str, Any] = {option: target}
    if option == "error_queue":
        extra["max_errors"] = 1
    with pytest.raises(ConfigError, match=why):
        Queue.open("/db", "q", fs=sim, **NOCKPT, **extra)
    with pytest.raises(ConfigError, match=why):
        Queue.open_reader("/db", "q", "", fs=sim, **NOCKPT, **extra)
    assert sim.listdir("/db") == []


# -- 3. limits ----------------------------------------------------------------------------


def test_a_reader_reads_an_item_bigger_than_its_own_max_item_size() -> None:
    """max_item_size is what a writer accepts; a valid file holding a bigger item
    (from a writer configured for more) is read by every reader and by a writer
    reopened with the default (its recovery must not cut it as a torn tail)."""
    sim = new_sim()
    big = bytes(range(256)) * 20  # 5120 bytes
    q = Queue.open("/db", "q", fs=sim, max_item_size=10_000, **NOCKPT)
    q.put(big)
    q.close()
    small: dict[str, Any] = {"max_item_size": 1000, **NOCKPT}
    remote = Queue.open_reader("/db", "q", "", fs=sim, **small)
    assert _drain(remote) == [(1, big)]
    remote.close(checkpoint_first=False)
    q = Queue.open("/db", "q", fs=sim, **small)
    assert q.recovery.summary() == "clean"
    assert q.verify() == []
    assert _drain(q.reader()) == [(1, big)]
    with pytest.raises(ConfigError):
        q.put(big)  # the writer's limit still holds for what it accepts
    q.close()


class CountingFS(FaultyFS):
    """Counts every file-system call and every name a listing returns."""

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner, kinds=())
        self.calls = 0
        self.listed = 0

    def __getattribute__(self, name: str) -> Any:
        if name in ("open", "exists", "isdir", "listdir", "file_size", "rename", "unlink", "fsync_dir", "mkdir"):
            object.__setattr__(self, "calls", object.__getattribute__(self, "calls") + 1)
        return object.__getattribute__(self, name)

    def listdir(self, path: str) -> list[str]:
        names = super().listdir(path)
        self.listed += len(names)
        return names


def _cost_of_creating_readers(n: int, keep_default: bool = False) -> float:
    counting = CountingFS(new_sim())
    q = Queue.open("/db", "q", fs=counting, **NOCKPT)
    q.put(b"x")
    if keep_default:
        q.reader()  # the default reader stays, beside the named ones
    q.reader("first")  # takes over the default reader (unless it is held)
    before = counting.calls + counting.listed
    for i in range(n):
        q.reader(f"r{i}")
    cost = (counting.calls + counting.listed - before) / n
    q.close()
    return cost


def test_creating_n_readers_costs_a_constant_number_of_operations_each() -> None:
    """Linear, not quadratic: the per-reader count of file-system calls plus names
    listed is the same for 400 readers as for 50 (each listing used to return
    every reader file: O(N) names per new reader)."""
    small, large = _cost_of_creating_readers(50), _cost_of_creating_readers(400)
    assert large <= small * 1.1, (small, large)
    # Also while the default reader's file exists beside the named readers (the
    # only case in which a new reader may list the directory, to see whether it
    # can take the default over).
    small, large = _cost_of_creating_readers(50, keep_default=True), _cost_of_creating_readers(400, keep_default=True)
    assert large <= small * 1.1, (small, large)


# -- 4. a full disk ------------------------------------------------------------------------


def _puts_with_full_disk(sim: SimFS, kinds: tuple[str, ...], sync: Any) -> tuple[list[bytes], list[BaseException]]:
    ffs = FaultyFS(sim, errno=errno.ENOSPC, persistent=True, kinds=kinds)
    q = Queue.open("/db", "q", fs=ffs, sync=sync, journal_size=512, **NOCKPT)
    q.reader()
    durable: list[bytes] = []
    errors: list[BaseException] = []
    ffs.fail_at = ffs.ops + 6
    for i in range(20):
        data = b"item-%02d" % i * 8
        try:
            q.put(data)
            if sync != "always":
                q.sync()
            durable.append(data)
        except Exception as exc:
            errors.append(exc)
    for call in (q.checkpoint, q.sync, lambda: q.put_many([b"z"])):
        try:
            call()
        except Exception as exc:
            errors.append(exc)
    try:
        q.close()
    except Exception as exc:
        errors.append(exc)
    return durable, errors


@pytest.mark.parametrize("kinds", [("write",), ("fsync",), ("write", "fsync")])
@pytest.mark.parametrize("sync", ["always", 3600.0])
def test_a_full_disk_is_disk_full_error_every_time_and_reopen_recovers(kinds: tuple[str, ...], sync: Any) -> None:
    sim = new_sim()
    durable, errors = _puts_with_full_disk(sim, kinds, sync)
    assert errors and durable
    for exc in errors:  # never a raw OSError, never a generic PoisonedError
        assert isinstance(exc, DiskFullError) and isinstance(exc, PoisonedError), repr(exc)
        assert exc.errno == errno.ENOSPC
    q = Queue.open("/db", "q", fs=sim, journal_size=512, **NOCKPT)  # space freed
    got = [data for _, data in _drain(q.reader())]
    assert got[: len(durable)] == durable and len(got) <= len(durable) + 1
    assert q.verify() == []
    q.put(b"after")
    q.close()


@pytest.mark.parametrize("kind", ["mkdir", "write", "fsync_dir"])
def test_a_full_disk_while_opening_is_disk_full_error(kind: str) -> None:
    """Creating the directory, the lock file, the first writer file: the seam types
    the failure (the queue keeps no wrapper of its own)."""
    ffs = FaultyFS(SimFS(), errno=errno.ENOSPC, fail_at=1, kinds=(kind,))
    with pytest.raises(DiskFullError):
        Queue.open("/db/sub", "q", fs=ffs, **NOCKPT)


@pytest.mark.parametrize("kind", ["write", "rename", "unlink", "fsync_dir"])
def test_a_full_disk_in_checkpoints_rotation_and_retirement_is_disk_full_error(kind: str) -> None:
    """Every file-system call of the write side (a reader file's temporary and its
    rename, a new writer file, deleting passed files, the directory syncs) meets a
    full disk as DiskFullError, never a raw OSError; a reopen has everything."""
    sim = new_sim()
    ffs = FaultyFS(sim, errno=errno.ENOSPC, persistent=True, kinds=(kind,))
    q = Queue.open("/db", "q", fs=ffs, journal_size=256, **NOCKPT)
    r = q.reader()
    ffs.fail_at = ffs.ops + 1
    errors: list[BaseException] = []
    durable: list[bytes] = []
    for i in range(12):
        data = b"item-%02d" % i * 4
        try:
            q.put(data)
            durable.append(data)
            item = r.get(0)
            if item is not None:
                r.confirm(item.id)
            q.checkpoint()
        except Exception as exc:
            errors.append(exc)
    try:
        q.close()
    except Exception as exc:
        errors.append(exc)
    assert errors, ffs.log
    assert all(isinstance(exc, DiskFullError) for exc in errors), [repr(e) for e in errors]
    q = Queue.open("/db", "q", fs=sim, journal_size=256, **NOCKPT)
    assert q.verify() == []
    q.close()


def test_threads_sharing_a_failed_group_commit_all_see_disk_full() -> None:
    sim = new_sim()
    ffs = FaultyFS(sim, errno=errno.ENOSPC, persistent=True, kinds=("fsync",))
    q = Queue.open("/db", "q", fs=ffs, sync="always", **NOCKPT)
    ffs.fail_at = ffs.ops + 3
    errors: list[BaseException] = []

    def work() -> None:
        for i in range(20):
            try:
                q.put(b"t%d" % i)
            except Exception as exc:
                errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    q.close()
    assert errors and all(isinstance(e, DiskFullError) for e in errors), {type(e) for e in errors}


def test_background_checkpoints_go_on_after_a_full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint loop used to stop for good at its first failure; it keeps
    the failure, and resumes once space is freed."""
    sim = new_sim()
    ffs = FaultyFS(sim, errno=errno.ENOSPC, persistent=True)
    q = Queue.open("/db", "q", fs=ffs, **NOCKPT)
    r = q.reader()
    q.put(b"a")
    item = r.get(0)
    assert item is not None
    r.confirm(item.id)
    rounds = iter([False, False, True])  # two rounds, then stop

    class Stop:
        def wait(self, timeout: float) -> bool:
            seen.append(q.checkpoint_failure)
            if next_round[0] == 1:
                ffs.fail_at, ffs.persistent = None, False  # space freed after round 1
            next_round[0] += 1
            return next(rounds)

    next_round = [0]
    seen: list[BaseException | None] = []
    ffs.fail_at = ffs.ops + 1
    background = q._stop
    q._stop = Stop()  # type: ignore[assignment]
    # One wait per round (the loop's rounds also end early when a consumer asks to share).
    monkeypatch.setattr(queue_module, "wait_round", lambda stop, interval: not stop.wait(interval))
    q._checkpoint_loop()  # here, in this thread: round 1 fails, round 2 works
    q._stop = background
    assert seen[0] is None and isinstance(seen[1], DiskFullError)  # round 1 failed...
    assert q.checkpoint_failure is None and r.durable_head == 1  # ...round 2 checkpointed
    q.close()


# -- 5. reader checkpoints carry a checksum ---------------------------------------------------


def _confirmed_queue() -> SimFS:
    sim = new_sim()
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    q.put_many([b"%d" % i for i in range(1, 7)])
    r = q.reader()
    items = [r.get(0) for _ in range(5)]
    r.confirm([items[0].id, items[1].id, items[3].id])  # type: ignore[union-attr]
    q.close()
    return sim


def test_every_flipped_bit_of_a_reader_checkpoint_is_detected() -> None:
    """Head 2 and done id 4: flipping any bit used to be read as another head or
    done id whenever the result stayed within the crash window (items skipped or
    redelivered silently).  Now each is CorruptFileError (FormatError for the magic)
    on open, naming the reader file."""
    sim = _confirmed_queue()
    pristine = read_file(sim, READER)
    assert codec.decode_reader_file(pristine) == (2, [4])
    for _ in _each_byte_damaged(sim, READER, pristine, masks=[1 << bit for bit in range(8)]):
        with pytest.raises(CorruptFileError) as info:
            Queue.open("/db", "q", fs=sim, **NOCKPT)
        assert info.value.path == READER
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert [i.data for i in q.reader()] == [b"3", b"5", b"6"]
    q.close()


def test_old_reader_checkpoints_without_a_checksum_still_open_and_repair_resets_damage() -> None:
    sim = _confirmed_queue()
    write_file(sim, READER, codec.READER_MAGIC + codec.encode_read_head(2) + codec.encode_read_done([4]))
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    r = q.reader()
    assert r.head == 2 and r.done_ids == (4,)
    r.checkpoint(force=True)  # rewritten with its checksum
    q.close()
    assert read_file(sim, READER) == codec.encode_reader_file(2, [4])
    damaged = bytearray(read_file(sim, READER))
    damaged[14] ^= 0x01  # head 2 -> 3
    write_file(sim, READER, bytes(damaged))
    with pytest.raises(CorruptFileError):
        Queue.open("/db", "q", fs=sim, **NOCKPT)
    (reset,) = repair(sim, "/db", "q").of("reset")
    assert reset.path == READER
    q = Queue.open("/db", "q", fs=sim, **NOCKPT)
    assert [i.data for i in q.reader()] == [b"%d" % i for i in range(1, 7)]  # redelivered, none skipped
    q.close()


def test_a_reader_file_truncated_to_its_magic_is_corrupt() -> None:
    sim = _confirmed_queue()
    write_file(sim, READER, codec.READER_MAGIC)
    with pytest.raises((CorruptFileError, FormatError)):
        Queue.open("/db", "q", fs=sim, **NOCKPT)


def test_a_damaged_first_check_does_not_make_a_file_read_unverified() -> None:
    """The empty CHECK first says "this file uses CHECKs"; damaged, the file must not
    be read as a libkestrel file (no verification): it holds valid CHECKs later."""
    sim, first, _ = _sealed_file_queue()
    data = bytearray(read_file(sim, first))
    data[codec.MAGIC_SIZE] = 0x20  # CHECK -> an unknown command with no header
    write_file(sim, first, bytes(data))
    with pytest.raises(CorruptFileError) as info:
        _remote_reads(sim, first)
    assert info.value.path == first and info.value.offset == codec.MAGIC_SIZE


def test_a_remote_reader_tells_damage_in_the_newest_file_from_a_write_in_progress(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sim = new_sim()
    # A fixed clock: no 0x86 byte in the add times, so rindex below finds the last PUT.
    q = Queue.open("/db", "q", fs=sim, clock=lambda: 1_700_000_000.0, **NOCKPT)
    for i in range(3):
        q.put(b"item-%d" % i * 4)
    newest = q.journal_files[-1]
    q.close()
    data = read_file(sim, newest)
    first_put = len(codec.WRITER_MAGIC) + len(codec.EMPTY_CHECK)
    # A huge data length in the first PUT: the record looks incomplete (as if still
    # being written), but valid CHECKs follow: damage, as the writer's open says.
    damaged = bytearray(data)
    damaged[first_put + 4] = 0x7F
    write_file(sim, newest, bytes(damaged))
    with pytest.raises(CorruptFileError) as info:
        _remote_reads(sim, newest)
    assert info.value.offset == first_put
    # The same in the last write only, no writer running: a torn tail the writer's
    # next open cuts; the reader delivers what precedes it and says so.
    last_put = data.rindex(b"\x86")
    damaged = bytearray(data)
    damaged[last_put + 4] = 0x7F
    write_file(sim, newest, bytes(damaged))
    with caplog.at_level("WARNING", logger="engine.queue"):
        got = _remote_reads(sim, newest)
    assert [xid for xid, _ in got] == [1, 2]
    assert any("torn tail" in rec.getMessage() for rec in caplog.records)
