"""The Spark log reader on crash images: never an error, never a torn record, never less than acked."""

from __future__ import annotations

import pytest

from engine.fs import make_dirs
from engine.spark import logfiles
from stress.simfs import SimFS


@pytest.mark.parametrize("sync", ["always", "never"])
def test_reader_sees_a_prefix_holding_every_acked_append(sync: str) -> None:
    applog = pytest.importorskip("engine.applog")
    sim = SimFS()
    make_dirs(sim, "/db")
    log = applog.AppendLog.open("/db/log", segment_bytes=300, sync=sync, fs=sim)
    written = []
    for i in range(40):
        data = b"rec-%02d" % i * (1 + i % 4)
        log.append(data, time_ns=1_000 + i)
        written.append(data)
        if sync == "always":
            sim.mark(i)  # durable when append returned
    log.close()
    checked = 0
    for state in sim.crash_states(limit=400, seed=3):
        fs2 = state.fs()
        if not fs2.isdir("/db/log"):
            continue
        segs = logfiles.list_segments("/db/log", fs2)
        got = [d for s in segs for run in logfiles.read_range(fs2, s, s.min_pos, s.count)
               for d in run.data.to_pylist()]
        assert got == written[: len(got)], state.describe()  # a prefix, byte-identical
        assert len(got) >= len(state.marks), state.describe()  # every acked append
        checked += 1
    assert checked > 20
