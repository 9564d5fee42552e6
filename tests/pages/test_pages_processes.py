"""Processes: a reader in this process never sees a half-applied transaction."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from engine.errors import LockedError
from engine.pages import PageStore

WRITER = textwrap.dedent(
    """
    import sys
    from engine.pages import PageStore
    store = PageStore.open(sys.argv[1], checkpoint_bytes=200_000)
    print("ready", flush=True)
    for i in range(1, int(sys.argv[2]) + 1):
        with store.transaction() as tx:
            value = i.to_bytes(8, "little") * 512
            tx.write(1, 0, value)   # pages 1 and 3 are not adjacent: two writes per apply
            tx.write(3, 0, value)
    store.close()
    """
)


@pytest.mark.slow
def test_reader_sees_whole_transactions_only(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "shared.db")
    with PageStore.open(path) as store, store.transaction() as tx:
        for _ in range(3):
            tx.allocate()
    count = 150
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, str(count)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    with pytest.raises(LockedError):
        PageStore.open(path)  # the other process is the writer
    reader = PageStore.open_reader(path)
    seen = set()
    try:
        while True:
            with reader.snapshot():
                one, three = reader.read(1), reader.read(3)
            assert one == three, "saw half of a transaction"
            seen.add(int.from_bytes(one[:8], "little"))
            if proc.poll() is not None:
                break
    finally:
        reader.close()
        proc.wait()
    assert proc.returncode == 0
    with PageStore.open_reader(path) as reader:
        assert int.from_bytes(reader.read(1)[:8], "little") == count
    assert len(seen) > 1  # the reader ran alongside the writer


KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from engine.pages import PageStore
    store = PageStore.open(sys.argv[1], page_size=512, checkpoint_bytes=3000)
    with store.transaction() as tx:
        page = tx.allocate()
    for i in range(1, 41):
        with store.transaction() as tx:
            tx.write(page, 0, i.to_bytes(8, "little") * 64)
        print(i, flush=True)   # acknowledged
    """
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "point",
    [
        "pages.commit.before-fsync",
        "pages.commit.after-fsync",
        "pages.checkpoint.before-store-fsync",
        "pages.checkpoint.journal-reset-unsynced",
    ],
)
def test_sigkill_at_crash_points(tmp_path: os.PathLike[str], point: str) -> None:
    """A real process killed at a named crash point: the reopened store holds every
    acknowledged commit (and at most the one in flight)."""
    path = os.path.join(str(tmp_path), "killed.db")
    env = dict(os.environ, PYTHONPATH=os.getcwd(), ENGINE_CRASH_AT=point, ENGINE_CRASH_SKIP="3")
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, path], capture_output=True, env=env, timeout=60)
    assert proc.returncode == -9, proc.stderr  # SIGKILL at the crash point
    acked = [int(line) for line in proc.stdout.split()]
    last = acked[-1] if acked else 0
    with PageStore.open(path) as store:
        store.verify()
        value = int.from_bytes(store.read(1, 0, 8), "little")
        assert value in (last, last + 1)
        assert store.read(1) == value.to_bytes(8, "little") * 64
