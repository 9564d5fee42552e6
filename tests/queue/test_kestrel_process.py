"""``engine queue serve`` as a real process: STORED survives SIGKILL; SIGTERM and
Ctrl-C (SIGINT) close the queues cleanly.  Bounded: every wait has a timeout and
every process is killed by its PID at the end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kestrel_helpers import TIMEOUT, client, serving

from engine.cli import main
from engine.queue import Queue

pymemcache = pytest.importorskip("pymemcache.client.base")


def _client(port: int) -> pymemcache.Client:
    return client("127.0.0.1", port)


@pytest.mark.parametrize("sync", ["always", "never"])
def test_stored_survives_sigkill(tmp_path: Path, sync: str) -> None:
    with serving(tmp_path, "--sync", sync) as (proc, info):
        port = info["port"]
        c = _client(port)
        assert c.get("jobs") is None
        for n in range(50):
            assert c.set("jobs", b"item %d" % n) is True
        assert c.get("jobs/open") == b"item 0"  # open when killed: delivered again
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(2 * TIMEOUT)
        c.close()
    if sync != "always":
        return  # only sync="always" promises STORED items survive a crash (of the machine)
    with serving(tmp_path) as (_, info):
        port = info["port"]
        c = _client(port)
        got = [c.get("jobs") for _ in range(51)]
        c.close()
    assert got == [b"item %d" % n for n in range(50)] + [None]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_close_the_queues_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    with serving(tmp_path) as (proc, info):
        port = info["port"]
        c = _client(port)
        c.get("jobs")
        c.set("jobs", b"a")
        c.set("jobs", b"b")
        assert c.get("jobs") == b"a"
        os.kill(proc.pid, sig)
        assert proc.wait(2 * TIMEOUT) == 0
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


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["--port", "99999"], "--port 99999 is out of range: a TCP port is 0 to 65535"),
        (["--port", "-1"], "--port -1 is out of range"),
        (["--port", "http"], "--port 'http' is not a port number"),
        (["--metrics-port", "70000"], "--metrics-port 70000 is out of range"),
        (["--host", "no-such-host.invalid"], "host 'no-such-host.invalid'"),
        (["--host", "192.0.2.1"], "host '192.0.2.1' is not an address of this machine"),
        (["--metrics-host", "no-such-host.invalid", "--metrics-port", "0"], "metrics host 'no-such-host.invalid'"),
    ],
)
def test_argument_errors_are_one_line_exit_2_and_create_nothing(tmp_path: Path, arguments: list[str],
                                                                words: str) -> None:
    """``--port 99999`` ended in an OverflowError traceback; a bad ``--host`` did
    not name the host and left the queue directory behind."""
    target = tmp_path / "queues"
    done = subprocess.run(
        [sys.executable, "-m", "engine", "queue", "serve", str(target), *arguments],
        capture_output=True, timeout=2 * TIMEOUT, text=True,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and words in lines[0], done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not target.exists()


@pytest.mark.parametrize("option", ["--port", "--metrics-port"])
def test_a_port_in_use_is_one_line_exit_1_and_creates_nothing(tmp_path: Path, option: str) -> None:
    target = tmp_path / "queues"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        other = ["--port", "0"] if option == "--metrics-port" else []
        done = subprocess.run(
            [sys.executable, "-m", "engine", "queue", "serve", str(target), *other, option, port],
            capture_output=True, timeout=2 * TIMEOUT, text=True,
        )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and port in lines[0] and "in use" in lines[0], done.stderr
    assert not target.exists()
