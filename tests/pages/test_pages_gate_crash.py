"""The page store lock's gate after a crash: its scratch words (the change count
and ring, :class:`engine.fs.GatedLock`) carry nothing durable.

A power loss may leave the gate file holding anything the words ever held, torn
anywhere, or nothing; the crash simulator does not enumerate those states
(``stress/simwords.py``), so these tests open stores whose gate holds such
debris, on the real file system: every reader reloads at its first look, the
writer goes on from whatever count it finds, and what readers see is the file.
"""

from __future__ import annotations

import os
import random
import struct

import pytest

from engine.fs.lock import RING
from engine.pages import PageStore
from engine.pages.storefile import gate_path
from stress.simevents import Create, Truncate, Write
from stress.simfs import SimFS

_GATE_BYTES = 4 * (4 + RING)


def _debris() -> list[tuple[str, bytes]]:
    rng = random.Random(7)
    odd = struct.pack("<QQ", 41, 3) + bytes(_GATE_BYTES - 16)  # a holder died mid-hold
    # A count that moved while the ring names pages the writer never wrote.
    lying = struct.pack("<QQ", 40, 2) + struct.pack("<II", 1, 2) + bytes(_GATE_BYTES - 24)
    return [
        ("empty", b""),
        ("short", rng.randbytes(100)),
        ("zeros", bytes(_GATE_BYTES)),
        ("odd count", odd),
        ("lying ring", lying),
        ("garbage", rng.randbytes(_GATE_BYTES)),
    ]


@pytest.mark.parametrize(("what", "debris"), _debris(), ids=[w for w, _ in _debris()])
def test_a_store_whose_gate_holds_crash_debris_reads_and_writes_as_the_file_says(
    tmp_path: os.PathLike[str], what: str, debris: bytes
) -> None:
    path = os.path.join(str(tmp_path), "s.db")
    with PageStore.open(path, page_size=512, apply="commit") as store:
        with store.transaction() as tx:
            pages = [tx.allocate() for _ in range(8)]
            for p in pages:
                tx.write(p, 0, b"before %d" % p)
        store.flush()
    with open(gate_path(path), "wb") as gate:  # what a power loss may leave there
        gate.write(debris)
    with PageStore.open(path, page_size=512, apply="commit") as store:
        with PageStore.open_reader(path) as reader:
            for p in pages:
                assert reader.read(p, 0, 10) == (b"before %d" % p).ljust(10, b"\0")
            for round_ in range(3):
                with store.transaction() as tx:
                    tx.write(pages[round_], 0, b"after %d.%d" % (round_, pages[round_]))
                store.flush()
                for p in pages:
                    want = b"after %d.%d" % (round_, p) if p == pages[round_] else None
                    got = reader.read(p, 0, 12)
                    if want is not None:
                        assert got == want.ljust(12, b"\0")
                    elif p in pages[:round_]:
                        assert got.startswith(b"after ")
                    else:
                        assert got == (b"before %d" % p).ljust(12, b"\0")
            count = reader.change_count()
            assert count is not None
            # Even between holds, whatever the gate held: readers trust the ring again.
            assert count() % 2 == 0
            assert reader.verify()


def test_the_simulator_keeps_scratch_words_out_of_the_trace_and_every_crash_image() -> None:
    """The gate's words are visible to tests (SimFS.scratch_words) and shared by
    the simulator's handles, but no store through them is an operation, and a
    crash image's gate holds only what recorded writes left (nothing)."""
    sim = SimFS()
    sim.mkdir("/db")
    path = "/db/s.db"
    with PageStore.open(path, page_size=512, apply="commit", fs=sim) as store:
        with store.transaction() as tx:
            page = tx.allocate()
            tx.write(page, 0, b"x")
        store.flush()
        with PageStore.open_reader(path, fs=sim) as reader:
            count = reader.change_count()
            assert count is not None and count() >= 2 and count() % 2 == 0
    words = sim.scratch_words(gate_path(path))
    assert len(words) == _GATE_BYTES and struct.unpack_from("<Q", words)[0] >= 2
    assert sim.file_size(gate_path(path)) == 0  # never the file's bytes
    gate = next(e.ino for e in sim.trace if isinstance(e, Create) and e.path == gate_path(path))
    assert not [e for e in sim.trace if isinstance(e, Write | Truncate) and e.ino == gate]
    states = list(sim.crash_states(limit=100000))
    assert states and all(state.files.get(gate_path(path), b"") == b"" for state in states)
    assert all(state.fs().scratch_words(gate_path(path)) == b"" for state in states if gate_path(path) in state.files)
