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
    assert p.parse_line(b"flush_expired jobs") == p.SimpleRequest("flush_expired", p.Target("jobs", ""))
    assert p.parse_line(b"flush_all") == p.SimpleRequest("flush_all")
    assert p.parse_line(b"flush_all 0 noreply") == p.SimpleRequest("flush_all", None, True)
    for command in ("flush_all_expired", "version", "reload", "shutdown", "quit"):
        assert p.parse_line(command.encode()) == p.SimpleRequest(command)
    assert _error(b"frobnicate x").reply == p.ERROR
    assert _error(b"\r\n").reply == p.ERROR
    assert _error(b"get").reply.startswith(b"CLIENT_ERROR")
    assert _error(b"get a b").reply.startswith(b"CLIENT_ERROR")


def test_kestrel_2_streaming_reads() -> None:
    assert p.parse_line(b"monitor jobs 10") == p.MonitorRequest(p.Target("jobs", ""), 10, None)
    assert p.parse_line(b"MONITOR jobs+r 0 5\r\n") == p.MonitorRequest(p.Target("jobs", "r"), 0, 5)
    assert p.parse_line(b"confirm jobs 3") == p.ConfirmRequest(p.Target("jobs", ""), 3)
    for bad in (b"monitor jobs", b"monitor jobs soon", b"monitor jobs 1 2 3", b"monitor jobs 86401",
                b"monitor ../x 1", b"confirm jobs", b"confirm jobs -1", b"confirm jobs 1 2"):
        assert _error(bad).reply.startswith(b"CLIENT_ERROR "), bad


def test_stats_groups_status_and_dump_stats() -> None:
    assert p.parse_line(b"stats") == p.StatsRequest()
    assert p.parse_line(b"stats \r\n") == p.StatsRequest()  # libmemcached's memcstat sends a space
    assert p.parse_line(b"stats items") == p.StatsRequest("items")
    assert p.parse_line(b"stats cachedump 1 0") == p.StatsRequest("cachedump", 1, 0)
    assert _error(b"stats slabs").reply.startswith(b"CLIENT_ERROR")
    assert _error(b"stats cachedump 1").reply.startswith(b"CLIENT_ERROR")
    assert p.parse_line(b"dump_stats") == p.DumpStatsRequest()
    assert p.parse_line(b"dump_stats a b+c") == p.DumpStatsRequest((p.Target("a", ""), p.Target("b", "c")))
    assert p.parse_line(b"status") == p.StatusRequest()
    assert p.parse_line(b"status readOnly") == p.StatusRequest("READONLY")
    assert _error(b"status down").reply.startswith(b"CLIENT_ERROR unknown status")
    assert _error(b"status sideways").reply.startswith(b"CLIENT_ERROR unknown status")


def test_every_request_and_error_names_its_command() -> None:
    """What the server counts requests under (its Prometheus metrics)."""
    assert p.parse_line(b"gets q").command == "get"
    assert p.parse_line(b"set q 0 0 1").command == "set"
    assert p.parse_line(b"monitor q 1").command == "monitor"
    assert p.parse_line(b"stats items").command == "stats"
    assert p.parse_line(b"flush_all").command == "flush_all"
    assert _error(b"get ../x").command == "get"
    assert _error(b"set q 0 0").command == "set"
    assert _error(b"frobnicate").command == "unknown"
    assert _error(b"\r\n").command == "unknown"
    assert set(p.COMMANDS) >= {"get", "set", "delete", "monitor", "confirm", "dump_stats", "status"}


def test_expiry_as_kestrel_reads_it() -> None:
    now = 1_700_000_000.0
    assert p.expire_at(0, now) is None
    assert p.expire_at(60, now) == now + 60
    assert p.expire_at(999_999, now) == now + 999_999
    assert p.expire_at(1_800_000_000, now) == 1_800_000_000.0


def test_encoding() -> None:
    assert p.encode_value("jobs/open", b"hi") == b"VALUE jobs/open 0 2\r\nhi\r\nEND\r\n"
    assert p.encode_stats([("uptime", 3), ("version", "x")]) == b"STAT uptime 3\r\nSTAT version x\r\nEND\r\n"
    assert p.encode_version("2.4.7+engine-1") == b"VERSION 2.4.7+engine-1\r\n"
    assert p.encode_line("3") == b"3\r\n"
    assert p.server_error("disk\nfull") == b"SERVER_ERROR disk?full\r\n"
    assert p.Target("q", "r").key == "q+r" and p.Target("q", "").key == "q"
    assert (p.DELETED, p.FLUSHED_ALL, p.RELOADED) == (b"DELETED\r\n", b"OK\r\n", b"Reloaded config.\r\n")


def test_dump_stats_as_kestrel_prints_it() -> None:
    reply = p.encode_dump_stats([("a", [("items", 1), ("bytes", 5)]), ("a+r", [("items", 0)])])
    assert reply == (b"queue 'a' {\r\n  items=1\r\n  bytes=5\r\n}\r\n"
                     b"queue 'a+r' {\r\n  items=0\r\n}\r\nEND\r\n")
    assert p.encode_dump_stats([]) == b"END\r\n"


def test_cachedump_as_memcached_prints_it() -> None:
    assert p.encode_cachedump([("jobs", 12), ("jobs+audit", 0)]) == (
        b"ITEM jobs [12 b; 0 s]\r\nITEM jobs+audit [0 b; 0 s]\r\nEND\r\n")
    assert p.encode_cachedump([]) == b"END\r\n"
