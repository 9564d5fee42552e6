"""Crash-simulator and fault-injection tests of the event journal.

Every crash image must reopen cleanly, pass verify(), and show exactly the
acknowledged operations, plus possibly the one in flight, applied whole.
"""

from __future__ import annotations

import errno
import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import EngineError, PoisonedError
from engine.events import EventJournal
from engine.fs import make_dirs
from stress.faults import FaultyFS
from stress.simevents import Create, Mark, Rename, Sync, Truncate, Unlink, Write
from stress.simfs import SimFS

# Small reservations keep the simulated images small while still exercising them.
PREALLOC = 700

Op = tuple[str, str, int, int]  # ("write", pid, first_seq, count) | ("delete", pid, to, 0)


def payload(pid: str, seq: int) -> bytes:
    # Different lengths so that blocks straddle sector boundaries at varied points.
    return f"{pid}:{seq}:".encode() + b"p" * ((seq * 37 + len(pid) * 11) % 150)


class Model:
    """What the journal should hold: per id, (lowest live, highest)."""

    def __init__(self) -> None:
        self.state: dict[str, tuple[int, int]] = {}

    def apply(self, op: Op) -> None:
        kind, pid, a, b = op
        lowest, highest = self.state.get(pid, (1, 0))
        if kind == "write":
            assert a == highest + 1
            self.state[pid] = (lowest, highest + b)
        elif highest:
            self.state[pid] = (max(lowest, min(a, highest) + 1), highest)

    def copy(self) -> Model:
        m = Model()
        m.state = dict(self.state)
        return m


def run_ops(journal: EventJournal, sim: SimFS, ops: list[Op]) -> None:
    for op in ops:
        kind, pid, a, b = op
        if kind == "write":
            journal.write(pid, [(a + i, payload(pid, a + i)) for i in range(b)])
        else:
            journal.delete_to(pid, a)
        sim.mark(op)


def check_state(journal: EventJournal, model: Model) -> None:
    assert journal.verify() is not None
    ids = set(journal.persistence_ids())
    assert ids == {p for p, (_lo, hi) in model.state.items() if hi > 0}
    for pid, (lowest, highest) in model.state.items():
        assert journal.highest_sequence_nr(pid) == highest
        events = list(journal.replay(pid))
        assert [e.sequence_nr for e in events] == list(range(lowest, highest + 1))
        assert all(e.payload == payload(pid, e.sequence_nr) for e in events)


def matches(journal: EventJournal, model: Model) -> bool:
    try:
        check_state(journal, model)
    except AssertionError:
        return False
    return True


WORKLOAD: list[Op] = [
    ("write", "alpha", 1, 3),
    ("write", "beta", 1, 1),
    ("write", "alpha", 4, 2),
    ("write", "gamma-with-a-longer-id", 1, 4),
    ("delete", "alpha", 2, 0),
    ("write", "beta", 2, 3),
    ("write", "alpha", 6, 1),
    ("delete", "beta", 99, 0),
    ("write", "beta", 5, 2),
    ("write", "gamma-with-a-longer-id", 5, 1),
]


def check_crash_states(ops: list[Op], limit: int, pre_ids: int = 0) -> int:
    sim = SimFS()
    make_dirs(sim, "/db")
    setup: list[Op] = [("write", f"pre{i:03d}", 1, 1) for i in range(pre_ids)]
    with EventJournal.open("/db", fs=sim, preallocate=PREALLOC) as journal:
        run_ops(journal, sim, setup + ops)
    all_ops = setup + ops
    checked = 0
    for state in sim.crash_states(limit=limit, seed=7):
        acked = len(state.marks)
        assert state.marks == all_ops[:acked]
        before = Model()
        for op in all_ops[:acked]:
            before.apply(op)
        fs2 = state.fs()
        if not fs2.exists("/db/meta") or not fs2.exists("/db/data"):
            # Only possible before creation finished, when nothing was acknowledged.
            assert acked == 0, state.describe()
        reopened = EventJournal.open("/db", fs=fs2, preallocate=PREALLOC)
        try:
            if matches(reopened, before):
                pass
            else:
                assert acked < len(all_ops), state.describe()
                after = before.copy()
                after.apply(all_ops[acked])
                assert matches(reopened, after), (
                    f"{state.describe()}: neither the acknowledged state nor it plus the op in flight")
            # Recovery left a clean journal: it accepts more writes and stays valid.
            pid = "after-crash"
            reopened.write(pid, [(1, b"x")])
            reopened.verify()
        finally:
            reopened.close()
        checked += 1
    return checked


def test_every_crash_state_recovers_to_an_acknowledged_prefix() -> None:
    assert check_crash_states(WORKLOAD, limit=1500) > 40


def test_crash_states_with_meta_blocks_straddling_sectors() -> None:
    # 30 ids first: meta blocks then cross 512-byte boundaries, so some updates take
    # the atomic-rewrite path; crash points there are covered too.
    ops: list[Op] = [("write", f"pre{i:03d}", 2, 1) for i in range(30)] + [("delete", "pre010", 1, 0)]
    assert check_crash_states(ops, limit=1500, pre_ids=30) > 100


def test_straddling_ids_use_atomic_rewrite() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    with EventJournal.open("/db", fs=sim, preallocate=PREALLOC) as journal:
        for i in range(40):
            journal.write(f"pre{i:03d}", [(1, b"a")])
        for i in range(40):
            journal.write(f"pre{i:03d}", [(2, b"b")])
        # 29-byte blocks from offset 8: the fields of some of the 40 cross a sector;
        # their meta update waits (the links committed the batches) ...
        assert journal._meta.deferred
        journal.verify()
    # ... and close replaced the meta file atomically with everything up to date.
    assert journal._meta.rewrites > 0
    with EventJournal.open("/db", fs=sim, preallocate=PREALLOC) as journal:
        assert all(journal.highest_sequence_nr(f"pre{i:03d}") == 2 for i in range(40))
        assert not journal.recovery.repaired


def test_fault_injection_every_operation() -> None:
    """SQLite's I/O-error sweep: fail the Nth mutating operation for every N."""
    n = 1
    while True:
        sim = SimFS()
        make_dirs(sim, "/db")
        ffs = FaultyFS(sim, fail_at=n, errno=errno.EIO)
        done: list[Op] = []
        journal: EventJournal | None = None
        closing = False
        try:
            journal = EventJournal.open("/db", fs=ffs, preallocate=PREALLOC)
            for op in WORKLOAD:
                kind, pid, a, b = op
                if kind == "write":
                    journal.write(pid, [(a + i, payload(pid, a + i)) for i in range(b)])
                else:
                    journal.delete_to(pid, a)
                done.append(op)
            closing = True
            journal.close()  # trims the reserved zeros: may hit the fault too
            if ffs.faults == 0:
                break  # the workload finished without hitting operation n
        except (OSError, EngineError):
            if journal is not None and not closing:
                # A failed operation poisons the journal: every later write refuses.
                with pytest.raises(PoisonedError):
                    journal.write("zeta", [(1, b"z")])
                with pytest.raises(PoisonedError):
                    journal.delete_to("alpha", 1)
                journal.close()
        model = Model()
        for op in done:
            model.apply(op)
        # Reopen on the same (now healthy) files: clean, acknowledged ops all there.
        with EventJournal.open("/db", fs=sim, preallocate=PREALLOC) as reopened:
            if not matches(reopened, model):
                after = model.copy()
                after.apply(WORKLOAD[len(done)])
                assert matches(reopened, after), f"fail_at={n}"
        n += 1
    assert n > 20


def test_fsync_failure_poisons_until_reopen(tmp_path: object) -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    with EventJournal.open("/db", fs=sim, preallocate=PREALLOC) as journal:
        journal.write("a", [(1, b"one")])
    ffs = FaultyFS(sim, fail_at=None, kinds=("fsync",))
    journal = EventJournal.open("/db", fs=ffs, preallocate=PREALLOC)
    ffs.fail_at = ffs.ops + 1  # the next fsync: the data fdatasync of this write
    with pytest.raises(PoisonedError):
        journal.write("a", [(2, b"two")])
    with pytest.raises(PoisonedError):
        journal.write("a", [(2, b"two")])
    journal.close()
    with EventJournal.open("/db", fs=sim, preallocate=PREALLOC) as reopened:
        assert reopened.highest_sequence_nr("a") in (1, 2)
        reopened.verify()
        seq = reopened.highest_sequence_nr("a") + 1
        reopened.write("a", [(seq, b"again")])
        assert [e.sequence_nr for e in reopened.replay("a")] == list(range(1, seq + 1))


@pytest.mark.parametrize("sizes", [(72, 62, 61, 199, 46), (500, 3, 700), (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)])
def test_torn_first_batch_headers_across_sectors(sizes: tuple[int, ...]) -> None:
    """A batch torn at a sector boundary that cuts through a block header (found
    by the stress suite): recovery must cut it, not call it damage."""
    sim = SimFS()
    make_dirs(sim, "/db")
    with EventJournal.open("/db", fs=sim, preallocate=PREALLOC) as journal:
        journal.write("a", [(i + 1, b"q" * n) for i, n in enumerate(sizes)])
        sim.mark("written")
        journal.write("a", [(len(sizes) + 1, b"r" * 300)])
        sim.mark("second")
    for state in sim.crash_states(limit=3000, seed=2):
        with EventJournal.open("/db", fs=state.fs(), preallocate=PREALLOC) as reopened:
            got = [e.sequence_nr for e in reopened.replay("a")]
            assert got in ([], list(range(1, len(sizes) + 1)), list(range(1, len(sizes) + 2))), state.describe()
            assert len(got) >= {0: 0, 1: len(sizes), 2: len(sizes) + 1}[len(state.marks)], state.describe()
            reopened.verify()


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(["a", "b", "c"]), st.integers(1, 4)),
        st.tuples(st.just("delete"), st.sampled_from(["a", "b", "c"]), st.integers(0, 12)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=12, deadline=None)
@given(_ops)
def test_random_workloads_crash_states(program: list[tuple[str, str, int]]) -> None:
    """Random small workloads: every sampled crash image is an acknowledged prefix
    (plus possibly the op in flight)."""
    ops: list[Op] = []
    highest: dict[str, int] = {}
    for kind, pid, n in program:
        if kind == "write":
            ops.append(("write", pid, highest.get(pid, 0) + 1, n))
            highest[pid] = highest.get(pid, 0) + n
        else:
            ops.append(("delete", pid, n, 0))
    check_crash_states(ops, limit=150)


# -- reordering: the real-world model the simulator does not cover ------------------
def _reordered_images(sim: SimFS, samples: int, seed: int) -> Iterator[tuple[list[Op], dict[str, bytes]]]:
    """Crash images where each 512-byte sector written since its file's last fsync
    holds its old content or the content after some of the writes to it, in issue
    order, independently of every other sector (a disk reorders sector writes; a
    sector is atomic; the page cache accumulates writes to one sector).  Names are
    taken as durable (the journal creates and renames with directory fsyncs)."""
    rng = random.Random(seed)
    path_of: dict[int, str] = {}
    durable: dict[int, bytes] = {}
    current: dict[int, bytearray] = {}
    pending: dict[int, list[tuple[Any, ...]]] = {}
    marks: list[Op] = []
    for event in sim.trace:
        if isinstance(event, Mark):
            marks.append(event.label)
            continue
        if isinstance(event, Create):
            path_of[event.ino] = event.path
            durable[event.ino], current[event.ino], pending[event.ino] = b"", bytearray(), []
        elif isinstance(event, Write):
            ino, offset, data = event.ino, event.offset, event.data
            buf = current[ino]
            if len(buf) < offset:
                buf.extend(bytes(offset - len(buf)))
            buf[offset : offset + len(data)] = data
            pos = offset
            while pos < offset + len(data):  # one piece per sector touched
                cut = min(offset + len(data), (pos // 512 + 1) * 512)
                pending[ino].append(("w", pos, data[pos - offset : cut - offset], pos // 512))
                pos = cut
        elif isinstance(event, Truncate):
            ino, size = event.ino, event.size
            del current[ino][size:]
            current[ino].extend(bytes(size - len(current[ino])))
            pending[ino].append(("t", size))
        elif isinstance(event, Sync):
            durable[event.ino], pending[event.ino] = bytes(current[event.ino]), []
        elif isinstance(event, Rename):
            for i in [i for i, p in path_of.items() if p == event.dst]:
                del path_of[i]
            path_of[event.ino] = event.dst
        elif isinstance(event, Unlink):
            for i in [i for i, p in path_of.items() if p == event.path]:
                del path_of[i]
        else:
            continue
        for _ in range(samples):
            files: dict[str, bytes] = {}
            for ino, path in path_of.items():
                image = bytearray(durable[ino])
                per_sector: dict[int, int] = {}
                for op in pending[ino]:
                    if op[0] == "w":
                        per_sector[op[3]] = per_sector.get(op[3], 0) + 1
                keep = {sector: rng.randint(0, n) for sector, n in per_sector.items()}
                seen: dict[int, int] = {}
                for op in pending[ino]:
                    if op[0] == "w":
                        seen[op[3]] = seen.get(op[3], 0) + 1
                        if seen[op[3]] > keep[op[3]]:
                            continue  # this sector's later versions never reached the disk
                    elif rng.random() < 0.5:
                        continue
                    if op[0] == "t":
                        del image[op[1] :]
                        image.extend(bytes(op[1] - len(image)))
                    else:
                        if len(image) < op[1]:
                            image.extend(bytes(op[1] - len(image)))
                        image[op[1] : op[1] + len(op[2])] = op[2]
                files[path] = bytes(image)
            yield list(marks), files


def test_reordered_sector_writes_never_expose_half_a_batch() -> None:
    # Payloads of 6..160 bytes: batches of several blocks span sectors, and some
    # single blocks straddle a sector boundary.
    ops: list[Op] = [
        ("write", "a", 1, 1),
        ("write", "b", 1, 2),
        ("write", "a", 2, 1),
        ("write", "a", 3, 6),
        ("write", "b", 3, 1),
        ("write", "a", 9, 1),
        ("write", "b", 4, 1),
        ("write", "a", 10, 1),
        ("write", "b", 5, 5),
        ("delete", "a", 3, 0),
        ("write", "a", 11, 1),
        ("write", "a", 12, 4),
        ("write", "b", 10, 1),
    ]
    sim = SimFS()
    make_dirs(sim, "/db")
    # Reserved zeros: a torn block then reads as a block with zeros in it (the
    # hard case), not as a short file.
    with EventJournal.open("/db", fs=sim, preallocate=4096) as journal:
        run_ops(journal, sim, ops)
    checked = 0
    for marks, files in _reordered_images(sim, samples=12, seed=4):
        acked = len(marks)
        if "/db/meta" not in files or "/db/data" not in files or len(files["/db/meta"]) < 8:
            assert acked == 0
            continue
        before = Model()
        for op in ops[:acked]:
            before.apply(op)
        fs2 = SimFS.from_image(files, {"/", "/db"})
        try:
            reopened = EventJournal.open("/db", fs=fs2, preallocate=4096)
        except EngineError as exc:
            assert acked == 0, f"{acked} acknowledged ops, yet the image does not open: {exc}"
            continue
        with reopened:
            if not matches(reopened, before):
                assert acked < len(ops)
                after = before.copy()
                after.apply(ops[acked])
                assert matches(reopened, after), f"after {acked} acknowledged ops: a partial or lost batch"
        checked += 1
    assert checked > 200


def test_reordered_meta_sectors_of_a_straddling_entry() -> None:
    """The 18th 3-character id's meta fields straddle offset 512: its deferred-sync
    update (in the second sector) must be durable before a delete changes ``first``
    (in the first sector), or a crash could pair a new ``first`` with an old ``last``."""
    ids = [f"i{k:02d}" for k in range(18)]
    ops: list[Op] = [("write", pid, 1, 1) for pid in ids]
    ops += [("write", "i17", 2, 1), ("write", "i17", 3, 1), ("delete", "i17", 2, 0), ("write", "i17", 4, 1)]
    sim = SimFS()
    make_dirs(sim, "/db")
    with EventJournal.open("/db", fs=sim, preallocate=4096) as journal:
        run_ops(journal, sim, ops)
    start = next(i for i, e in enumerate(sim.trace) if isinstance(e, Mark) and e.label == ops[17])
    checked = 0
    for marks, files in _reordered_images(sim, samples=12, seed=9):
        acked = len(marks)
        if acked < 18:
            continue  # the set-up writes are covered by the other tests
        before = Model()
        for op in ops[:acked]:
            before.apply(op)
        with EventJournal.open("/db", fs=SimFS.from_image(files, {"/", "/db"}), preallocate=4096) as reopened:
            if not matches(reopened, before):
                after = before.copy()
                after.apply(ops[acked])
                assert matches(reopened, after), f"after {acked} acknowledged ops"
        checked += 1
    assert start > 0 and checked > 50


def test_stale_meta_is_rolled_forward_along_the_links() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    journal = EventJournal.open("/db", fs=sim, preallocate=PREALLOC)
    journal.write("a", [(1, b"one")])
    journal.write("b", [(1, b"uno")])
    journal.delete_to("b", 1)  # synced: meta is up to date here
    journal.write("b", [(2, b"dos")])  # after deleting everything: first moves too
    journal.write("a", [(2, b"two")])  # one block in a sector: one sync, meta not synced
    journal.write("a", [(3, b"three"), (4, b"four")])  # blocks, sync, link, sync
    image = sim.durable_image()  # power loss now: only what was synced survives
    journal.close()
    with EventJournal.open("/db", fs=image.fs(), preallocate=PREALLOC) as reopened:
        # Meta was behind the links for both ids: a "rebuilt" action, nothing cut;
        # and the checksums of the blocks since data.crc's last sync were rebuilt.
        assert [(a.kind, a.count, a.unit, a.path) for a in reopened.recovery.actions] == [
            ("rebuilt", 2, "entries", "/db/meta"), ("rebuilt", 6, "entries", "/db/data.crc")]
        assert [tuple(e) for e in reopened.replay("a")] == [(1, b"one"), (2, b"two"), (3, b"three"), (4, b"four")]
        assert [tuple(e) for e in reopened.replay("b")] == [(2, b"dos")]
        assert reopened.verify() == [str(a) for a in reopened.recovery.actions]
    # A reader rolls forward too (in memory), without writing anything.
    with EventJournal.open_reader("/db", fs=image.fs()) as reader:
        assert reader.highest_sequence_nr("a") == 4 and reader.lowest_sequence_nr("b") == 2
