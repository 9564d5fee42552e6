"""A directory with one store of every kind, and a queue whose readers differ:
``fast`` confirms everything, ``slow`` confirms a few, ``idle`` nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import engine


def make_stores(root: Path, items: int = 30) -> None:
    (root / "kv").mkdir(parents=True)
    with engine.Queue.open(root / "queues", "jobs") as q:
        readers = {name: q.reader(name) for name in ("fast", "slow", "idle")}
        for i in range(items):
            q.put(b"job %d" % i)
        for name, count in (("fast", items), ("slow", 5)):
            for _ in range(count):
                item = readers[name].get(0)
                assert item is not None
                readers[name].confirm(item.id)
    with engine.AppendLog.open(root / "logs" / "clicks") as log:
        log.append_many([b"click %d" % i for i in range(50)])
    with engine.EventJournal.open(root / "events") as journal:
        journal.write("cart", [(1, b"added"), (2, b"paid")])
    with engine.PageStore.open(root / "pages.db") as store, store.transaction() as tx:
        tx.write(tx.allocate(), 0, b"page")
    with engine.StreamJournal.open(root / "uploads.jnl", size=1 << 16) as sj:
        stream = sj.open_stream("upload")
        stream.write(b"chunk")
        stream.close()
    with engine.KV.open(root / "kv" / "app.kv") as kv:
        kv[b"user:1"] = b"alice"
        kv[b"user:2"] = b"bob"


def engine_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "engine", *args]


def start_server(args: list[str], pattern: str, timeout: float = 60.0) -> tuple[subprocess.Popen[str], str]:
    """Start ``engine ARGS`` and wait for the line on stderr that matches
    ``pattern`` (its first group is returned: the URL it serves)."""
    proc = subprocess.Popen(engine_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        found = re.search(pattern, line)
        if found:
            return proc, found.group(1)
    proc.kill()
    raise AssertionError(f"engine {' '.join(args)} did not start: {proc.communicate()}")


def stop(proc: subprocess.Popen[str]) -> None:
    """Stop a server started by :func:`start_server` by its PID (SIGTERM, then kill)."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)
