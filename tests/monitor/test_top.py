"""``engine top``: the live view in a real terminal (tmux), and ``--once --json``."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import engine
from tests.monitor.monitor_helpers import engine_command, make_stores
from tests.monitor.tools import require


def test_top_once_json_names_the_reader_falling_behind(tmp_path: Path) -> None:
    make_stores(tmp_path)
    done = subprocess.run(engine_command("top", str(tmp_path), "--once", "--json", "--interval", "0.2"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert view["behind"]["reader"] == "idle" and view["behind"]["backlog_items"] == 30
    assert [r["reader"] for r in view["readers"]] == ["idle", "slow", "fast"]
    kinds = {s["kind"] for s in view["stores"]}
    assert kinds == {"queue", "log", "events", "pages", "streams", "kv"}
    assert all(s["disk_bytes"] > 0 and s["error"] is None for s in view["stores"])
    assert view["window_s"] > 0 and all(s["records_per_s"] == 0 for s in view["stores"])


def test_top_live_in_a_terminal(tmp_path: Path) -> None:
    tmux = require("tmux", package="tmux")
    make_stores(tmp_path)
    sock = f"engine-top-{os.getpid()}"
    command = " ".join(shlex.quote(a) for a in engine_command("top", str(tmp_path), "--interval", "0.3"))
    env = {**os.environ, "TERM": "xterm-256color"}
    base = [tmux, "-L", sock]
    subprocess.run([*base, "new-session", "-d", "-x", "200", "-y", "60", "-s", "top", command],
                   check=True, env=env, timeout=30)
    try:
        def screen() -> str:
            return subprocess.run([*base, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True,
                                  check=True, timeout=30).stdout

        def wait_for(text: str) -> str:
            deadline = time.monotonic() + 60
            while True:
                shown = screen()
                if text in shown:
                    return shown
                assert time.monotonic() < deadline, f"{text!r} never shown:\n{shown}"
                time.sleep(0.2)

        shown = wait_for("Stores")
        assert "most behind: queues/jobs: idle" in shown
        for name in ("queues/jobs", "logs/clicks", "kv/app.kv", "pages.db", "uploads.jnl", "events"):
            assert name in shown
        # The queue grows while top watches: the idle reader's backlog grows, and top says so.
        with engine.Queue.open(tmp_path / "queues", "jobs") as q:
            for i in range(200):
                q.put(b"more %d" % i)
                time.sleep(0.005)
        shown = wait_for("230 items")
        assert "growing" in shown and "items/s" in shown
        head = next(line for line in shown.splitlines() if "most behind" in line)
        assert "queues/jobs: idle" in head
        idle_row = next(line for line in shown.splitlines() if " idle " in line and "│" in line)
        assert "+" in idle_row and "/s" in idle_row  # its backlog growth per second
        subprocess.run([*base, "send-keys", "-t", "top", "C-c"], check=True, timeout=30)
        deadline = time.monotonic() + 30
        while subprocess.run([*base, "has-session", "-t", "top"], capture_output=True, timeout=30).returncode == 0:
            assert time.monotonic() < deadline, "engine top did not stop on Ctrl-C"
            time.sleep(0.2)
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True, timeout=30)


def test_top_once_exits_1_when_something_could_not_be_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``could not read locked: permission denied`` was printed with exit status 0."""
    from engine.cli import main

    make_stores(tmp_path)
    assert main(["top", str(tmp_path), "--once", "--json", "--interval", "0.1"]) == 0
    assert json.loads(capsys.readouterr().out)["errors"] == []
    locked = str(tmp_path / "locked")
    os.mkdir(locked)
    real = os.listdir

    def listdir(path: Any) -> list[str]:  # what the OS says for a directory we may not read
        if os.fspath(path) == locked:
            raise PermissionError(13, "Permission denied", locked)
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    assert main(["top", str(tmp_path), "--once", "--json", "--interval", "0.1"]) == 1
    view = json.loads(capsys.readouterr().out)
    assert view["errors"] == [f"{locked}: permission denied"] and len(view["stores"]) == 6
