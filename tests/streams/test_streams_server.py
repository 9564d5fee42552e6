"""The journald socket protocol, byte for byte, with raw sockets (as the C clients speak it)."""

from __future__ import annotations

import os
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from streams_helpers import GatedFS, crc64_reference

from engine.streams import Client, StreamJournal, codec, read_streams
from engine.streams.client import StreamRejected
from engine.streams.server import JournalServer


@pytest.fixture()
def served(tmp_path: object) -> Iterator[tuple[str, str, StreamJournal, JournalServer]]:
    base = str(tmp_path)
    sock_path = os.path.join(base, "s")
    journal_path = os.path.join(base, "j.jd")
    journal = StreamJournal.open(journal_path, size=2 << 20, page_size=4096)
    server = JournalServer(sock_path, journal)
    server.start()
    try:
        yield sock_path, journal_path, journal, server
    finally:
        server.stop()
        journal.close()


def _raw(sock_path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock_path)
    return s


def _recv_all(s: socket.socket) -> bytes:
    out = b""
    while True:
        chunk = s.recv(16)
        if not chunk:
            return out
        out += chunk


def test_wire_protocol_bytes_and_file_bytes(served: tuple[str, str, StreamJournal, JournalServer]) -> None:
    sock_path, journal_path, _journal, _server = served
    s = _raw(sock_path)
    # ident length 3, "abc", string "hello", string " world", zero length.
    s.sendall(bytes.fromhex("00000003 616263 00000005 68656c6c6f 00000006 20776f726c64 00000000"))
    assert _recv_all(s) == b"\x01"  # one acknowledgement byte, then the server closes
    s.close()
    assert [(x.ident, x.data, x.status) for x in read_streams(journal_path)] == [(b"abc", b"hello world", "complete")]
    with open(journal_path, "rb") as f:
        f.seek(4096)
        page1 = f.read(4096)
    # INFO: type 1, global 0, stream 0, record 0, length 7, offset 0, "abc", check code.
    info_head = bytes.fromhex("00000001 00000000 00000000 00000000 00000007 00000000 616263")
    info = info_head + struct.pack("<Q", crc64_reference(info_head))
    # DATA|EOS: type 6, global 1, stream 0, record 0, length 11, "hello world".
    data_head = bytes.fromhex("00000006 00000001 00000000 00000000 0000000b") + b"hello world"
    data = data_head + struct.pack("<Q", crc64_reference(data_head))
    assert page1[: len(info) + len(data)] == info + data
    assert page1[len(info) + len(data) :] == bytes(4096 - len(info) - len(data))  # padding


def test_byte_at_a_time_client(served: tuple[str, str, StreamJournal, JournalServer]) -> None:
    sock_path, journal_path, _, _ = served
    payload = os.urandom(20_000)
    wire = struct.pack(">I", 4) + b"slow" + struct.pack(">I", len(payload)) + payload + struct.pack(">I", 0)
    s = _raw(sock_path)
    for i in range(0, 40):
        s.send(wire[i : i + 1])  # the length prefixes split across reads
    s.sendall(wire[40:])
    assert _recv_all(s) == b"\x01"
    s.close()
    got = {x.ident: x for x in read_streams(journal_path)}
    assert got[b"slow"].data == payload and got[b"slow"].complete
    # Data is cut into 8 KiB records whatever the client's string sizes.
    from engine.streams import read_events

    sizes = [len(e.data) for e in read_events(journal_path) if e.kind == "append"]
    assert sizes == [8192, 8192, 20_000 - 16384]


def test_early_disconnect_aborts(served: tuple[str, str, StreamJournal, JournalServer]) -> None:
    sock_path, journal_path, _journal, server = served
    s = _raw(sock_path)
    s.sendall(struct.pack(">I", 4) + b"gone" + struct.pack(">I", 30_000) + os.urandom(30_000))
    s.close()  # no zero length: aborted
    s2 = _raw(sock_path)
    s2.sendall(struct.pack(">I", 5) + b"small" + struct.pack(">I", 3) + b"abc")
    s2.close()  # aborted before any record was journaled: leaves no trace
    while server.aborted < 2:
        threading.Event().wait(0.005)
    Client.send(sock_path, "after", b"x")  # its commit carries the ABORT record too
    got = {x.ident: x for x in read_streams(journal_path)}
    assert got[b"gone"].status == "aborted"
    assert b"small" not in got
    assert got[b"after"].complete


def test_rejects_overlong_ident(served: tuple[str, str, StreamJournal, JournalServer]) -> None:
    sock_path, _, _, server = served
    s = _raw(sock_path)
    s.sendall(struct.pack(">I", 5000))
    assert _recv_all(s) == b"\x00"
    s.close()
    assert server.rejected == 1


def test_python_client_and_concurrency(served: tuple[str, str, StreamJournal, JournalServer]) -> None:
    sock_path, journal_path, journal, server = served
    payloads = {f"c{i}": os.urandom(100_000 + i) for i in range(10)}
    errors: list[BaseException] = []

    def run(ident: str) -> None:
        try:
            with Client(sock_path, ident) as c:
                data = payloads[ident]
                for k in range(0, len(data), 8192):
                    c.write(data[k : k + 8192])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert server.committed == 10
    got = {x.ident.decode(): x for x in read_streams(journal_path)}
    assert all(got[i].complete and got[i].data == d for i, d in payloads.items())
    assert journal.verify() == []


def test_client_sees_failure_when_server_refuses(tmp_path: object) -> None:
    base = str(tmp_path)
    journal = StreamJournal.open(os.path.join(base, "j"), size=8 * 4096, page_size=4096)
    server = JournalServer(os.path.join(base, "s"), journal)
    server.start()
    try:
        journal.close()  # the server's journal is gone: open_stream fails
        with pytest.raises(StreamRejected):
            Client.send(os.path.join(base, "s"), "x", b"data")
    finally:
        server.stop()
    assert not os.path.exists(os.path.join(base, "s"))


def test_ack_only_after_fsync(tmp_path: object) -> None:
    """The acknowledgement byte is not sent while the fsync is still running."""
    from engine.fs import default_fs

    gfs = GatedFS(default_fs())
    base = str(tmp_path)
    journal = StreamJournal.open(os.path.join(base, "j"), size=16 * 4096, page_size=4096, fs=gfs)
    server = JournalServer(os.path.join(base, "s"), journal)
    server.start()
    try:
        gfs.armed = True
        s = _raw(os.path.join(base, "s"))
        s.sendall(bytes.fromhex("00000001 41 00000001 42 00000000"))
        assert gfs.entered.wait(10)
        s.settimeout(0.2)
        with pytest.raises(socket.timeout):
            s.recv(1)  # held fsync: no answer yet
        gfs.gate.set()
        s.settimeout(10)
        assert s.recv(1) == b"\x01"
        s.close()
    finally:
        server.stop()
        journal.close()
    assert codec.MAGIC == b"journald"


def test_serve_command(tmp_path: object) -> None:
    """``engine streams serve`` end to end: a raw client, then SIGTERM; the journal reads back."""
    import signal
    import subprocess
    import sys
    import time

    base = str(tmp_path)
    sock_path = os.path.join(base, "s")
    journal_path = os.path.join(base, "j")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    cmd = [sys.executable, "-m", "engine", "streams", "serve", sock_path, journal_path, "--size", "64k"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            # The socket file appears at bind(), a moment before listen(): a
            # connection refused then means "not yet", not a failure.
            assert proc.poll() is None and time.monotonic() < deadline
            try:
                s = _raw(sock_path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.02)
        s.sendall(bytes.fromhex("00000002 6964 00000003 616263 00000000"))
        assert _recv_all(s) == b"\x01"
        s.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    assert proc.returncode == 0
    assert not os.path.exists(sock_path)
    assert [(x.ident, x.data, x.status) for x in read_streams(journal_path)] == [(b"id", b"abc", "complete")]


def _bounded(tmp_path: object, **kw: object) -> tuple[str, str, StreamJournal, JournalServer]:
    base = str(tmp_path)
    sock_path = os.path.join(base, "b")
    journal_path = os.path.join(base, "b.jd")
    journal = StreamJournal.open(journal_path, size=1 << 20, page_size=4096)
    server = JournalServer(sock_path, journal, **kw)  # type: ignore[arg-type]
    server.start()
    return sock_path, journal_path, journal, server


def test_connections_over_the_limit_are_refused_and_threads_stay_bounded(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    sock_path, journal_path, journal, server = _bounded(tmp_path, max_connections=4, idle_timeout=None)
    before = threading.active_count()
    idle: list[socket.socket] = []
    try:
        with caplog.at_level("WARNING", logger="engine.streams"):
            # Four idle connections hold the four slots (each has named its stream).
            for i in range(4):
                s = _raw(sock_path)
                ident = f"idle{i}".encode()
                s.sendall(struct.pack(">I", len(ident)) + ident)
                idle.append(s)
            while journal.open_streams < 4:
                threading.Event().wait(0.01)
            # Every further one is answered 0 and closed at once, threads bounded.
            for _ in range(40):
                s = _raw(sock_path)
                assert _recv_all(s) == b"\x00"
                s.close()
            assert threading.active_count() <= before + 4
        assert server.refused == 40
        assert sum("refused a connection" in r.getMessage() for r in caplog.records) == 40
        # A slot freed is a slot served again.
        idle.pop().close()
        while journal.open_streams > 3:
            threading.Event().wait(0.01)
        with Client(sock_path, "after") as c:
            c.write(b"ok")
    finally:
        for s in idle:
            s.close()
        server.stop()
        journal.close()
    done = {st.ident: st.status for st in read_streams(journal_path)}
    assert done[b"after"] == "complete"


def test_idle_connection_is_closed_and_its_stream_aborted(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    sock_path, journal_path, journal, server = _bounded(tmp_path, idle_timeout=0.2)
    try:
        with caplog.at_level("WARNING", logger="engine.streams"):
            s = _raw(sock_path)
            s.sendall(struct.pack(">I", 4) + b"idle" + struct.pack(">I", 9000) + b"x" * 9000)
            assert _recv_all(s) == b""  # closed by the server, no acknowledgement
            s.close()
            while server.timed_out < 1:
                threading.Event().wait(0.01)
        assert any("idle for" in r.getMessage() for r in caplog.records)
        assert server.aborted == 1 and server.committed == 0
    finally:
        server.stop()
        journal.close()
    assert [(st.ident, st.status) for st in read_streams(journal_path)] == [(b"idle", "aborted")]


def test_malformed_client_is_logged(served: tuple[str, str, StreamJournal, JournalServer],
                                    caplog: pytest.LogCaptureFixture) -> None:
    sock_path, _, _, server = served
    with caplog.at_level("WARNING", logger="engine.streams"):
        s = _raw(sock_path)
        s.sendall(struct.pack(">I", 5000))
        assert _recv_all(s) == b"\x00"
        s.close()
    assert server.rejected == 1
    assert any("identifier of 5000 bytes" in r.getMessage() for r in caplog.records)
