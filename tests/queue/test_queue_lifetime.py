"""A queue (or a reader in another process) dropped without close(): collected,
closed cleanly with a ResourceWarning, its threads stopped, its files left as a
close leaves them (the next open, here or in another process, reports no
recovery).  See engine/lifetime.py."""

from __future__ import annotations

import errno
import gc
import subprocess
import sys
import textwrap
import threading
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from engine.errors import ClosedError, PoisonedError
from engine.lifetime import close_when_dropped, keeper_of
from engine.queue import Queue

NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0}


def _threads() -> set[threading.Thread]:
    """The threads alive now (after collecting what earlier tests left behind)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    return set(threading.enumerate())


@contextmanager
def dropping(*what: str) -> Iterator[list[str]]:
    """Record the ResourceWarnings of the block and of a collection after it;
    assert there is one per ``what`` (``"queue 'jobs'"``...)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        messages: list[str] = []
        yield messages
        gc.collect()
    messages.extend(str(w.message) for w in seen if issubclass(w.category, ResourceWarning))
    for name in what:
        assert sum(m.startswith(f"unclosed {name}:") for m in messages) == 1, (name, messages)


@pytest.mark.parametrize("sync", ["always", 0.05, "never"])
def test_a_dropped_queue_is_closed_and_reopens_without_recovery(tmp_path: Path, sync: object) -> None:
    d = str(tmp_path)
    threads = _threads()
    q = Queue.open(d, "jobs", sync=sync, **NOCKPT)
    r = q.reader("local")
    remote = Queue.open_reader(d, "jobs", "remote", **NOCKPT)
    q.put(b"a")
    q.flush()
    seen = remote.get(5)
    assert seen is not None
    remote.confirm(seen.id)  # checkpointed only by its close
    q.put_many([b"b", b"c"])  # staged in the buffered modes: only the close writes them
    item = r.get(0)
    assert item is not None
    r.confirm(item.id)  # checkpointed only by the close
    assert set(threading.enumerate()) - threads  # the queue's and the remote reader's
    probe = weakref.ref(q)
    with dropping(f"queue 'jobs' in {d!r}", "reader 'remote' of queue 'jobs'"):
        del q, r, item, remote, seen
    assert probe() is None
    assert not set(threading.enumerate()) - threads  # every background thread stopped and joined
    with Queue.open(d, "jobs") as again:  # no LockedError: the locks were released
        assert not again.recovery.repaired, again.recovery.summary()
        assert again.tail_id == 3 and again.reader_names() == ["local", "remote"]
        assert again.reader("local").head == 1 and again.reader("remote").head == 1


def test_a_queue_in_a_reference_cycle_is_closed_by_the_collector(tmp_path: Path) -> None:
    class Holder:
        pass

    holder = Holder()
    holder.queue = Queue.open(str(tmp_path), "jobs", sync="never", **NOCKPT)  # type: ignore[attr-defined]
    holder.me = holder  # type: ignore[attr-defined]
    holder.queue.put(b"x")  # type: ignore[attr-defined]
    with dropping(f"queue 'jobs' in {str(tmp_path)!r}"):
        del holder
    with Queue.open(str(tmp_path), "jobs") as q:
        assert not q.recovery.repaired and q.tail_id == 1


def test_readers_belong_to_their_queue(tmp_path: Path) -> None:
    """A reader does not keep its queue alive: dropping the queue closes its readers
    (as a dropped text file closes its buffer)."""
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    q.put(b"x")
    reader = q.reader()
    with dropping(f"queue 'jobs' in {str(tmp_path)!r}"):
        del q
    assert reader.closed
    with pytest.raises(ClosedError, match="its Queue was dropped without close"):
        reader.get(0)


def test_a_closed_queue_leaves_nothing_to_finalize(tmp_path: Path) -> None:
    threads = _threads()
    with Queue.open(str(tmp_path), "jobs", sync=0.05) as q, q.reader() as r:
        q.put(b"x")
        assert r.get(0) is not None
    remote = Queue.open_reader(str(tmp_path), "jobs", "other")
    remote.close()
    with dropping() as messages:
        del q, r, remote
    assert not messages
    assert not set(threading.enumerate()) - threads


def test_a_dropped_remote_reader_is_checkpointed(tmp_path: Path) -> None:
    d = str(tmp_path)
    with Queue.open(d, "jobs", **NOCKPT) as q:
        q.put_many([b"a", b"b"])
        remote = Queue.open_reader(d, "jobs", "remote", **NOCKPT)
        item = remote.get(5)
        assert item is not None
        remote.confirm(item.id)
        with dropping("reader 'remote' of queue 'jobs'"):
            del remote, item
        with Queue.open_reader(d, "jobs", "remote") as again:  # its lock was released
            assert again.head == 1 and not again.recovery.repaired


def test_dropped_then_reopened_in_a_subprocess_that_exits_without_close(tmp_path: Path) -> None:
    d = str(tmp_path)
    script = textwrap.dedent(
        f"""
        import gc, threading
        from engine import Queue
        start = threading.active_count()
        q = Queue.open({d!r}, "jobs", sync="never")
        q.reader("local").get(0)
        q.put_many([b"a", b"b"])
        del q
        gc.collect()
        assert threading.active_count() == start, threading.enumerate()
        q = Queue.open({d!r}, "jobs", sync="never")
        assert not q.recovery.repaired, q.recovery.summary()
        r = q.reader("local")
        r.confirm(r.get(0).id)
        q.put(b"c")  # staged: the exit's close writes it
        """
    )
    done = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("ResourceWarning: unclosed queue 'jobs'") == 2, done.stderr
    with Queue.open(d, "jobs") as q:
        assert not q.recovery.repaired, q.recovery.summary()
        assert q.tail_id == 3 and q.reader("local").head == 1 and len(q) == 2


class _Keeper:
    def __init__(self, threads: list[threading.Thread]) -> None:
        self.threads = threads
        self.closed_in: list[threading.Thread] = []

    def close(self) -> None:
        self.closed_in.append(threading.current_thread())

    def background_threads(self) -> list[threading.Thread | None]:
        return [*self.threads, None]


def test_the_finalizer_never_closes_on_the_objects_own_thread() -> None:
    """A cycle may be collected by any thread that allocates, the keeper's own
    included (which may hold a lock close() takes): close runs in another thread."""

    class Owner:
        pass

    here = threading.current_thread()
    for own, expect_other in ([here], True), ([], False):
        keeper = _Keeper(own)
        owner = Owner()
        finalizer = close_when_dropped(owner, keeper.close, keeper.background_threads, "thing")
        with pytest.warns(ResourceWarning, match="unclosed thing"):
            finalizer()
        for thread in threading.enumerate():
            if thread.name == "close thing":
                thread.join()
        assert len(keeper.closed_in) == 1 and (keeper.closed_in[0] is not here) == expect_other


def test_a_keeper_shares_its_owners_state() -> None:
    class Thing:
        def __init__(self) -> None:
            self.value = 1

    thing = Thing()
    keeper = keeper_of(thing)
    keeper.value = 2
    assert type(keeper) is Thing and keeper is not thing and thing.value == 2
    probe = weakref.ref(thing)
    del thing
    assert probe() is None and keeper.value == 2  # the keeper does not hold its owner


def test_a_queue_that_failed_a_write_is_collected_too(tmp_path: Path) -> None:
    """The failure it keeps (to raise again) is a copy: the original's traceback
    holds the frames of the put that met it, and so the queue itself."""
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)

    def broken(offset: int, blob: bytes) -> None:
        raise OSError(errno.EIO, "injected")

    q._writer._handle.write_at = broken  # type: ignore[method-assign]
    with pytest.raises(OSError, match="injected"):
        q.put(b"x")
    with pytest.raises(PoisonedError, match=r"an earlier write failed: .*injected"):
        q.put(b"y")
    probe = weakref.ref(q)
    with dropping(f"queue 'jobs' in {str(tmp_path)!r}"):
        del q
    assert probe() is None
    with Queue.open(str(tmp_path), "jobs") as again:
        assert not again.recovery.repaired and again.tail_id == 0
