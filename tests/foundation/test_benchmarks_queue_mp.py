"""benchmarks.queue_mp's parts run on a tiny workload: producers in processes and
in threads put every item into one queue, and the slow-disk simulation slows
every fsync.  No timing is asserted (speed is measured by the benchmark itself)."""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks import queue_mp
from engine.fs.osfs import OsFileHandle
from engine.queue import Queue


def _count(directory: str) -> int:
    with Queue.open(directory, "bench") as q:
        reader = q.reader()
        n = 0
        while reader.get(timeout=0) is not None:
            n += 1
        return n


def test_processes_and_threads_put_every_item(tmp_path: Path) -> None:
    for kind, run in (("p", queue_mp.run_processes), ("t", queue_mp.run_threads)):
        directory = str(tmp_path / kind)
        assert run(directory, "always", 3, 20) > 0
        assert _count(directory) == 60


def test_disk_flushes_are_a_count_or_unknown(tmp_path: Path) -> None:
    flushes = queue_mp._disk_flushes(str(tmp_path))
    assert flushes is None or flushes >= 0


def test_the_slow_disk_simulation_slows_every_fsync(tmp_path: Path) -> None:
    real = OsFileHandle._raw_sync
    try:
        queue_mp._slow_fsyncs(0.05)
        with Queue.open(str(tmp_path), "q", sync="always") as q:
            started = time.monotonic()
            q.put(b"x")
            assert time.monotonic() - started >= 0.05
    finally:
        OsFileHandle._raw_sync = real  # type: ignore[method-assign]
