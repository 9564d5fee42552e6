"""The shared writer lock and the one recovery report (``engine.fs``)."""

from __future__ import annotations

import datetime
import logging
import subprocess
import sys
import threading
import time

import pytest

from engine.errors import ConfigError, LockedError
from engine.fs import OsFileSystem, RecoveryReport, lock_handle, probe_lock, take_lock, take_record_lock
from engine.fs.base import OpenMode
from engine.fs.recovery import KINDS, RecoveryAction


@pytest.fixture
def fs() -> OsFileSystem:
    return OsFileSystem()


def test_take_lock_refuses_a_second_writer_naming_the_lock_file(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "store-lock")
    with take_lock(fs, path, what="writer lock of the store") as held:
        assert held.held and held.exclusive
        with pytest.raises(LockedError) as info:
            take_lock(fs, path, what="writer lock of the store")
        assert info.value.path == path
        assert path in str(info.value) and "writer lock of the store" in str(info.value)
        assert probe_lock(fs, path)
    assert not held.held
    assert not probe_lock(fs, path), "released: nobody holds it"
    assert not probe_lock(fs, str(tmp_path / "missing")), "a missing lock file is not held"
    take_lock(fs, path).release()


def test_waiting_lock_gets_it_when_the_holder_lets_go(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "lock")
    held = take_lock(fs, path)
    timer = threading.Timer(0.15, held.release)
    timer.start()
    started = time.monotonic()
    with take_lock(fs, path, wait=datetime.timedelta(seconds=5)):
        waited = time.monotonic() - started
    timer.join()
    assert 0.1 <= waited < 4


def test_waiting_lock_gives_up_after_the_wait(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "lock")
    with take_lock(fs, path):
        started = time.monotonic()
        with pytest.raises(LockedError, match=r"waited 0\.2 s"):
            take_lock(fs, path, wait=0.2)
        assert time.monotonic() - started >= 0.2


def test_shared_locks_coexist_and_exclude_a_writer(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "journal")
    fs.open(path, OpenMode.NEW).close()
    a = take_lock(fs, path, exclusive=False, create=False)
    b = take_lock(fs, path, exclusive=False, create=False)
    with fs.open(path, OpenMode.WRITE) as handle:
        with pytest.raises(LockedError, match="journal lock"):
            lock_handle(handle, exclusive=True, wait=0.05, what="journal lock")
        a.release()
        b.release()
        lock_handle(handle, exclusive=True, wait=0.05, what="journal lock")
    with pytest.raises(FileNotFoundError):
        take_lock(fs, str(tmp_path / "nope"), create=False)


@pytest.mark.parametrize("wait", [-1, "1s", True])
def test_bad_wait_is_a_config_error(tmp_path, fs, wait) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="lock wait"):
        take_lock(fs, str(tmp_path / "lock"), wait=wait)


_HOLDER = """
import sys, time
from engine.fs import OsFileSystem, take_lock
held = take_lock(OsFileSystem(), sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def test_lock_is_held_across_processes_and_dropped_when_the_holder_dies(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "lock")
    child = subprocess.Popen([sys.executable, "-c", _HOLDER, path], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        assert probe_lock(fs, path)
        with pytest.raises(LockedError):
            take_lock(fs, path)
        child.kill()  # a crash: the kernel drops the lock
        child.wait(30)
        take_lock(fs, path, wait=5).release()
    finally:
        child.kill()
        child.wait(30)


def test_recovery_report_records_summarises_and_logs(caplog) -> None:  # type: ignore[no-untyped-def]
    report = RecoveryReport("/data/log")
    assert not report.repaired and str(report) == "clean"
    report.cut("/data/log/1.log", 4096, 100, "torn record")
    report.add("rebuilt", "/data/log/1.idx", 3, "entries")
    report.add("removed", "/data/log/x.tmp", 0, "files")  # a zero count records nothing
    assert report.repaired
    assert report.total("cut") == 100 and report.total("rebuilt", "entries") == 3 and report.total("removed") == 0
    assert [a.kind for a in report.actions] == ["cut", "rebuilt"]
    assert report.of("cut")[0] == RecoveryAction("cut", "/data/log/1.log", 100, "bytes", 4096, "torn record")
    assert report.summary() == (
        "cut 100 bytes of /data/log/1.log at offset 4096 (torn record); rebuilt 3 entries of /data/log/1.idx"
    )
    as_dict = report.to_dict()
    assert as_dict["repaired"] is True and as_dict["actions"][0]["offset"] == 4096  # type: ignore[index]
    logger = logging.getLogger("engine.test")
    with caplog.at_level(logging.WARNING, logger="engine.test"):
        report.log(logger)
        RecoveryReport("/clean").log(logger)
    assert [r.getMessage() for r in caplog.records] == [f"/data/log: recovered: {report.summary()}"]


def test_recovery_kinds_are_checked() -> None:
    assert "cut" in KINDS and "redone" in KINDS
    with pytest.raises(ValueError, match="unknown recovery kind"):
        RecoveryReport("/x").add("fixed", "/x", 1, "bytes")


_POSIX_HOLDER = """
import fcntl, sys
with open(sys.argv[1], "r+b") as f:
    if sys.argv[2] == "hold":
        fcntl.lockf(f, fcntl.LOCK_EX)  # a classic POSIX record lock, as the JVM's FileChannel.lock takes
        print("held", flush=True)
        sys.stdin.read()
    else:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            print("free")
        except OSError:
            print("held")
"""


@pytest.mark.skipif(sys.platform != "linux", reason="open-file-description locks are Linux's")
def test_record_lock_excludes_other_handles_and_posix_record_locks(tmp_path, fs) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "_LOCK")
    with take_record_lock(fs, path, what="commit lock of the sink dataset") as held:
        assert held.held and held.exclusive
        with pytest.raises(LockedError, match="commit lock of the sink dataset is held") as info:
            take_record_lock(fs, path, what="commit lock of the sink dataset")  # another handle, same process
        assert info.value.path == path
        probe = subprocess.run([sys.executable, "-c", _POSIX_HOLDER, path, "probe"], capture_output=True, text=True,
                               check=True)
        assert probe.stdout.strip() == "held"
        take_lock(fs, path).release()  # a flock is another lock altogether: why a record lock is used
    child = subprocess.Popen([sys.executable, "-c", _POSIX_HOLDER, path, "hold"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with pytest.raises(LockedError):
            take_record_lock(fs, path)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)
    take_record_lock(fs, path).release()
