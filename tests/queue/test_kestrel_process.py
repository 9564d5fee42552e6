"""``engine queue serve`` as a real process: STORED survives SIGKILL; SIGTERM and
Ctrl-C (SIGINT) close the queues cleanly.  Bounded: every wait has a timeout and
every process is killed by its PID at the end."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engine.cli import main
from engine.queue import Queue

pymemcache = pytest.importorskip("pymemcache.client.base")

TIMEOUT = 20.0


@contextmanager
def serving(directory: Path, *options: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``engine queue serve DIR --port 0 --json``: the process and its port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "queue", "serve", str(directory), "--port", "0", "--json", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT)
        assert ready, "the server did not start"
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else b""
        yield proc, int(json.loads(line)["port"])
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(TIMEOUT)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _client(port: int) -> pymemcache.Client:
    return pymemcache.Client(("127.0.0.1", port), default_noreply=False, timeout=TIMEOUT, connect_timeout=TIMEOUT)


@pytest.mark.parametrize("sync", ["always", "never"])
def test_stored_survives_sigkill(tmp_path: Path, sync: str) -> None:
    with serving(tmp_path, "--sync", sync) as (proc, port):
        c = _client(port)
        assert c.get("jobs") is None
        for n in range(50):
            assert c.set("jobs", b"item %d" % n) is True
        assert c.get("jobs/open") == b"item 0"  # open when killed: delivered again
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(TIMEOUT)
        c.close()
    if sync != "always":
        return  # only sync="always" promises STORED items survive a crash (of the machine)
    with serving(tmp_path) as (_, port):
        c = _client(port)
        got = [c.get("jobs") for _ in range(51)]
        c.close()
    assert got == [b"item %d" % n for n in range(50)] + [None]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_close_the_queues_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    with serving(tmp_path) as (proc, port):
        c = _client(port)
        c.get("jobs")
        c.set("jobs", b"a")
        c.set("jobs", b"b")
        assert c.get("jobs") == b"a"
        os.kill(proc.pid, sig)
        assert proc.wait(TIMEOUT) == 0
        c.close()
    with Queue.open(tmp_path, "jobs") as q:
        assert not q.recovery.repaired
        item = q.reader().get(timeout=0)
        assert item is not None and item.data == b"b"  # the confirmed get was checkpointed at close


def test_cli_refuses_bad_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for bad in (["--sync", "sometimes"], ["--max-connections", "0"], ["--threads", "x"]):
        with pytest.raises(SystemExit):
            main(["queue", "serve", str(tmp_path), *bad])
    assert "--sync" in capsys.readouterr().err
