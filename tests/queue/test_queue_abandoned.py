"""Abandoned readers: the files each reader pins, the pin warning (logged once per
crossing), ``engine queue readers`` (text and JSON Lines), and the opt-in
``reader_expiry`` (retires an idle reader nobody holds, frees its files, never a
held one; a retired reader comes back as a new reader; crash safe).

Times are an injected clock: the queue's ``clock`` is moved past the expiry instead
of sleeping (reader files keep their real modification times)."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.errors import ConfigError
from engine.fs import default_fs, make_dirs, set_crashpoint_hook
from engine.queue import Queue
from engine.queue.diagnose import queue_stats
from engine.queue.retire import pinned_files
from engine.queue.segments import Segment
from stress.simfs import SimFS

ROOT = str(Path(__file__).resolve().parents[2])
DAY = 86400.0
READER_KEYS = {
    "queue", "reader", "head", "items", "backlog_bytes", "oldest_age_s", "open_reads", "done_out_of_order",
    "expired", "discarded", "last_checkpoint_ns", "pinned_files", "pinned_bytes", "pinned_share",
    "pinned_paths", "held", "holder_pids", "gets", "confirms", "aborts", "consumers",
}


class Clock:
    """The queue's clock: real time plus an offset the test moves."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def fill(q: Queue, count: int, size: int = 40) -> list[int]:
    return [q.put(b"%05d" % i + b"x" * size) for i in range(count)]


def drain(reader: Any, upto: int | None = None) -> None:
    while (item := reader.get(timeout=0)) is not None:
        reader.confirm(item.id)
        if upto is not None and item.id >= upto:
            return


def _readers(stats: Any) -> dict[str, Any]:
    return {r["reader"]: r for r in stats["readers"]}


# -- pinned files -------------------------------------------------------------------


def test_pinned_files_are_those_retirable_but_for_the_readers_furthest_behind() -> None:
    segs = [Segment(n, f"/q.{n}", first) for n, first in ((1, 1), (2, 11), (3, 21), (4, 31), (5, None))]
    size = {1: 100, 2: 200, 3: 300, 4: 400, 5: 50}

    def pins(heads: dict[str, int], tail: int = 40) -> dict[str, tuple[tuple[str, ...], int]]:
        return {k: (p.paths, p.bytes) for k, p in pinned_files(segs, heads, tail, lambda s: size[s.number]).items()}

    # c (head 5) keeps file 1, and files 2 too, that b (head 25) has passed: 1 and 2 go but for c.
    assert pins({"a": 40, "b": 25, "c": 5}) == {"a": ((), 0), "b": ((), 0), "c": (("/q.1", "/q.2"), 300)}
    # Two readers at the same head pin the same files; the reader ahead pins nothing.
    both = (("/q.2", "/q.3"), 500)
    assert pins({"a": 40, "b": 12, "c": 12}) == {"a": ((), 0), "b": both, "c": both}
    # A single reader pins nothing: what it holds is its backlog, no other reader passed it.
    assert pins({"only": 0}) == {"only": ((), 0)}
    assert pins({"a": 40, "b": 40}) == {"a": ((), 0), "b": ((), 0)}
    assert pins({}) == {}


def test_stats_pins_with_several_readers_and_rotated_files(tmp_path: Path) -> None:
    d = str(tmp_path)
    q = Queue.open(d, "q", journal_size=256, checkpoint_interval=3600)
    ahead, middle, behind = q.reader("ahead"), q.reader("middle"), q.reader("behind")
    fill(q, 40)
    drain(ahead)
    drain(middle, upto=20)
    drain(behind, upto=3)
    q.checkpoint()
    files = q.journal_files
    assert len(files) > 5
    stats: dict[str, Any] = q.stats()
    by_name = {r["reader"]: r for r in stats["readers"]}
    # The files "behind" pins: every id in them is at or below middle's head (20), and
    # some id above its own head (3).
    lasts = [(seg.first_id or 0) - 1 for seg in q.files_now()[0][1:]]  # every file has a PUT here
    expect = [path for path, last in zip(files, lasts, strict=False) if 3 < last <= 20]
    assert expect and by_name["behind"]["pinned_files"] == len(expect)
    assert by_name["behind"]["pinned_bytes"] == sum(Path(p).stat().st_size for p in expect)
    assert by_name["ahead"]["pinned_bytes"] == by_name["middle"]["pinned_bytes"] == 0
    assert isinstance(by_name["behind"]["last_checkpoint_ns"], int)
    # Once "behind" is gone, "middle" is the one furthest behind.
    q.remove_reader("behind")
    by_name = _readers(q.stats())
    assert by_name["middle"]["pinned_files"] > 0 and by_name["ahead"]["pinned_files"] == 0
    q.close()
    # The disk's figures (engine queue stats) are the queue's.
    with Queue.open(d, "q", journal_size=256) as again:
        live = {name: r["pinned_bytes"] for name, r in _readers(again.stats()).items()}
    disk = {name: r["pinned_bytes"] for name, r in _readers(queue_stats(default_fs(), d, "q")).items()}
    assert disk == live and live["middle"] > 0


def test_the_pin_warning_is_logged_once_per_crossing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    q = Queue.open(str(tmp_path), "q", journal_size=256, checkpoint_interval=3600, pin_warning=0.5)
    fast, slow = q.reader("fast"), q.reader("slow")
    fill(q, 40)
    drain(fast)
    with caplog.at_level(logging.WARNING, logger="engine.queue"):
        for _ in range(3):
            q.checkpoint()
            warnings: Any = q.stats()["warnings"]
            assert [w["reader"] for w in warnings] == ["slow"] and warnings[0]["pinned_share"] > 0.5
        fill(q, 5)
        q.checkpoint()
    pinning = [r for r in caplog.records if "pins" in r.getMessage()]
    assert len(pinning) == 1 and "'slow'" in pinning[0].getMessage() and "pin_warning=0.5" in pinning[0].getMessage()
    # It catches up (the checkpoint re-arms the warning), falls behind again: a second warning.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="engine.queue"):
        drain(slow)
        q.checkpoint()
        fill(q, 40)
        drain(fast)
        q.checkpoint()
        q.checkpoint()
    assert len([r for r in caplog.records if "pins" in r.getMessage()]) == 1
    drain(slow)
    q.checkpoint()
    assert q.stats()["warnings"] == []
    q.close()


def test_pin_warning_none_and_bad_values(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="engine.queue"):
        with Queue.open(str(tmp_path), "q", journal_size=256, pin_warning=None) as q:
            q.reader("fast")
            q.reader("slow")
            fill(q, 40)
            drain(q.reader("fast"))
            q.checkpoint()
            assert q.stats()["warnings"] == [] and q.stats()["pin_warning"] is None
    assert not [r for r in caplog.records if "pins" in r.getMessage()]
    for bad in (0, 1.5, -0.1, True, "half"):
        with pytest.raises(ConfigError, match="pin_warning"):
            Queue.open(str(tmp_path), "q", pin_warning=bad)
    with pytest.raises(ConfigError, match="reader_expiry"):
        Queue.open(str(tmp_path), "q", reader_expiry=-1)


# -- engine queue readers -------------------------------------------------------------


def test_readers_command_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(tmp_path)
    q = Queue.open(d, "jobs", journal_size=256, checkpoint_interval=3600)
    fast, idle = q.reader("fast"), q.reader("idle")
    fill(q, 30)
    drain(fast)
    idle.close()  # free; "fast" stays open in this process: held
    q.checkpoint()
    assert main(["queue", "readers", d, "jobs", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["reader"] for r in rows] == ["fast", "idle"]
    for row in rows:
        assert set(row) == READER_KEYS and row["queue"] == "jobs"
    by_name = {r["reader"]: r for r in rows}
    assert by_name["fast"]["held"] is True and by_name["idle"]["held"] is False
    if sys.platform == "linux":  # /proc/locks names the holder: this process
        assert by_name["fast"]["holder_pids"] == [os.getpid()] and by_name["idle"]["holder_pids"] == []
    assert by_name["idle"]["items"] == 30 and by_name["idle"]["backlog_bytes"] == 30 * 45
    assert by_name["idle"]["pinned_files"] == len(by_name["idle"]["pinned_paths"]) > 0
    assert by_name["idle"]["pinned_bytes"] == sum(Path(p).stat().st_size for p in by_name["idle"]["pinned_paths"])
    assert 0.5 < by_name["idle"]["pinned_share"] <= 1 and by_name["fast"]["pinned_share"] == 0
    assert abs(by_name["idle"]["last_checkpoint_ns"] - time.time_ns()) < 600e9
    assert by_name["idle"]["oldest_age_s"] >= 0 and by_name["fast"]["oldest_age_s"] is None
    stats: Any = q.stats()
    live = {r["reader"]: r for r in stats["readers"]}
    assert live["idle"]["pinned_bytes"] == by_name["idle"]["pinned_bytes"]

    assert main(["queue", "readers", d, "jobs"]) == 0
    out = capsys.readouterr().out
    idle_line = next(line for line in out.splitlines() if "'idle'" in line)
    assert "30 item(s)" in idle_line and "KiB" in idle_line and "UTC" in idle_line and "ago" in idle_line
    assert "free" in idle_line and "% of the journal" in idle_line
    fast_line = next(line for line in out.splitlines() if "'fast'" in line)
    assert "held" in fast_line and (sys.platform != "linux" or f"held by pid {os.getpid()}" in fast_line)
    q.close()
    assert main(["queue", "readers", d, "jobs", "--json"]) == 0
    assert all(not json.loads(line)["held"] for line in capsys.readouterr().out.splitlines())
    assert main(["queue", "readers", d, "nope"]) == 1
    assert "no queue 'nope'" in capsys.readouterr().err


# -- reader_expiry --------------------------------------------------------------------


def _idle_queue(d: str, clock: Clock, **options: Any) -> tuple[Queue, Any]:
    q = Queue.open(d, "q", journal_size=256, checkpoint_interval=3600, clock=clock, **options)
    fast, idle = q.reader("fast"), q.reader("idle")
    fill(q, 30)
    drain(fast)
    idle.close()
    q.checkpoint()
    return q, fast


def test_reader_expiry_retires_an_idle_reader_and_frees_its_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    q, _ = _idle_queue(str(tmp_path), clock, reader_expiry=DAY)
    files = len(q.journal_files)
    assert files > 3 and q.retire_files() == []  # not idle for a day yet
    clock.offset = DAY / 2 + 1  # idle for half the expiry: watched, kept
    assert q.retire_files() == [] and q.reader_names() == ["fast", "idle"]
    clock.offset = DAY + 1
    with caplog.at_level(logging.WARNING, logger="engine.queue"):
        retired = q.retire_files()
    assert len(retired) == files - 1 and q.reader_names() == ["fast"]
    assert not (tmp_path / "q.read.idle").exists()
    (line,) = [r.getMessage() for r in caplog.records if "reader_expiry" in r.getMessage()]
    assert "'idle'" in line and "30 unconfirmed item(s)" in line and "ids 1..30" in line
    stats: Any = q.stats()
    assert stats["readers_expired"] == 1 and stats["reader_expiry_s"] == DAY and stats["journal_files"] == 1
    q.verify()
    q.close()


def test_reader_expiry_is_off_by_default_and_spares_caught_up_readers(tmp_path: Path) -> None:
    clock = Clock()
    q, _ = _idle_queue(str(tmp_path), clock)
    clock.offset = 100 * DAY
    assert q.retire_files() == [] and q.reader_names() == ["fast", "idle"]
    q.close()
    q = Queue.open(str(tmp_path), "q", journal_size=256, checkpoint_interval=3600, clock=clock, reader_expiry=DAY)
    drain(q.reader("idle"))
    q.reader("idle").close()
    q.reader("fast").close()
    q.checkpoint()
    clock.offset = 200 * DAY  # both idle for long, neither holds anything
    q.retire_files()
    assert q.reader_names() == ["fast", "idle"] and q.stats()["readers_expired"] == 0
    q.close()


def test_reader_expiry_never_retires_a_held_reader(tmp_path: Path) -> None:
    clock = Clock()
    d = str(tmp_path)
    q = Queue.open(d, "q", journal_size=256, checkpoint_interval=3600, clock=clock, reader_expiry=DAY)
    here = q.reader("here")  # open in this process, never checkpointed since
    other = Queue.open_reader(d, "q", "other", checkpoint_interval=3600)  # its own lock handle
    fill(q, 30)
    clock.offset = 10 * DAY
    assert q.retire_files() == [] and q.reader_names() == ["here", "other"]
    # Let go of "other": it was seen held just now, so it gets a full expiry from here.
    other.close()
    clock.offset = 10 * DAY + DAY / 2
    assert q.retire_files() == [] and "other" in q.reader_names()
    clock.offset = 11 * DAY + 1
    q.retire_files()
    assert q.reader_names() == ["here"] and len(here) == 30
    q.close()


HOLDER = """
    import sys
    from engine.queue import Queue
    r = Queue.open_reader(sys.argv[1], "q", "remote", checkpoint_interval=3600)
    print("ready", flush=True)
    sys.stdin.readline()
    r.close()
"""


def test_reader_expiry_never_retires_a_reader_held_by_another_process(tmp_path: Path) -> None:
    clock = Clock()
    d = str(tmp_path)
    q = Queue.open(d, "q", journal_size=256, checkpoint_interval=3600, clock=clock, reader_expiry=DAY)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDER), d], cwd=ROOT, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        fill(q, 20)
        clock.offset = 10 * DAY
        q.retire_files()
        assert q.reader_names() == ["remote"] and q.stats()["readers_expired"] == 0
        assert main(["queue", "readers", d, "q", "--json"]) == 0
    finally:
        child.communicate("\n", timeout=60)
    clock.offset = 20 * DAY
    q.retire_files()
    assert q.reader_names() == [] and len(q.journal_files) == 1
    q.close()


def test_a_retired_reader_comes_back_as_a_new_reader_at_the_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    d = str(tmp_path)
    q, _ = _idle_queue(d, clock, reader_expiry=DAY)
    clock.offset = DAY + 1
    q.retire_files()
    assert q.reader_names() == ["fast"]
    with caplog.at_level(logging.WARNING, logger="engine.queue"):
        back = q.reader("idle")
    assert len(back) == 0  # the 30 items it left are not delivered to it
    (reset,) = [a for a in q.recovery.actions if "reader_expiry" in a.detail]
    assert reset.kind == "reset" and reset.count == 30 and reset.unit == "items" and "ids 1..30" in reset.detail
    assert any("reader_expiry" in r.getMessage() and "recovered" in r.getMessage() for r in caplog.records)
    new = q.put(b"after")
    item = back.get(timeout=0)
    assert item is not None and item.id == new
    back.confirm(item.id)
    q.close()
    # In another process: a new reader at the tail too (no record on disk).
    with Queue.open(d, "q", journal_size=256) as q2:
        fill(q2, 3)
        q2.checkpoint()
    q2 = Queue.open(d, "q", journal_size=256, clock=clock, reader_expiry=DAY)
    drain(q2.reader("fast"))
    q2.reader("fast").close()
    q2.reader("idle").close()
    q2.checkpoint()
    clock.offset = 3 * DAY
    q2.retire_files()
    assert q2.reader_names() == ["fast"]
    q2.close()
    with Queue.open_reader(d, "q", "idle") as remote:
        assert len(remote) == 0 and remote.get(timeout=0) is None


# -- crash safety -----------------------------------------------------------------------


def test_reader_expiry_is_crash_safe() -> None:
    """Every crash state of a retirement (reader file removed, then the files only it
    kept) reopens: nothing acknowledged is lost for the reader that stays; a state
    that still has the retired reader's file still has its whole backlog."""
    sim = SimFS()
    make_dirs(sim, "/db")
    now = [1_000_000.0]
    opts: dict[str, Any] = {"checkpoint_interval": 3600.0, "journal_size": 160}
    q = Queue.open("/db", "q", fs=sim, clock=lambda: now[0], reader_expiry=DAY, **opts)
    keep, idle = q.reader("keep"), q.reader("idle")
    rng = random.Random(3)
    acked = {xid: b"item-%d" % xid for xid in (q.put(b"item-%d" % (q.tail_id + 1)) for _ in range(25))}
    confirmed = set()
    for _ in range(10):
        item = keep.get(timeout=0)
        assert item is not None
        if rng.random() < 0.8:
            keep.confirm(item.id)
            confirmed.add(item.id)
        else:
            keep.abort(item.id)
    idle.close()
    q.checkpoint()
    sim.mark("before")
    seen: list[str] = []
    set_crashpoint_hook(seen.append)
    try:
        now[0] += 2 * DAY
        assert q.retire_files()
    finally:
        set_crashpoint_hook(None)
    assert "queue.expire-reader.before-dir-fsync" in seen and "queue.retire.before-dir-fsync" in seen
    assert seen.index("queue.expire-reader.after-dir-fsync") < seen.index("queue.retire.before-dir-fsync")
    q.close()
    start = next(i for i, e in enumerate(sim.trace) if getattr(e, "label", None) == "before")
    count = with_idle = 0
    for state in sim.crash_states(limit=400, seed=3, points=range(start, len(sim.trace) + 1)):
        count += 1
        fs2 = state.fs()
        q2 = Queue.open("/db", "q", fs=fs2, **opts)
        try:
            q2.verify()
            names = q2.reader_names()
            assert "keep" in names, state.describe()
            got = [it.id for it in q2.reader("keep")]
            assert set(acked) - confirmed <= set(got), state.describe()
            if "idle" in names:
                with_idle += 1
                assert [it.id for it in q2.reader("idle")] == sorted(acked), state.describe()
        finally:
            q2.close()
    assert count > 5 and with_idle > 0
