"""Streams acknowledged across the end of a lap (issue 28: "#2004 absent, #2003 whole").

Stream numbers are handed out when a stream opens, a stream's records are
journaled when its buffer fills or it closes, and a wrap makes every stream
that ended before it unreadable at once (the journal is a ring).  So a lap can
hold stream N whole while stream N+1, opened later but closed before the wrap,
is gone: documented eviction, not a loss.  These tests pin both halves: every
stream acknowledged in the lap the file is in survives every crash state
(before, during and after the wrap), the one acknowledged just before the wrap
included; and a stream the wrap evicted from between the ones read is reported
(:meth:`JournalScan.absent_streams`, ``stats()["streams_absent"]``, the CLI's
``lap`` line) instead of leaving an unexplained gap.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from engine.fs import make_dirs
from engine.streams import StreamJournal, codec, read_events
from stress.simfs import SimFS

PAGE = 512
PAGES = 8


def _lap(fs: Any, path: str) -> int:
    with fs.open(path) as handle:
        return codec.decode_file_header(handle.read_at(0, codec.FILE_HEADER_SIZE)).first_global


def _workload(sim: SimFS) -> dict[str, Any]:
    """Stream A (#0) opens first and stays open without a record; B (#1) closes
    in lap 0; small streams close one per commit until one of them wraps the
    journal; then A closes, whole, in lap 1.  Returns what happened."""
    make_dirs(sim, "/db")
    journal = StreamJournal.open("/db/j", size=PAGES * PAGE, page_size=PAGE, sync_delay=0, fs=sim)
    sim.mark(("created",))
    facts: dict[str, Any] = {"payload": {}, "number": {}, "eos_global": {}}

    def close(stream: Any, payload: bytes) -> None:
        stream.write(payload)
        stream.close()
        name = stream.ident.decode()
        facts["payload"][name] = payload
        facts["number"][name] = stream.number
        facts["eos_global"][name] = journal.next_global - 1
        sim.mark(("closed", name, payload, _lap(sim, "/db/j")))

    a = journal.open_stream("A")
    close(journal.open_stream("B"), b"b" * 40)
    i = 0
    while journal.wraps == 0:
        facts["last_before"] = facts.get("first_after")
        name = f"s{i}"
        facts["first_after"] = name
        close(journal.open_stream(name), bytes([i]) * 40)
        i += 1
    facts["last_before"] = f"s{i - 2}"  # the stream acknowledged just before the wrap
    close(a, b"a" * 40)
    close(journal.open_stream("after"), b"z" * 40)
    facts["lap1"] = _lap(sim, "/db/j")
    journal.close()
    return facts


def _check(state: Any, facts: dict[str, Any]) -> tuple[int, bool]:
    """One crash image: every stream acknowledged in the image's lap reads back
    whole; every one acknowledged in an earlier lap is gone and, when its number
    lies among the lap's streams, reported absent.  Returns (lap, checked)."""
    if not any(m[0] == "created" for m in state.marks):
        return -1, False
    fs = state.fs()
    why = state.describe()
    lap = _lap(fs, "/db/j")
    scan = read_events("/db/j", fs)
    streams = {s.ident.decode(): s for s in scan.streams()}
    absent = scan.absent_streams()
    assert scan.wrapped == (lap != 0), why
    for mark in state.marks:
        if mark[0] != "closed":
            continue
        _, name, payload, acked_lap = mark
        if acked_lap == lap:
            assert name in streams and streams[name].complete, f"{name} acknowledged in lap {lap}: {why}"
            assert streams[name].data == payload and streams[name].start_offset == 0, why
        else:
            # Evicted by the wrap (its EOS is numbered below the lap's first record).
            assert facts["eos_global"][name] < lap, why
            assert name not in streams, why
            number = facts["number"][name]
            if scan.lap_streams and min(scan.lap_streams) < number < max(scan.lap_streams):
                assert number in absent, f"{name} (#{number}) evicted but not reported: {why}"
    # The writer recovers the image and verifies.
    journal = StreamJournal.open("/db/j", fs=fs, sync_delay=0)
    journal.verify()
    journal.close()
    return lap, True


def test_eviction_by_a_wrap_is_reported_not_silent(tmp_path: object) -> None:
    """The shape of the report: #0 whole, #1 (closed earlier, in the old lap) absent."""
    sim = SimFS()
    facts = _workload(sim)
    scan = read_events("/db/j", sim)
    streams = {s.ident.decode(): s for s in scan.streams()}
    assert streams["A"].complete and streams["A"].data == b"a" * 40 and streams["A"].start_offset == 0
    assert "B" not in streams and facts["number"]["B"] == 1
    # B's end is numbered below the lap's first record: the wrap evicted it.
    assert facts["eos_global"]["B"] < facts["lap1"] == scan.header.first_global  # type: ignore[union-attr]
    assert scan.wrapped and 1 in scan.absent_streams()
    stats = scan.stats()
    assert stats["wrapped"] is True and stats["streams_absent"] == len(scan.absent_streams()) >= 1
    # The command line says it too.
    path = os.path.join(str(tmp_path), "j")
    with open(path, "wb") as out, sim.open("/db/j") as handle:
        out.write(handle.read_at(0, handle.size()))
    run = subprocess.run([sys.executable, "-m", "engine", "streams", "stats", path], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "400"}, check=True)
    assert "wrapped: this lap starts at global record" in run.stdout and "in this lap: 1," in run.stdout
    listed = subprocess.run([sys.executable, "-m", "engine", "streams", "list", path], capture_output=True,
                            text=True, env={**os.environ, "COLUMNS": "400"}, check=True)
    assert "have no record in this lap: 1," in listed.stderr


def test_crash_states_across_the_end_of_a_lap() -> None:
    sim = SimFS()
    facts = _workload(sim)
    laps: set[int] = set()
    survived_before = 0
    for state in sim.crash_states(limit=2000, seed=28):
        lap, checked = _check(state, facts)
        if not checked:
            continue
        laps.add(lap)
        last = facts["last_before"]
        if lap == 0 and any(m[0] == "closed" and m[1] == last for m in state.marks):
            survived_before += 1  # acknowledged just before the wrap, and checked whole above
    assert sim.last_stats is not None and sim.last_stats.exhaustive, sim.last_stats
    assert laps == {0, facts["lap1"]}  # states on both sides of the wrap
    assert survived_before > 0


CHILD = r"""
import os, signal, sys
from engine.streams import StreamJournal
j = StreamJournal.open(sys.argv[1], size=8 * 512, page_size=512, sync_delay=0)
a = j.open_stream("A")
with j.open_stream("B") as b:
    b.write(b"b" * 40)
print("B", j.next_global - 1, flush=True)
i = 0
while j.wraps == 0:
    with j.open_stream(f"s{i}") as s:
        s.write(b"s" * 40)
    i += 1
a.write(b"a" * 40)
a.close()
print("A", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writer_shows_the_same_eviction(tmp_path: object) -> None:
    """A real process killed right after the wrap: what the issue saw, explained."""
    path = os.path.join(str(tmp_path), "j")
    run = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert run.returncode == -9, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("B ") and lines[-1] == "A"  # both acknowledged before the kill
    b_global = int(lines[0].split()[1])
    scan = read_events(path)
    streams = {s.ident.decode(): s for s in scan.streams()}
    assert streams["A"].complete and streams["A"].data == b"a" * 40
    assert "B" not in streams
    assert scan.header is not None and b_global < scan.header.first_global
    # B (#1) and the small streams closed before the wrap (all but the one that wrapped it).
    assert scan.absent_streams()[0] == 1 and 0 in scan.lap_streams
