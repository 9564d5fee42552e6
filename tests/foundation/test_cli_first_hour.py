"""The command line as a new user meets it (issue 31): argument errors are one
line and exit 2; a failed command creates nothing and a read-only one never
creates a file; a missing store is "no such ..." (exit 1) in every store, a
permission problem is "permission denied", a directory where a file belongs is
named; nothing succeeds wrongly (a table for a missing store, silence for an
empty directory, a negative count accepted).

Each command runs as the user runs it, ``python -m engine ...`` in a process of
its own, so exit status and both streams are the real ones.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import engine
from engine.cli import main


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``engine ARGS`` in a process of its own."""
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def make_stores(root: Path) -> None:
    """An append log, an event journal, a page store, a stream journal, a key-value
    store and a queue directory in ``root``."""
    with engine.AppendLog.open(root / "log") as log:
        log.append(b"x")
    with engine.EventJournal.open(root / "events") as journal:
        journal.write("a", [(1, b"x")])
    with engine.PageStore.open(root / "p.db") as store, store.transaction() as tx:
        tx.allocate()
    with engine.StreamJournal.open(root / "s.jnl", size=1 << 16) as sj:
        sj.open_stream("a").close()
    with engine.KV.open(root / "k.kv") as kv:
        kv[b"a"] = b"1"
    with engine.Queue.open(root / "q", "jobs") as q:
        q.put(b"x")


# -- argument errors: exit 2, one line -----------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ("queue", "get", "D", "q", "--count", "0"),
    ("queue", "get", "D", "q", "--count", "-3"),
    ("queue", "dump", "D", "q", "--limit", "-1"),
    ("events", "replay", "D", "x", "--max", "-1"),
    ("demo", "D", "--scale", "-5"),
    ("log", "tail", "D", "-n", "0"),
    # past the 64-bit nanoseconds the stores keep: an OverflowError traceback
    ("queue", "put", "D", "q", "x", "--expire-at", "99999999999999999999"),
    ("queue", "put", "D", "q", "x", "--expire-at", "9999-12-31"),
    ("queue", "put", "D", "q", "x", "--expire-in", "99999999999999999999"),  # a struct.error traceback
    ("top", "D", "--once", "--interval", "99999999999999999999"),  # an OverflowError traceback
    # a width or a sequence number below 0: all but the last byte shown, an empty replay
    ("log", "tail", "D", "--width", "-1"),
    ("events", "replay", "D", "x", "--to", "-1"),
    ("streams", "serve", "sock", "s.jnl", "--size", "1M", "--page-size", "-1"),
    ("streams", "serve"),
    ("pages", "stats"),
])
def test_argument_errors_exit_2_with_one_line_and_create_nothing(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = run(*args, cwd=tmp_path)
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("engine ") and ": error: " in lines[0], done.stderr
    assert "--help" in lines[0]
    assert done.stdout == ""
    assert files(tmp_path) == []


def test_a_count_names_what_was_typed(tmp_path: Path) -> None:
    done = run("queue", "get", "D", "q", "--count", "-3", cwd=tmp_path)
    assert "argument --count: must be 1 or more, got -3" in done.stderr
    done = run("events", "replay", "D", "x", "--max", "two", cwd=tmp_path)
    assert "argument --max: 'two' is not a whole number" in done.stderr


# -- a missing store: exit 1, "no such ..." everywhere -------------------------------------------------


MISSING = [
    ("pages", "stats", "nosuch"),
    ("pages", "dump", "nosuch"),
    ("events", "replay", "nosuch", "x"),
    ("events", "ids", "nosuch"),
    ("events", "stats", "nosuch"),
    ("log", "tail", "nosuch"),
    ("log", "stats", "nosuch"),
    ("streams", "stats", "nosuch"),
    ("streams", "dump", "nosuch"),
    ("kv", "get", "nosuch", "a"),
    ("kv", "stats", "nosuch"),
    ("kv", "scan", "nosuch"),
    ("queue", "stats", "nosuch", "jobs"),
    ("queue", "get", "nosuch", "jobs"),
    ("queue", "dump", "nosuch", "jobs"),
    ("inspect", "nosuch"),
    ("verify", "nosuch"),
]
#: ``engine spark ...`` exists only with the spark extra (else it names the extra, exit 2).
NO_SPARK = ", ".join(n for n in ("pyspark", "pyarrow", "pandas", "matplotlib") if importlib.util.find_spec(n) is None)
SPARK = pytest.mark.skipif(bool(NO_SPARK), reason=f"needs the spark extra (pip install -e '.[spark]'): {NO_SPARK}")
MISSING.append(pytest.param(("spark", "cleanup", "nosuch"), marks=SPARK))  # type: ignore[arg-type]


@pytest.mark.parametrize("args", MISSING, ids=lambda a: " ".join(a[:2]))
def test_a_missing_path_is_no_such_exit_1(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = run(*args, cwd=tmp_path)
    assert done.returncode == 1, done
    assert "no such" in done.stderr and "nosuch" in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert done.stdout == ""
    assert files(tmp_path) == []


@pytest.mark.parametrize("args", [
    ("log", "tail", "empty"),
    ("log", "stats", "empty"),
    ("events", "replay", "empty", "x"),
    ("events", "ids", "empty"),
], ids=lambda a: " ".join(a[:2]))
def test_an_empty_directory_is_no_store(tmp_path: Path, args: tuple[str, ...]) -> None:
    (tmp_path / "empty").mkdir()
    done = run(*args, cwd=tmp_path)
    assert done.returncode == 1, done
    assert "empty: no such" in done.stderr, done.stderr
    assert files(tmp_path) == ["empty"]


def test_a_directory_where_a_file_belongs_is_named(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    for args in (("pages", "stats", "adir"), ("streams", "stats", "adir"), ("pages", "dump", "adir")):
        done = run(*args, cwd=tmp_path)
        assert done.returncode == 1, done
        assert "adir: is a directory" in done.stderr, done.stderr
    assert files(tmp_path) == ["adir"]


def _deny_under(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """What the OS does for a directory without search permission, for a test run
    as root (whom the OS lets through): every look-up below ``root`` fails with
    EACCES, so ``os.path.exists`` and ``isdir`` say False, as they do for a user."""
    prefix = str(root) + os.sep
    for name in ("stat", "lstat", "open", "listdir", "scandir", "access"):
        real = getattr(os, name)

        def denied(path: object, *args: object, _real: object = real, **kwargs: object) -> object:
            if isinstance(path, (str, os.PathLike)) and os.path.abspath(os.fspath(path)).startswith(prefix):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
            return _real(path, *args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(os, name, denied)


def test_permission_denied_is_called_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    make_stores(locked)
    monkeypatch.chdir(tmp_path)
    if os.geteuid() == 0:
        _deny_under(monkeypatch, locked)
    else:
        locked.chmod(0)
    try:
        for args in (("log", "tail", "locked/log"), ("events", "replay", "locked/events", "a"),
                     ("pages", "stats", "locked/p.db"), ("streams", "stats", "locked/s.jnl"),
                     ("kv", "get", "locked/k.kv", "a"), ("kv", "stats", "locked/k.kv"),
                     ("queue", "stats", "locked/q", "jobs"), ("queue", "get", "locked/q", "jobs"),
                     # inspect and verify asked exists(), which says False here too: "no such file"
                     ("inspect", "locked/p.db"), ("verify", "locked/log"), ("inspect", "locked/q")):
            assert main(list(args)) == 1, args
            err = capsys.readouterr().err
            assert "permission denied" in err and "locked/" in err, err
            assert "no such" not in err
    finally:
        locked.chmod(0o755)


# -- a failed or read-only command creates nothing ----------------------------------------------------


def test_streams_serve_with_a_size_too_small_leaves_no_lock(tmp_path: Path) -> None:
    done = run("streams", "serve", "sock", "s.jnl", "--size", "100", cwd=tmp_path)
    assert done.returncode == 2
    assert "at least 4 pages" in done.stderr
    assert files(tmp_path) == []


@pytest.mark.parametrize("size", ["99999999999999999999", "free+10G"])
def test_streams_serve_with_a_size_larger_than_the_disk_writes_nothing(tmp_path: Path, size: str) -> None:
    """A new journal is preallocated with zeros: a size the disk cannot hold
    wrote until it was full (gigabytes in seconds) and left ``s.jnl.creating``."""
    if size.startswith("free+"):
        free = os.statvfs(tmp_path)
        size = str(free.f_bavail * free.f_frsize + (10 << 30))
    # Were the check lost, the file-size limit stops the preallocation at 64 MiB
    # (SIGXFSZ) instead of letting it fill the machine's disk.
    done = subprocess.run([sys.executable, "-m", "engine", "streams", "serve", "sock", "s.jnl", "--size", size],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20)))
    assert done.returncode == 2, done
    assert len(done.stderr.splitlines()) == 1
    assert "at most" in done.stderr or "does not fit" in done.stderr, done.stderr
    assert files(tmp_path) == []


@pytest.mark.parametrize("args", [
    ("metrics", ".", "--port", "0", "--host", "{host}"),
    ("dashboard", ".", "--port", "0", "--host", "{host}"),
    ("streams", "serve", "sock", "s.jnl", "--size", "1M", "--metrics-port", "0", "--metrics-host", "{host}"),
    ("queue", "serve", "q", "--port", "0", "--host", "{host}"),
    ("queue", "serve", "q", "--port", "0", "--metrics-port", "0", "--metrics-host", "{host}"),
], ids=lambda a: " ".join(a[:2]))
@pytest.mark.parametrize("host, words", [
    ("no-such-host.invalid", "host 'no-such-host.invalid': "),
    ("192.0.2.1", "host '192.0.2.1' is not an address of this machine"),  # TEST-NET-1: nobody's
])
def test_a_bad_host_is_named_and_nothing_is_created(tmp_path: Path, args: tuple[str, ...], host: str,
                                                     words: str) -> None:
    """``engine metrics``/``dashboard --host`` said "name or service not known"
    (which host?), exit 1; ``streams serve --metrics-host`` said the same after
    creating its journal and lock file."""
    done = run(*(a.format(host=host) for a in args), cwd=tmp_path)
    assert done.returncode == 2, done
    assert words in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert files(tmp_path) == []


def test_kv_put_into_a_foreign_file_or_a_directory_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "adir").mkdir()
    done = run("kv", "put", "garbage.bin", "a", "b", cwd=tmp_path)
    assert done.returncode == 2 and "garbage.bin" in done.stderr and len(done.stderr.splitlines()) == 1, done
    done = run("kv", "put", "adir", "a", "b", cwd=tmp_path)
    assert done.returncode == 1 and "adir: is a directory" in done.stderr, done
    assert files(tmp_path) == ["adir", "garbage.bin"]


def test_streams_serve_refused_by_a_live_socket_creates_no_journal(tmp_path: Path) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "sock"))
    listener.listen(1)
    try:
        done = run("streams", "serve", "sock", "s.jnl", "--size", "1M", cwd=tmp_path)
    finally:
        listener.close()
    assert done.returncode == 2, done
    assert "another server is listening" in done.stderr
    assert files(tmp_path) == ["sock"]


@SPARK
def test_spark_cleanup_of_an_empty_directory_creates_no_lock(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = run("spark", "cleanup", "empty", "--json", cwd=tmp_path)
    assert done.returncode == 0, done
    assert '"removed": []' in done.stdout
    assert files(tmp_path) == ["empty"]


def test_read_only_commands_create_no_file(tmp_path: Path) -> None:
    make_stores(tmp_path)
    before = files(tmp_path)
    stamp = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    time.sleep(0.01)
    for args in (("log", "tail", "log"), ("log", "stats", "log"), ("events", "replay", "events", "a"),
                 ("events", "stats", "events"), ("pages", "stats", "p.db"), ("pages", "dump", "p.db"),
                 ("streams", "stats", "s.jnl"), ("streams", "list", "s.jnl"), ("inspect", "log", "events", "p.db"),
                 ("verify", "log", "events", "p.db", "s.jnl"), ("kv", "get", "k.kv", "a"), ("kv", "scan", "k.kv"),
                 ("kv", "stats", "k.kv"), ("queue", "stats", "q", "jobs"), ("queue", "dump", "q", "jobs"),
                 ("queue", "readers", "q", "jobs"), ("inspect", "k.kv", "q"), ("verify", "k.kv", "q")):
        done = run(*args, cwd=tmp_path)
        assert done.returncode == 0, done
    assert files(tmp_path) == before
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == stamp


def test_pages_stats_of_a_missing_store_prints_no_table(tmp_path: Path) -> None:
    done = run("pages", "stats", "nosuch", cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
