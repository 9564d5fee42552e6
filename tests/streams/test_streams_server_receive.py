"""The server hands the journal whole receives (views of its receive buffer,
one per string or part of one): whatever the client's string sizes and however
the bytes arrive, the file is byte for byte the one ``Stream.write`` of the same
strings makes, and the records are cut the same way."""

from __future__ import annotations

import os
import socket
import struct
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.streams import StreamJournal, read_streams
from engine.streams.server import READ_SIZE, JournalServer

SIZE = 1 << 20
PAGE = 4096


def _file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _direct(base: str, ident: bytes, strings: list[bytes]) -> bytes:
    path = os.path.join(base, "direct.jd")
    with StreamJournal.open(path, size=SIZE, page_size=PAGE) as journal:
        with journal.open_stream(ident) as stream:
            for s in strings:
                stream.write(s)
    return _file(path)


def _served(base: str, ident: bytes, strings: list[bytes], cuts: list[int]) -> bytes:
    path = os.path.join(base, "served.jd")
    sock_path = os.path.join(base, "s")
    wire = struct.pack(">I", len(ident)) + ident
    wire += b"".join(struct.pack(">I", len(s)) + s for s in strings if s) + struct.pack(">I", 0)
    with StreamJournal.open(path, size=SIZE, page_size=PAGE) as journal, JournalServer(sock_path, journal) as server:
        server.start()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(sock_path)
        at = 0
        for cut in sorted(set(cuts)):  # the bytes arrive in these pieces (or merged)
            if at < cut < len(wire):
                s.sendall(wire[at:cut])
                at = cut
        s.sendall(wire[at:])
        assert s.recv(1) == b"\x01"
        s.close()
    return _file(path)


strings_st = st.lists(
    st.one_of(st.binary(max_size=40), st.integers(1, 20_000).map(os.urandom), st.just(os.urandom(8192))),
    max_size=12,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=20), strings_st, st.lists(st.integers(0, 200_000), max_size=30))
def test_served_file_equals_direct_writes(ident: bytes, strings: list[bytes], cuts: list[int]) -> None:
    with tempfile.TemporaryDirectory() as base:
        assert _served(base, ident, strings, cuts) == _direct(base, ident, strings)


@settings(max_examples=40, deadline=None)
@given(strings_st, st.data())
def test_write_of_parts_equals_writes_of_each(strings: list[bytes], data: st.DataObject) -> None:
    """``_write(stream, parts)`` (what the server calls) journals exactly what
    writing the parts one by one does; views of a buffer reused afterwards."""
    with tempfile.TemporaryDirectory() as base:
        want = _direct(base, b"p", strings)
        path = os.path.join(base, "parts.jd")
        with StreamJournal.open(path, size=SIZE, page_size=PAGE) as journal:
            with journal.open_stream(b"p") as stream:
                rest = list(strings)
                while rest:
                    n = data.draw(st.integers(1, len(rest)))
                    scratch = bytearray(b"".join(rest[:n]))
                    view = memoryview(scratch)
                    parts, at = [], 0
                    for s in rest[:n]:
                        parts.append(view[at : at + len(s)])
                        at += len(s)
                    stream.write_parts(parts)
                    del parts
                    view.release()
                    scratch[:] = bytes(len(scratch))  # reused: must not change what was written
                    rest = rest[n:]
        assert _file(path) == want


def test_stream_larger_than_the_receive_buffer(tmp_path: object) -> None:
    payload = os.urandom(3 * READ_SIZE + 123)
    base = str(tmp_path)
    assert _served(base, b"big", [payload[:100], payload[100:]], [5, READ_SIZE + 7]) == _direct(
        base, b"big", [payload]
    )
    assert [x.data for x in read_streams(os.path.join(base, "served.jd"))] == [payload]
