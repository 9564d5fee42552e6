"""Competing consumers: several processes (or handles) share one reader name.

Each item is open in at most one consumer; confirm and abort work from the
consumer that holds it; the checkpoint is shared; a consumer that dies loses
nothing (its open items go to the others, ``error_count + 1``); fanout stays.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from engine.queue import Queue
from engine.queue.reader import Item

ROOT = str(Path(__file__).resolve().parents[2])
FAST: dict[str, Any] = {"checkpoint_interval": 0.05, "poll_interval": 0.002}


def test_two_consumers_of_one_name_share_the_items(tmp_path: Path) -> None:
    d = str(tmp_path)
    q = Queue.open(d, "q", **FAST)
    q.reader("w")  # the name exists; the default reader keeps its own backlog
    q.remove_reader("w")
    first = Queue.open_reader(d, "q", "w", **FAST)
    second = Queue.open_reader(d, "q", "w", **FAST)  # the same protocol, now with somebody else there
    expected = {q.put(b"job-%d" % i) for i in range(300)}
    got: dict[str, list[int]] = {"first": [], "second": []}
    open_now: set[int] = set()
    guard = threading.Lock()
    overlaps = []

    def consume(name: str, reader: Any) -> None:
        idle = 0
        while idle < 40:
            item = reader.get(timeout=0.01)
            if item is None:
                idle += 1
                continue
            idle = 0
            with guard:
                if item.id in open_now:
                    overlaps.append(item.id)
                open_now.add(item.id)
            time.sleep(0.0005)
            with guard:
                open_now.discard(item.id)
            got[name].append(item.id)
            reader.confirm(item.id)

    threads = [threading.Thread(target=consume, args=(n, r)) for n, r in (("first", first), ("second", second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []
    assert sorted(got["first"] + got["second"]) == sorted(expected)  # each once, none lost
    assert got["first"] and got["second"]  # both had work
    first.close()
    second.close()
    again = Queue.open_reader(d, "q", "w", **FAST)
    assert again.get(timeout=0) is None  # the shared checkpoint holds both consumers' confirms
    again.close()
    q.close()


def test_an_abort_goes_to_the_other_consumer(tmp_path: Path) -> None:
    d = str(tmp_path)
    q = Queue.open(d, "q", **FAST)
    a = q.reader("w")
    other = Queue.open(d, "q", **FAST)
    b = other.reader("w")  # another handle: competes as another process would
    q.put(b"one")
    item = a.get(timeout=1)
    assert item is not None
    assert b.get(timeout=0.05) is None  # a holds it
    a.abort(item.id)
    back = b.get(timeout=1)
    assert back is not None and back.id == item.id and back.error_count == 1
    b.confirm(back.id)
    b.checkpoint()
    assert a.get(timeout=0.1) is None  # done for the name
    other.close()
    q.close()


CONSUMER = """
    import sys, time
    from engine.queue import Queue
    r = Queue.open_reader(sys.argv[1], "q", "w", checkpoint_interval=0.05, poll_interval=0.002)
    held = []
    while len(held) < 3:
        item = r.get(timeout=5)
        held.append(item.id)
    print(" ".join(map(str, held)), flush=True)
    time.sleep(60)  # holds them until killed
"""


def test_a_killed_consumers_items_go_to_the_others(tmp_path: Path) -> None:
    d = str(tmp_path)
    q = Queue.open(d, "q", **FAST)
    mine = q.reader("w")
    for i in range(3):
        q.put(b"x%d" % i)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CONSUMER), d],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    held = [int(x) for x in child.stdout.readline().split()]
    assert held == [1, 2, 3], held if held else child.stderr.read()
    assert mine.get(timeout=0.05) is None  # the child holds them all
    child.send_signal(signal.SIGKILL)
    child.wait()
    got: list[Item] = []
    while len(got) < 3:
        item = mine.get(timeout=2)
        assert item is not None, "the dead consumer's items did not come back"
        got.append(item)
        mine.confirm(item.id)
    assert sorted(i.id for i in got) == held and all(i.error_count == 1 for i in got)
    q.verify()
    q.close()


def test_fanout_stays_with_competing_consumers(tmp_path: Path) -> None:
    d = str(tmp_path)
    q = Queue.open(d, "q", **FAST)
    audit = q.reader("audit")
    a = q.reader("w")
    b = Queue.open_reader(d, "q", "w", **FAST)
    q.put(b"both see it")
    item = a.get(timeout=1) or b.get(timeout=1)
    seen = audit.get(timeout=1)
    assert item is not None and seen is not None and seen.id == item.id
    b.close()
    q.close()


def test_a_consumer_joining_while_another_checkpoints_skips_what_that_one_confirmed(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Issue 27, found by the history checker (``python -m stress --store queue
    --seconds 300 --seed 27``: ids confirmed by a live consumer delivered again
    to one that had just joined).  A joining consumer loads the reader file, then
    maps the checkpoints' generation word: a checkpoint written in between (here
    forced at that moment) released the confirmed item's claim, and the newcomer,
    its state older than the generation it saw, claimed it and delivered it."""
    import engine.queue.reader as reader_module

    d = str(tmp_path)
    slow: dict[str, Any] = {"checkpoint_interval": 3600.0, "poll_interval": 0.002}
    with Queue.open(d, "q", **slow) as q:
        q.reader("w").close()
        q.put_many([b"one", b"two"])
    first = Queue.open_reader(d, "q", "w", **slow)
    item = first.get(timeout=5)
    assert item is not None
    first.confirm(item.id)  # claimed until first's next checkpoint writes it
    real = reader_module.Claims

    def late(lock: Any) -> Any:
        first.checkpoint()  # the newcomer's state is loaded: the checkpoint lands now
        return real(lock)

    monkeypatch.setattr(reader_module, "Claims", late)
    second = Queue.open_reader(d, "q", "w", **slow)
    monkeypatch.undo()
    try:
        got = second.get(timeout=0)
        assert got is not None and got.data == b"two", got  # never "one": first confirmed it and lives
    finally:
        second.close()
        first.close()
