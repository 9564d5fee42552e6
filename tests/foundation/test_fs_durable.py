"""SyncPolicy and GroupCommit (the periodic driver: tests/foundation/test_fs_core.py)."""

from __future__ import annotations

import threading
import time

import pytest

from engine.errors import ConfigError, PoisonedError
from engine.fs import GroupCommit, SyncPolicy


@pytest.mark.parametrize(
    ("value", "mode", "period"),
    [("always", "always", 0.0), ("never", "never", 0.0), (0.5, "periodic", 0.5), ("2", "periodic", 2.0),
     (0, "always", 0.0), (None, "never", 0.0)],
)
def test_sync_policy_parse(value, mode, period) -> None:  # type: ignore[no-untyped-def]
    policy = SyncPolicy.parse(value)
    assert (policy.mode, policy.period) == (mode, period)
    assert SyncPolicy.parse(policy) is policy


@pytest.mark.parametrize("bad", ["sometimes", -1.5j, [1]])
def test_sync_policy_rejects(bad) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError):
        SyncPolicy.parse(bad)


class SlowSync:
    """A fake fsync that records which writes it covered (the data it 'persists')."""

    def __init__(self, written: list[int], delay: float = 0.005) -> None:
        self.written = written
        self.durable: set[int] = set()
        self.calls = 0
        self.delay = delay
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            snapshot = list(self.written)
        time.sleep(self.delay)
        self.calls += 1
        self.durable.update(snapshot)


def test_group_commit_covers_each_writer_and_shares_syncs() -> None:
    written: list[int] = []
    sync = SlowSync(written)
    gc = GroupCommit(sync)
    write_lock = threading.Lock()
    errors: list[str] = []

    def writer(n: int) -> None:
        for i in range(20):
            item = n * 1000 + i
            with write_lock:
                with sync.lock:
                    written.append(item)
                ticket = gc.ticket()
            gc.wait(ticket)
            if item not in sync.durable:
                errors.append(f"{item} returned before it was durable")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(sync.durable) == 160
    assert sync.calls < 160 / 2, f"group commit did not share fsyncs: {sync.calls} syncs for 160 writes"
    assert gc.syncs == sync.calls


def test_group_commit_failure_is_final() -> None:
    calls = []

    def failing() -> None:
        calls.append(1)
        raise OSError(5, "EIO")

    gc = GroupCommit(failing, name="f")
    with pytest.raises(PoisonedError):
        gc.wait(gc.ticket())
    with pytest.raises(PoisonedError):
        gc.wait(gc.ticket())
    assert len(calls) == 1, "a failed sync must not be retried"


