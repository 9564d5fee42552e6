"""The queue as a ``queue.Queue`` user expects it (issue "first hour, round two"):
``get`` with ``block``/``timeout`` over the default reader, ``task_done`` /
``join``, ``qsize`` / ``empty`` / ``full``, ``queue.Empty`` and ``queue.Full``;
a remote reader's ``stats()`` with its backlog bytes and last checkpoint, its
``repr``, and ``with q:`` on a closed queue."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engine import ClosedError, EmptyError, FullError, Queue

NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0}


def test_get_and_task_done_as_queue_queue(tmp_path: Path) -> None:
    with Queue.open(str(tmp_path), "jobs", serializer="json", **NOCKPT) as q:
        assert q.empty() and q.qsize() == 0
        for n in range(3):
            q.put({"job": n})
        assert q.qsize() == 3 and not q.empty() and not q.full()
        first = q.get()
        assert first.value == {"job": 0} and first.id == 1
        q.task_done()
        assert q.qsize() == 2
        with q.get(timeout=1) as second:  # confirmed when the block ends
            assert second.value == {"job": 1}
        with pytest.raises(RuntimeError), q.get() as third:  # given back when it raises
            raise RuntimeError("work failed")
        again = q.get_nowait()
        assert again.id == third.id and again.error_count == 1
        again.confirm()
        assert q.empty() and q.join(timeout=1)
        with pytest.raises(queue.Empty):  # the standard library's exception
            q.get(timeout=0.05)
        with pytest.raises(EmptyError):
            q.get(block=False)
        with pytest.raises(ValueError, match="task_done"):
            q.task_done()


def test_task_done_confirms_what_this_thread_got(tmp_path: Path) -> None:
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        q.put_many([b"a", b"b"])
        mine = q.get()
        got: list[int] = []

        def other() -> None:
            got.append(q.get().id)
            q.task_done()  # confirms the item this thread got, not the main thread's

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert got == [2] and q.qsize() == 1  # mine (1) still open
        q.task_done()
        assert q.qsize() == 0 and mine.id == 1


def test_join_waits_for_every_item_to_be_done(tmp_path: Path) -> None:
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        q.put_many([b"%d" % n for n in range(5)])
        done = []

        def worker() -> None:
            for _ in range(5):
                job = q.get(timeout=5)
                time.sleep(0.01)
                done.append(job.data)
                q.task_done()

        threading.Thread(target=worker).start()
        assert q.join(timeout=10)
        assert len(done) == 5 and q.empty()


def test_full_and_queue_full(tmp_path: Path) -> None:
    with Queue.open(str(tmp_path), "jobs", max_items=2, **NOCKPT) as q:
        q.reader()  # the default reader counts for max_items
        q.put(b"1")
        q.put_nowait(b"2")
        assert q.full()
        with pytest.raises(queue.Full):
            q.put(b"3")
        with pytest.raises(FullError):
            q.put(b"3")


def test_a_remote_readers_stats_repr_and_a_closed_queue(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    q.reader("r")
    q.put_many([b"x" * 10, b"y" * 20])
    with Queue.open_reader(str(tmp_path), "jobs", "r", **NOCKPT) as r:
        item = r.get(0)
        assert item is not None
        r.confirm(item.id)
        stats = r.stats()
        assert stats["backlog_bytes"] == 20 and stats["items"] == 1
        assert stats["confirms"] == 1 and stats["gets"] == 1 and stats["aborts"] == 0
        r.checkpoint()
        assert isinstance(r.stats()["last_checkpoint_ns"], int)
        assert repr(r).startswith("<RemoteReader 'r' of queue 'jobs' in ") and "head=1" in repr(r)
    assert "closed" in repr(r)
    q.close()
    with pytest.raises(ClosedError):
        with q:
            pass
