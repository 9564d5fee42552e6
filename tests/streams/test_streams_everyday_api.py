"""Everyday use of the stream journal's Python API (issue 18): durations as
timedelta or seconds, bytes checks that say what to do, len/iter/in, stats()
dicts, context managers, and journals/servers/clients left open."""

from __future__ import annotations

import datetime as dt
import gc
import os
import pathlib
import re
import socket
import subprocess
import sys
import time

import pytest

from engine.errors import ConfigError, StreamRejected
from engine.streams import Client, JournalScan, StreamJournal, read_events, read_streams
from engine.streams.server import JournalServer

SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


def _journal(tmp_path: pathlib.Path, **kw: object) -> StreamJournal:
    return StreamJournal.open(tmp_path / "j", size=256 * 1024, page_size=4096, **kw)  # type: ignore[arg-type]


def _numbers(stats: dict[str, object], *, allowed_text: tuple[str, ...] = ()) -> None:
    for key, value in stats.items():
        assert SNAKE.match(key), key
        if key in allowed_text:
            assert value is None or isinstance(value, str), key
        else:
            assert value is None or isinstance(value, (int, float)), (key, value)


# -- durations ------------------------------------------------------------------------


def test_sync_delay_is_a_timedelta_or_seconds(tmp_path: pathlib.Path) -> None:
    with _journal(tmp_path, sync_delay=dt.timedelta(milliseconds=5)) as journal:
        assert journal.sync_delay == 0.005
        assert journal.stats()["sync_delay_seconds"] == 0.005
    with _journal(tmp_path, sync_delay=0) as journal:
        assert journal.sync_delay == 0
    with pytest.raises(ConfigError, match=r"sync_delay must be >= 0 seconds, got -1"):
        _journal(tmp_path, sync_delay=-1)
    with pytest.raises(TypeError, match=r"sync_delay must be a number of seconds or a datetime.timedelta, not str"):
        _journal(tmp_path, sync_delay="10ms")


def test_server_idle_timeout_and_client_timeout(tmp_path: pathlib.Path) -> None:
    sock = tmp_path / "s"
    with _journal(tmp_path) as journal:
        with pytest.raises(ConfigError, match=r"idle_timeout must be > 0 seconds, got 0"):
            JournalServer(sock, journal, idle_timeout=0)
        with pytest.raises(TypeError, match=r"idle_timeout must be a number of seconds or a datetime.timedelta"):
            JournalServer(sock, journal, idle_timeout="1h")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"max_connections must be an int"):
            JournalServer(sock, journal, max_connections=2.5)  # type: ignore[arg-type]
        assert not sock.exists()
        with JournalServer(sock, journal, idle_timeout=dt.timedelta(minutes=2)) as server:
            assert server.idle_timeout == 120.0
            server.start()
            with pytest.raises(TypeError, match=r"timeout must be a number of seconds or a datetime.timedelta"):
                Client(sock, "x", timeout="5s")  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match=r"timeout must be >= 0 seconds"):
                Client(sock, "x", timeout=-1)
            with Client(sock, "a", timeout=dt.timedelta(seconds=30)) as client:
                client.write(b"1")
            Client.send(sock, "b", b"2", timeout=30)
            stats = server.stats()
            _numbers(stats)
            assert stats["committed"] == 2 and stats["idle_timeout_seconds"] == 120.0
            assert stats["max_connections"] == 256
        assert not sock.exists()  # leaving the block stopped it and removed its socket
        with JournalServer(sock, journal, idle_timeout=None) as never:
            assert never.stats()["idle_timeout_seconds"] is None


# -- bytes ----------------------------------------------------------------------------


def test_a_str_where_bytes_belong_is_a_type_error_that_says_so(tmp_path: pathlib.Path) -> None:
    with _journal(tmp_path) as journal:
        with journal.open_stream("s") as stream:
            with pytest.raises(TypeError, match=r"data must be bytes, not str: encode it \(data.encode\(\)\)"):
                stream.write("text")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"data must be bytes, not int"):
                stream.write(5)  # type: ignore[arg-type]
            stream.write(bytearray(b"ok"))
        with pytest.raises(TypeError, match=r"ident must be bytes or str, not int 5"):
            journal.open_stream(5)  # type: ignore[arg-type]
        assert journal.open_stream(bytearray(b"b")).ident == b"b"
    # ("b" wrote nothing: its abort leaves nothing in the file, as in the original server.)
    assert [(s.ident, s.data, s.status) for s in read_streams(tmp_path / "j")] == [(b"s", b"ok", "complete")]


def test_client_checks_bytes_and_names_the_socket(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "nobody"
    with pytest.raises(FileNotFoundError) as info:
        Client(missing, "x")
    assert info.value.filename == str(missing) and str(missing) in str(info.value)
    dead = tmp_path / "dead"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(dead))
    listener.close()  # a socket file nobody listens on
    with pytest.raises(ConnectionRefusedError) as refused:
        Client.send(dead, "x", b"data")
    assert str(dead) in str(refused.value)
    with pytest.raises(TypeError, match=r"data must be bytes, not str"):
        Client.send(dead, "x", "data")  # type: ignore[arg-type]  # checked before connecting
    sock = tmp_path / "s"
    with _journal(tmp_path) as journal, JournalServer(sock, journal) as server:
        server.start()
        with Client(sock, "c") as client:
            with pytest.raises(TypeError, match=r"data must be bytes, not str: encode it"):
                client.write("text")  # type: ignore[arg-type]
            client.write(memoryview(b"fine"))
        with pytest.raises(TypeError, match=r"ident must be bytes or str"):
            Client(sock, 7)  # type: ignore[arg-type]
        # An identifier over 1024 bytes is answered 0: the error names the socket.
        with pytest.raises(StreamRejected, match=re.escape(f"journald server on {sock} did not acknowledge")):
            Client.send(sock, b"i" * 2000, b"x")
    assert [(s.ident, s.data) for s in read_streams(tmp_path / "j")] == [(b"c", b"fine")]


# -- protocols and stats -----------------------------------------------------------


def test_len_iter_in_and_stats_of_a_journal(tmp_path: pathlib.Path) -> None:
    with _journal(tmp_path) as journal:
        assert len(journal) == 0 and list(journal) == []
        a = journal.open_stream("a")
        b = journal.open_stream("b")
        assert len(journal) == 2 and list(journal) == [a, b]
        assert a in journal and b.number in journal and 99 not in journal and "a" not in journal
        a.write(b"x" * 10_000)
        a.close()
        b.abort()
        assert len(journal) == 0 and a not in journal
        stats = journal.stats()
        _numbers(stats)
        assert stats["streams_closed"] == 1 and stats["streams_aborted"] == 1 and stats["open_streams"] == 0
        assert stats["size_bytes"] == 256 * 1024 and stats["page_size"] == 4096
        assert stats["position"] == journal.position and stats["next_global_record"] == journal.next_global
        assert stats["free_bytes"] == stats["size_bytes"] - stats["position"]  # type: ignore[operator]
        assert stats["transactions"] == journal.transactions and stats["fsyncs"] == journal.fsyncs


def test_scan_stats_context_manager_and_pathlike(tmp_path: pathlib.Path) -> None:
    with _journal(tmp_path) as journal:
        with journal.open_stream("one") as s:
            s.write(b"1" * 9000)
        s2 = journal.open_stream("two")
        s2.write(b"2" * 9000)
        s2.abort()
        left = journal.open_stream("left")
        left.write(b"3" * 9000)
        journal.sync()
        stats = JournalScan(tmp_path / "j").stats()  # reads the journal first
        _numbers(stats, allowed_text=("end_reason",))
        assert (stats["streams_complete"], stats["streams_aborted"], stats["streams_open"]) == (1, 1, 1)
        assert stats["data_bytes"] == 9000 + 8192 + 8192  # the last records of "two" and "left" never written
        assert stats["clean_end"] is True and stats["anomalies"] == 0 and stats["page_size"] == 4096
    # A scan stopped half-way: close() (or the with block) closes its file.
    with read_events(tmp_path / "j") as scan:
        first = next(iter(scan))
        assert first.kind == "init"
        partial = scan.stats()
        assert partial["end_position"] is None and partial["records"] is None
    scan.close()  # twice is fine
    with pytest.raises(RuntimeError):
        iter(scan)


# -- left open ------------------------------------------------------------------------


def test_a_journal_left_open_is_closed_with_a_resource_warning(tmp_path: pathlib.Path) -> None:
    journal = _journal(tmp_path)
    with journal.open_stream("done") as s:
        s.write(b"d")
    open_one = journal.open_stream("left")
    open_one.write(b"x" * 9000)  # a record journaled: its ABORT must reach the file
    with pytest.warns(ResourceWarning, match="unclosed stream journal"):
        finalizer = journal._core._finalizer  # the store core's unclosed-use watch
        assert finalizer is not None
        finalizer()  # what exit runs
    assert open_one.state == "aborted"
    with _journal(tmp_path) as again:  # the writer lock was released
        assert not again.recovery.repaired
    assert [(s.ident, s.status) for s in read_streams(tmp_path / "j")] == [(b"done", "complete"), (b"left", "aborted")]


def test_a_dropped_journal_is_closed_when_collected(tmp_path: pathlib.Path) -> None:
    journal = _journal(tmp_path)
    with journal.open_stream("done") as s:
        s.write(b"d")
    with pytest.warns(ResourceWarning, match="unclosed stream journal"):
        del journal, s
        gc.collect()
    with _journal(tmp_path) as again:  # closed: the writer lock was released, nothing to recover
        assert not again.recovery.repaired


def test_a_journal_left_open_at_exit_needs_no_recovery(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "j"
    script = (
        "import sys\n"
        "from engine.streams import StreamJournal\n"
        "j = StreamJournal.open(sys.argv[1], size=256 * 1024, page_size=4096)\n"
        "with j.open_stream('kept') as s:\n"
        "    s.write(b'k')\n"
        "left = j.open_stream('left')\n"
        "left.write(b'x' * 9000)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", script, str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "unclosed stream journal" in proc.stderr and "Traceback" not in proc.stderr
    with StreamJournal.open(path) as journal:
        assert not journal.recovery.repaired, journal.recovery.summary()
    assert [(s.ident, s.status) for s in read_streams(path)] == [(b"kept", "complete"), (b"left", "aborted")]


def test_a_server_left_running_is_stopped_with_a_resource_warning(tmp_path: pathlib.Path) -> None:
    sock = tmp_path / "s"
    with _journal(tmp_path) as journal:
        server = JournalServer(sock, journal)
        server.start()
        Client.send(sock, "x", b"1")
        with pytest.warns(ResourceWarning, match=f"unclosed journald server on {re.escape(str(sock))}"):
            server._finalizer()  # type: ignore[misc]
        assert not sock.exists()


def test_a_forgotten_client_is_aborted_with_a_resource_warning(tmp_path: pathlib.Path) -> None:
    sock = tmp_path / "s"
    with _journal(tmp_path) as journal, JournalServer(sock, journal) as server:
        server.start()
        client = Client(sock, "forgotten")
        client.write(b"x" * 100_000)  # sent (over the 64 KiB send buffer)
        with pytest.warns(ResourceWarning, match="unclosed journald client stream b'forgotten'"):
            del client
            gc.collect()
        deadline = time.monotonic() + 30
        while server.stats()["aborted"] == 0:
            assert time.monotonic() < deadline, server.stats()
            time.sleep(0.01)
    assert [(s.ident, s.status) for s in read_streams(tmp_path / "j")] == [(b"forgotten", "aborted")]


def test_paths_may_be_pathlike(tmp_path: pathlib.Path) -> None:
    with StreamJournal.open(tmp_path / "p", size=64 * 1024, page_size=4096) as journal:
        assert journal.path == os.path.join(str(tmp_path), "p")
    assert list(read_streams(tmp_path / "p")) == []


def test_a_client_timeout_names_the_socket(tmp_path: pathlib.Path) -> None:
    sock = tmp_path / "silent"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock))
    listener.listen(1)  # accepts (in the backlog), never answers
    try:
        client = Client(sock, "x", timeout=dt.timedelta(milliseconds=100))
        client.write(b"data")
        with pytest.raises(TimeoutError, match=re.escape(f"the journald server on {sock}: timed out")):
            client.close()
    finally:
        listener.close()
