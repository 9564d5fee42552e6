"""Everyday use of ``engine streams``: a second server on a live socket, stale
socket files, identifiers holding NUL bytes, and help text on every argument."""

from __future__ import annotations

import argparse
import os
import socket
import sys

import pytest

from engine.cli import build_parser, main
from engine.errors import LockedError
from engine.streams import StreamJournal, read_streams
from engine.streams.server import JournalServer


def _send_stream(sock_path: str, ident: bytes, data: bytes) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock_path)
    s.sendall(len(ident).to_bytes(4, "big") + ident + len(data).to_bytes(4, "big") + data + bytes(4))
    answer = s.recv(1)
    s.close()
    return answer


def test_second_server_refuses_a_live_socket(tmp_path: object) -> None:
    base = str(tmp_path)
    sock_path = os.path.join(base, "s")
    with StreamJournal.open(os.path.join(base, "a"), size=1 << 20, page_size=4096) as first_journal:
        first = JournalServer(sock_path, first_journal)
        first.start()
        try:
            with StreamJournal.open(os.path.join(base, "b"), size=1 << 20, page_size=4096) as other:
                with pytest.raises(LockedError) as info:
                    JournalServer(sock_path, other)
                assert info.value.path == sock_path and "another server is listening" in str(info.value)
            # The command line says so in one line, and leaves the socket alone.
            assert main(["streams", "serve", sock_path, os.path.join(base, "c"), "--size", "64k"]) == 2
            assert os.path.exists(sock_path)
            assert _send_stream(sock_path, b"still-here", b"x") == b"\x01"  # the first server still answers
        finally:
            first.stop()
        assert not os.path.exists(sock_path)
        assert [s.ident for s in read_streams(os.path.join(base, "a"))] == [b"still-here"]
    with StreamJournal.open(os.path.join(base, "c"), size=1 << 16, page_size=4096):
        pass  # the refused command closed its journal


def test_stale_socket_file_is_replaced(tmp_path: object) -> None:
    base = str(tmp_path)
    sock_path = os.path.join(base, "s")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(sock_path)
    dead.listen(1)
    dead.close()  # its server died: the file stays, nobody listens
    assert os.path.exists(sock_path)
    with StreamJournal.open(os.path.join(base, "j"), size=1 << 20, page_size=4096) as journal:
        server = JournalServer(sock_path, journal)
        server.start()
        try:
            assert _send_stream(sock_path, b"id", b"abc") == b"\x01"
        finally:
            server.stop()
    assert not os.path.exists(sock_path)


def test_a_regular_file_at_the_socket_path_is_left_alone(tmp_path: object) -> None:
    base = str(tmp_path)
    path = os.path.join(base, "s")
    with open(path, "w") as f:
        f.write("not a socket")
    with StreamJournal.open(os.path.join(base, "j"), size=1 << 20, page_size=4096) as journal:
        with pytest.raises(OSError):
            JournalServer(path, journal)
    with open(path) as f:
        assert f.read() == "not a socket"


IDENTS = [b"one", b"tw\x00o", b"\x00lead", b"four\xff", b"five"]


def _nul_journal(path: str) -> None:
    with StreamJournal.open(path, size=256 * 1024, page_size=4096) as journal:
        for i, ident in enumerate(IDENTS):
            with journal.open_stream(ident) as s:
                s.write(b"d" * (i + 1))


def test_extract_passes_an_identifier_cut_at_its_nul(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    base = str(tmp_path)
    path = os.path.join(base, "j")
    _nul_journal(path)
    log = os.path.join(base, "log")
    script = (
        f"import os, sys; n = len(sys.stdin.buffer.read()); "
        f"open({log!r}, 'ab').write(os.fsencode(sys.argv[1]) + b' ' + sys.argv[2].encode() + b' ' + "
        f"str(n).encode() + b'\\n')"
    )
    assert main(["streams", "extract", path, "--", sys.executable, "-c", script]) == 0
    with open(log, "rb") as f:
        assert f.read().splitlines() == [b"one 0 1", b"tw 0 2", b" 0 3", b"four\xff 0 4", b"five 0 5"]
    err = capsys.readouterr().err
    assert "Traceback" not in err and "5 complete stream(s)" in err
    assert "stream 1: its identifier holds a NUL byte" in err
    out = os.path.join(base, "out")
    assert main(["streams", "extract", path, "--out", out]) == 0
    assert len(os.listdir(out)) == 5


def test_dump_escapes_identifiers_or_writes_them_raw(tmp_path: object, capfdbinary: pytest.CaptureFixture[bytes]
                                                     ) -> None:
    path = os.path.join(str(tmp_path), "j")
    _nul_journal(path)
    assert main(["streams", "dump", path]) == 0
    lines = [x for x in capfdbinary.readouterr().out.splitlines() if b" init " in x]
    assert [x.split(b" init ", 1)[1] for x in lines] == [
        b"ident(3)='one'", b"ident(4)='tw\\x00o'", b"ident(5)='\\x00lead'", b"ident(5)='four\\xff'",
        b"ident(4)='five'"]
    assert main(["streams", "dump", "--raw", path]) == 0
    lines = [x for x in capfdbinary.readouterr().out.splitlines() if b" init " in x]
    assert [x.split(b" init ", 1)[1] for x in lines] == [
        b"ident(%d)='%s'" % (len(i), i) for i in IDENTS]


def _actions(parser: argparse.ArgumentParser, name: str) -> list[tuple[str, argparse.Action]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                out.extend(_actions(sub, f"{name} {sub_name}"))
        elif not isinstance(action, argparse._HelpAction):
            out.append((name, action))
    return out


@pytest.mark.parametrize("command", ["streams", "spark", "pipeline", "demo"])
def test_every_argument_has_help_and_a_capital_placeholder(command: str) -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    for name, action in _actions(sub, command):
        where = f"{name} {action.dest}"
        assert action.help, f"{where}: no help text"
        if action.nargs != 0 and action.metavar is not None:
            assert str(action.metavar).replace("-- ", "").replace(" ", "").replace("_", "").isupper(), where
