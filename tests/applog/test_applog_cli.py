"""``engine log ...``, ``engine inspect`` and ``engine verify`` on append logs, and
a follower in another process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from engine.applog import AppendLog
from engine.applog.codec import segment_name
from engine.cli import main


@pytest.fixture
def logdir(tmp_path: os.PathLike[str]) -> str:
    d = os.path.join(str(tmp_path), "log")
    with AppendLog.open(d, ttl_ns=1000, segment_bytes=16 + 3 * 22) as log:
        for k in range(8):
            log.append(b"rec-%d" % k, flags=k, time_ns=1_000_000 + k * 100)
    return d


def test_stats_get_between_tail(logdir: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", "stats", logdir]) == 0
    out = capsys.readouterr().out
    assert "8 records, indexes [0, 8)" in out and "3 segments" in out and "TTL 1 us" in out
    assert "1970-01-01 00:00:00.001000 UTC" in out and "1000700" in out  # the newest time, exact
    assert main(["log", "get", logdir, "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3\t1970-01-01 00:00:00.001000 UTC\t") and "'rec-3'" in out and "flags=0x3" in out
    assert main(["log", "get", logdir, "99"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        f"engine log get: {logdir}: record 99 does not exist yet: the newest record is 7"
    ]
    assert main(["log", "between", logdir, "1000200ns", "1000500ns"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["2", "3", "4"]
    assert main(["log", "tail", logdir, "-n", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["6", "7"]


def test_expire_command_and_lock(logdir: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", "expire", logdir, "--now", "1001400ns"]) == 0  # [0,3) newest 1000200 + 1000 < now
    assert "expired 3 records" in capsys.readouterr().out
    with AppendLog.open(logdir):
        assert main(["log", "expire", logdir]) == 2  # the writer holds the lock
        assert "lock" in capsys.readouterr().err


def test_inspect_and_verify(logdir: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", logdir]) == 0
    out = capsys.readouterr().out
    assert "applog" in out and "index range" in out
    assert main(["verify", logdir, os.path.join(logdir, segment_name(0, ".log"))]) == 0
    assert "ok (applog)" in capsys.readouterr().out
    idx = os.path.join(logdir, segment_name(3, ".idx"))
    with open(idx, "r+b") as f:  # break entry 1's index field in a sealed segment
        f.seek(16 + 24 + 8)
        f.write((77).to_bytes(8, "little"))
    assert main(["verify", logdir]) == 2
    assert "FAILED" in capsys.readouterr().err
    short = os.path.join(logdir, "bad")
    os.mkdir(short)
    with open(os.path.join(short, segment_name(0, ".log")), "wb") as f:
        f.write(b"LOG\x01\x00")
    assert main(["inspect", os.path.join(short, segment_name(0, ".log"))]) == 2
    assert "16-byte" in capsys.readouterr().err


def test_follow_from_another_process(tmp_path: os.PathLike[str]) -> None:
    d = os.path.join(str(tmp_path), "live")
    script = textwrap.dedent(
        f"""
        from engine.applog import LogReader
        import time
        deadline = time.time() + 30
        while True:
            try:
                reader = LogReader.open({d!r})
                break
            except FileNotFoundError:
                time.sleep(0.01)
        got = []
        for rec in reader.follow(0, poll=0.01, timeout=20):
            got.append(rec.data.decode())
            if len(got) == 5:
                break
        print(",".join(got))
        """
    )
    with AppendLog.open(d, sync="always") as log:
        env = dict(os.environ, PYTHONPATH=os.getcwd())
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
        for k in range(5):
            log.append(b"m%d" % k)
        out, _ = child.communicate(timeout=60)
    assert child.returncode == 0
    assert out.strip() == "m0,m1,m2,m3,m4"


@pytest.mark.parametrize(
    ("point", "skip"),
    [
        ("applog.sync.before-idx-fsync", 5),
        ("applog.roll.before-create-idx", 1),
        ("applog.delete.before-dir-fsync", 0),
    ],
)
def test_sigkill_at_crash_points_keeps_acknowledged_records(tmp_path: os.PathLike[str], point: str, skip: int) -> None:
    """A writer process killed at a named crash point: every append it reported
    as returned is there after reopening, and the log verifies."""
    d = os.path.join(str(tmp_path), "killed")
    script = textwrap.dedent(
        f"""
        import sys
        from engine.applog import AppendLog
        log = AppendLog.open({d!r}, ttl_ns=10, segment_bytes=16 + 4 * 30, sync="always")
        for i in range(40):
            log.append(b"%020d" % i, time_ns=1000 + i)  # 36-byte records: 4 per segment
            print(i, flush=True)
            if i == 20:
                log.expire(now_ns=1030)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.getcwd(), ENGINE_CRASH_AT=point, ENGINE_CRASH_SKIP=str(skip))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == -9, out.stderr  # SIGKILL at the crash point
    acked = [int(x) for x in out.stdout.split()]
    with AppendLog.open(d) as log:
        log.verify()
        for i in acked:
            if i >= log.first_index:
                assert log.get(i).data == b"%020d" % i
        assert log.next_index >= (acked[-1] + 1 if acked else 0)
