"""Kestrel's memcache text protocol, parsed and encoded without I/O."""

from __future__ import annotations

import pytest

from engine.queue.kestrel import protocol as p


def _error(line: bytes) -> p.ProtocolError:
    with pytest.raises(p.ProtocolError) as info:
        p.parse_line(line)
    return info.value


def test_set_line() -> None:
    request = p.parse_line(b"set jobs 0 0 5\r\n")
    assert request == p.SetRequest(p.Target("jobs", ""), 0, 5, False)
    request = p.parse_line(b"SET jobs 7 60 11 noreply\n")
    assert request == p.SetRequest(p.Target("jobs", ""), 60, 11, True)


def test_set_line_errors_are_fatal_when_the_length_is_unreadable() -> None:
    assert _error(b"set jobs 0 0\r\n").fatal
    assert _error(b"set jobs 0 0 -5\r\n").fatal
    assert _error(b"set jobs 0 0 5 please\r\n").fatal
    bad_name = _error(b"set ../x 0 0 5\r\n")
    assert bad_name.reply.startswith(b"CLIENT_ERROR ") and not bad_name.fatal
    assert bad_name.skip == 7  # its data block and \r\n are dropped, to stay in step


def test_get_options() -> None:
    request = p.parse_line(b"get work/t=500/open\r\n")
    assert isinstance(request, p.GetRequest)
    assert (request.target, request.wait_ms, request.open, request.close) == (p.Target("work", ""), 500, True, False)
    assert request.key == "work/t=500/open"
    request = p.parse_line(b"get work/close/open")
    assert isinstance(request, p.GetRequest) and request.open and request.close
    request = p.parse_line(b"get orders+audit/peek")
    assert isinstance(request, p.GetRequest) and request.peek and request.target == p.Target("orders", "audit")


@pytest.mark.parametrize(
    "key",
    [b"q/peek/open", b"q/peek/close", b"q/abort/open", b"q/abort/close", b"q/peek/abort", b"q/bogus",
     b"q/t=abc", b"q/t=-1", b"q/t=999999999999"],
)
def test_get_option_combinations_kestrel_refuses(key: bytes) -> None:
    error = _error(b"get " + key)
    assert error.reply.startswith(b"CLIENT_ERROR ") and not error.fatal


@pytest.mark.parametrize(
    "name",
    [b"..", b".", b"a\x00b", b"a\x01b", b"x" * 251, b"a.read.b", b"a~b", b"+r", b"q+", b"q+a+b", b"\xff\xfe"],
)
def test_bad_names(name: bytes) -> None:
    with pytest.raises(p.ProtocolError) as info:
        p.parse_target(name)
    assert info.value.reply.startswith(b"CLIENT_ERROR ")
    assert info.value.reply.endswith(b"\r\n") and b"\r\n" not in info.value.reply[:-2]


def test_names_with_a_slash_never_reach_a_path() -> None:
    # ``get ../x``: the key is ``..`` (refused); ``set ../x``: refused whole.
    assert _error(b"get ../x").reply.startswith(b"CLIENT_ERROR")
    assert _error(b"delete a/b").reply.startswith(b"CLIENT_ERROR")


def test_other_commands() -> None:
    assert p.parse_line(b"delete jobs") == p.SimpleRequest("delete", p.Target("jobs", ""))
    assert p.parse_line(b"delete jobs noreply") == p.SimpleRequest("delete", p.Target("jobs", ""), True)
    assert p.parse_line(b"flush jobs+r") == p.SimpleRequest("flush", p.Target("jobs", "r"))
    assert p.parse_line(b"flush_all") == p.SimpleRequest("flush_all")
    assert p.parse_line(b"flush_all 0 noreply") == p.SimpleRequest("flush_all", None, True)
    for command in ("stats", "version", "shutdown", "quit"):
        assert p.parse_line(command.encode()) == p.SimpleRequest(command)
    assert _error(b"frobnicate x").reply == p.ERROR
    assert _error(b"\r\n").reply == p.ERROR
    assert _error(b"get").reply.startswith(b"CLIENT_ERROR")
    assert _error(b"get a b").reply.startswith(b"CLIENT_ERROR")


def test_expiry_as_kestrel_reads_it() -> None:
    now = 1_700_000_000.0
    assert p.expire_at(0, now) is None
    assert p.expire_at(60, now) == now + 60
    assert p.expire_at(999_999, now) == now + 999_999
    assert p.expire_at(1_800_000_000, now) == 1_800_000_000.0


def test_encoding() -> None:
    assert p.encode_value("jobs/open", b"hi") == b"VALUE jobs/open 0 2\r\nhi\r\nEND\r\n"
    assert p.encode_stats([("uptime", 3), ("version", "x")]) == b"STAT uptime 3\r\nSTAT version x\r\nEND\r\n"
    assert p.encode_version("engine-1") == b"VERSION engine-1\r\n"
    assert p.server_error("disk\nfull") == b"SERVER_ERROR disk?full\r\n"
    assert p.Target("q", "r").key == "q+r" and p.Target("q", "").key == "q"
