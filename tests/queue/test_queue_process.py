"""Real processes: a reader in another process, a producer in another process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from engine.queue import Queue

ROOT = str(Path(__file__).resolve().parents[2])


def run_child(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


READER = """
    import sys
    from engine.queue import Queue
    r = Queue.open_reader(sys.argv[1], "jobs", "worker", poll_interval=0.002)
    print("ready", flush=True)
    got = []
    while len(got) < int(sys.argv[2]):
        item = r.get(timeout=60)
        if item is None:
            break
        got.append(item.data.decode())
        r.confirm(item.id)
    r.close()
    print(",".join(got), flush=True)
"""


def test_reader_in_another_process_gets_every_item_in_order(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", checkpoint_interval=0.05, journal_size=4096)
    child = run_child(READER, str(tmp_path), "300")
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    expected = [f"item-{i}" for i in range(300)]
    for i in range(0, 300, 3):
        q.put_many([e.encode() for e in expected[i : i + 3]])
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert out.strip().split(",") == expected
    # The other process's checkpoint lets the writer retire the files it passed.
    q.checkpoint()
    assert len(q.journal_files) == 1
    q.close()


def test_a_producer_in_another_process_puts_into_the_same_queue(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs")
    r = q.reader()
    q.put(b"here")
    child = run_child(
        """
        import sys
        from engine.queue import Queue
        with Queue.open(sys.argv[1], "jobs") as q:
            print(q.put(b"there"))
        """,
        str(tmp_path),
    )
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.strip() == "2"
    assert q.put(b"here again") == 3
    got = [r.get(timeout=5) for _ in range(3)]
    assert [item.data for item in got if item is not None] == [b"here", b"there", b"here again"]
    q.close()
