"""A writer killed right after a rotation created its new, empty file.

The defect: the reopened queue's reader drained everything and ``close()`` retired
every older file, leaving only the empty newest one.  The next open found no item
in the journal (tail 0) and refused the reader's checkpoint (head 120, more than
a crash's loss past 0): an unopenable queue.  Now the file holding the last item
is kept until a later file holds one, and a queue already left in that state
(by the previous version) opens with the next id above the readers' ids.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from engine.fs import default_fs
from engine.queue import Queue, codec, repair, verify_queue
from engine.queue.segments import SEGMENT_HEADER

ROOT = str(Path(__file__).resolve().parents[2])
#: Small files: about 15 items each, and a crash window of 82 ids.
SMALL: dict[str, Any] = {"journal_size": 2048}

WRITER = """
    import sys
    from engine.queue import Queue
    q = Queue.open(sys.argv[1], "q", journal_size=2048, sync="always")
    for i in range(1, 100000):
        q.put(b"item-%06d" % i + b"." * 90)
"""


def crash_after_rotation_create(directory: str, skip: int) -> None:
    """Run a writer in another process that SIGKILLs itself at the (skip+1)-th
    ``queue.rotate.after-create`` (the new file exists, empty; nothing went to it)."""
    env = dict(os.environ, ENGINE_CRASH_AT="queue.rotate.after-create", ENGINE_CRASH_SKIP=str(skip))
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WRITER), directory],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr


def test_a_queue_stays_openable_after_a_crash_right_after_a_rotation(tmp_path: Path) -> None:
    d = str(tmp_path)
    crash_after_rotation_create(d, skip=7)  # 8 files, over 82 items: past the crash window
    q = Queue.open(d, "q", **SMALL)
    last = q.tail_id
    assert last > 82 and not q.recovery.repaired  # the empty newest file is no damage
    reader = q.reader()
    got = [item.id for item in reader]
    assert got == list(range(1, last + 1))
    q.close()  # retires every file the reader passed, but not the last item's
    q = Queue.open(d, "q", **SMALL)  # raised CorruptFileError before the fix
    assert q.tail_id == last
    assert q.put(b"after") == last + 1  # ids are never reused
    q.close()
    remote = Queue.open_reader(d, "q", **SMALL)
    item = remote.get(0)
    assert item is not None and (item.id, item.data) == (last + 1, b"after")
    remote.confirm(item.id)
    remote.close()
    assert verify_queue(default_fs(), d, "q", journal_size=2048) == []


def test_a_queue_left_with_only_an_empty_writer_file_opens_above_the_readers_ids(tmp_path: Path) -> None:
    """What the previous version left on disk: an empty writer file and a reader
    at head 120.  It opens, the next id is 121, and neither a remote reader nor
    repair take the ids back."""
    d = str(tmp_path)
    (tmp_path / "q.1700000000000").write_bytes(SEGMENT_HEADER)
    (tmp_path / "q.read.").write_bytes(codec.encode_reader_file(120, []))
    notes = verify_queue(default_fs(), d, "q", journal_size=2048)
    assert notes == [f"{d}/q.read.: head 120, and no item in the journal: the next id will be above it"]
    assert not repair(default_fs(), d, "q").repaired
    remote = Queue.open_reader(d, "q", **SMALL)
    assert remote.head == 120 and remote.get(0) is None
    remote.close()
    q = Queue.open(d, "q", **SMALL)
    assert q.tail_id == 120
    assert q.put(b"next") == 121
    q.verify()
    q.close()
    q = Queue.open(d, "q", **SMALL)
    assert [i.data for i in q.reader()] == [b"next"]
    q.close()
