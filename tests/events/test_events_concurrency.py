"""A reader beside a live writer (threads and a second process), and the writer lock across processes."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap
import threading
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from engine.errors import LockedError
from engine.events import LOCK_NAME, EventJournal

WRITER = textwrap.dedent("""
    import sys
    from engine.events import EventJournal
    j = EventJournal.open(sys.argv[1], sync="never")
    print("ready", flush=True)
    for r in range(1, 61):
        for i in range(5):
            j.write(f"id{i}", [(s, b"%d" % s) for s in range(3 * r - 2, 3 * r + 1)])
    sys.stdin.readline()   # hold the lock until told to finish
    j.close()
""")


def _check_snapshot(reader: EventJournal) -> int:
    total = 0
    for info in reader.ids():
        events = list(reader.replay(info.persistence_id))
        # Whole batches only, in order, payloads intact.
        assert len(events) % 3 == 0
        assert [e.sequence_nr for e in events] == list(range(1, info.highest + 1))
        assert all(e.payload == b"%d" % e.sequence_nr for e in events)
        total += len(events)
    return total


def test_reader_thread_beside_writer(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    writer = EventJournal.open(d, sync="never", preallocate=4096)
    writer.write("id0", [(1, b"1"), (2, b"2"), (3, b"3")])
    reader = EventJournal.open_reader(d)
    done = threading.Event()

    def write() -> None:
        for _round in range(2, 150):
            for i in range(4):
                pid = f"id{i}"
                h = writer.highest_sequence_nr(pid)
                writer.write(pid, [(h + 1, b"%d" % (h + 1)), (h + 2, b"%d" % (h + 2)), (h + 3, b"%d" % (h + 3))])
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    seen = 0
    while not done.is_set():
        reader.refresh()
        seen = max(seen, _check_snapshot(reader))
    thread.join()
    reader.refresh()
    assert _check_snapshot(reader) == 3 + 148 * 4 * 3
    assert reader.verify() == []
    reader.close()
    writer.close()


def test_reader_process_beside_writer_process(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    root = str(Path(__file__).resolve().parents[2])
    child = subprocess.Popen([sys.executable, "-c", WRITER, d], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=root, env={"PYTHONPATH": root})
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        from engine.errors import LockedError

        try:
            EventJournal.open(d)
        except LockedError:
            pass
        else:  # pragma: no cover - the assertion below explains
            raise AssertionError("a second writer opened the journal")
        with EventJournal.open_reader(d) as reader:
            last = 0
            while last < 5 * 180:
                reader.refresh()
                last = _check_snapshot(reader)
            assert reader.verify() == []
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
    with EventJournal.open(d) as j:
        assert not j.recovery.repaired and j.recovery.actions == []
        assert _check_snapshot(j) == 5 * 180


def _race_to_create(directory: str, start: Barrier, hold: Barrier, out: Any) -> None:
    """Child: open (creating) the journal when both are ready; report; keep it
    open until the other child has tried too."""
    start.wait()
    try:
        journal = EventJournal.open(directory)
    except LockedError as exc:
        out.put(("locked", exc.path))
        hold.wait()
        return
    except Exception as exc:  # reported to the parent, which fails the test
        out.put((type(exc).__name__, str(exc)))
        hold.wait()
        return
    out.put(("opened", None))
    hold.wait()
    journal.write("p", [(1, b"x")])
    journal.close()


def test_two_processes_racing_to_create_the_same_journal(tmp_path: Path) -> None:
    """The writer lock is taken before anything is created: of two processes
    creating the same journal at once, one opens it and the other gets
    LockedError naming the lock file (never FileExistsError or a half-made file)."""
    ctx = multiprocessing.get_context("fork")
    for round_ in range(10):
        d = str(tmp_path / f"j{round_}")
        start, hold, out = ctx.Barrier(2), ctx.Barrier(2), ctx.Queue()
        children = [ctx.Process(target=_race_to_create, args=(d, start, hold, out)) for _ in range(2)]
        for child in children:
            child.start()
        results = sorted(out.get(timeout=60) for _ in children)
        for child in children:
            child.join(timeout=60)
            assert child.exitcode == 0
        assert results == [("locked", f"{d}/{LOCK_NAME}"), ("opened", None)]
        with EventJournal.open(d) as journal:
            assert not journal.recovery.repaired
            assert [e.payload for e in journal.replay("p")] == [b"x"] and journal.verify() == []
