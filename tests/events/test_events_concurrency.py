"""A reader beside a live writer (threads and a second process), and the writer lock across processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from engine.events import EventJournal

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
    reader = EventJournal.open_read_only(d)
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
        with EventJournal.open_read_only(d) as reader:
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
        assert j.recovered_bytes == 0 and j.repairs == []
        assert _check_snapshot(j) == 5 * 180
