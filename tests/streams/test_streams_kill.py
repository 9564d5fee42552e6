"""A writer process killed at its crash points (SIGKILL from engine.fs.crashpoints):
the journal reopens, and every stream acknowledged before the kill is complete."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine.streams import StreamJournal, read_streams

WRITER = r"""
import sys
from engine.streams import StreamJournal
journal = StreamJournal.open(sys.argv[1], size=64 * 4096, page_size=4096, record_size=1000, sync_delay=0)
for i in range(40):
    with journal.open_stream(f"k{i}") as s:
        s.write(bytes([i]) * (700 * i + 1))
    print(f"k{i}", flush=True)
journal.close()
"""


@pytest.mark.parametrize(
    ("point", "skip"),
    [
        ("streams.commit.before-fsync", 5),
        ("streams.commit.after-fsync", 7),
        ("streams.wrap.before-fsync", 0),
        ("streams.wrap-flush.after-fsync", 0),
    ],
)
def test_killed_writer(tmp_path: object, point: str, skip: int) -> None:
    path = os.path.join(str(tmp_path), "j")
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "ENGINE_CRASH_AT": point, "ENGINE_CRASH_SKIP": str(skip)}
    proc = subprocess.run([sys.executable, "-c", WRITER, path], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr  # killed at the crash point
    acked = proc.stdout.split()
    journal = StreamJournal.open(path, record_size=1000)
    journal.verify()
    journal.close()
    got = {s.ident.decode(): s for s in read_streams(path)}
    # The journal is a ring: only streams of the current lap can be checked.
    first_in_lap = min((int(name[1:]) for name in got), default=len(acked))
    for name in acked:
        i = int(name[1:])
        if i < first_in_lap:
            continue
        assert got[name].status == "complete", (point, name)
        assert got[name].data == (bytes([i]) * (700 * i + 1))[got[name].start_offset :]
    for name, s in got.items():
        if s.status == "complete":
            assert name in acked or int(name[1:]) == len(acked)  # at most the one in flight
