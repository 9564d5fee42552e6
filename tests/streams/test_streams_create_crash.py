"""A crash while a journal is being created leaves no journal or a whole one."""

from __future__ import annotations

from engine.fs import make_dirs
from engine.streams import StreamJournal, read_streams
from stress.simfs import SimFS


def test_every_crash_during_creation_reopens() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    start = len(sim.trace)
    journal = StreamJournal.open("/db/journal", size=8 * 512, page_size=512, fs=sim)
    sim.mark("created")
    stream = journal.open_stream("s")
    stream.write(b"payload")
    stream.close()
    sim.mark("closed")
    journal.close()
    checked = 0
    for state in sim.crash_states(limit=3000, seed=5, points=range(start, len(sim.trace) + 1)):
        fs = state.fs()
        if not fs.exists("/db/journal"):
            assert "created" not in state.marks, state.describe()
            continue
        # Whatever survived must open (no "expected at least 4 pages" dead end).
        reopened = StreamJournal.open("/db/journal", size=8 * 512, page_size=512, fs=fs)
        reopened.verify()
        reopened.close()
        done = [s for s in read_streams("/db/journal", fs=fs) if s.status == "complete"]
        if "closed" in state.marks:
            assert [s.data for s in done] == [b"payload"], state.describe()
        checked += 1
    assert checked > 3
