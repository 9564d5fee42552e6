"""Kestrel 2's commands and replies as its guide and memcache handler define them:
``delete`` (``DELETED``), ``monitor`` and ``confirm``, several open reads, the
flushes, ``stats`` with every field for every queue, ``dump_stats``, memcached's
``stats items``/``cachedump``, ``status``, ``version``, ``reload``, and a client
that half-closes its socket.  Servers bind 127.0.0.1 on a free port; every
socket has a timeout; every server is stopped."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kestrel_helpers
import pytest
from kestrel_helpers import ask, drain

from engine.queue import Queue
from engine.queue.kestrel import RunningServer, serve_in_thread
from engine.queue.kestrel.stats import FIGURES

pytest.importorskip("pymemcache.client.base")

SERVER_FIGURES = (
    "uptime", "time", "version", "curr_items", "total_items", "bytes", "reserved_memory_ratio", "curr_connections",
    "total_connections", "cmd_get", "cmd_set", "cmd_peek", "get_hits", "get_misses", "bytes_read", "bytes_written",
    "queue_creates", "queue_deletes", "queue_expires",
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    with serve_in_thread(str(tmp_path / "queues"), port=0, max_open_reads=3) as running:
        yield running


def client(server: RunningServer) -> Any:
    return kestrel_helpers.client(server.host, server.port)


def raw(server: RunningServer) -> socket.socket:
    return kestrel_helpers.raw(server.host, server.port)


def stats(server: RunningServer) -> dict[str, str]:
    c = client(server)
    try:
        return {k.decode(): v.decode() if isinstance(v, bytes) else str(v) for k, v in c.stats().items()}
    finally:
        c.close()


def put(server: RunningServer, queue: str, *items: bytes) -> None:
    c = client(server)
    for item in items:
        assert c.set(queue, item) is True
    c.close()


# -- delete and the flushes ---------------------------------------------------------------


def test_delete_answers_deleted(server: RunningServer, tmp_path: Path) -> None:
    """Kestrel answers ``DELETED`` (we answered ``END``, and pymemcache's delete()
    returned False); deleting what does not exist says so too and creates nothing."""
    directory = tmp_path / "queues"
    c = client(server)
    assert c.get("jobs") is None and c.get("jobs+audit") is None
    c.set("jobs", b"x")
    assert c.delete("jobs+audit") is True
    assert not (directory / "jobs.read.audit").exists()
    assert c.delete("jobs") is True
    assert c.delete("nosuch") is True and c.delete("nosuch+r") is True
    assert list(directory.iterdir()) == []
    assert int(stats(server)["queue_deletes"]) == 2  # what existed
    sock = raw(server)
    assert ask(sock, b"delete other noreply\r\nversion\r\n").startswith(b"VERSION ")  # noreply: nothing
    sock.close()
    c.close()


def test_flushes_of_what_does_not_exist_create_nothing(server: RunningServer, tmp_path: Path) -> None:
    sock = raw(server)
    assert ask(sock, b"flush nosuch\r\n") == b"END\r\n"
    assert ask(sock, b"flush_expired nosuch\r\n") == b"0\r\n"
    assert ask(sock, b"flush_all\r\n") == b"OK\r\n"
    assert ask(sock, b"flush_all_expired\r\n") == b"0\r\n"
    assert list((tmp_path / "queues").iterdir()) == []
    ask(sock, b"set q 0 0 1\r\na\r\n")
    assert ask(sock, b"flush q+nobody\r\n") == b"END\r\n"  # no such fanout reader: not made by a flush
    assert not (tmp_path / "queues" / "q.read.nobody").exists()
    sock.close()


def test_flush_expired_drops_the_expired_items_at_the_head(server: RunningServer) -> None:
    sock = raw(server)
    assert ask(sock, b"get q\r\n") == b"END\r\n"
    assert ask(sock, b"get q+r\r\n") == b"END\r\n"
    gone = b"set q 0 1000000 4\r\ngone\r\n"  # absolute: 1970-01-12, long expired
    ask(sock, gone * 2 + b"set q 0 0 4\r\nlive\r\n" + gone, b"STORED\r\n" * 4)
    assert ask(sock, b"flush_expired q\r\n") == b"2\r\n"  # the two at the head (Kestrel: a look at the head)
    assert ask(sock, b"flush_expired q\r\n") == b"0\r\n"
    assert ask(sock, b"flush_all_expired\r\n") == b"2\r\n"  # q+r's head
    figures = stats(server)
    assert (figures["queue_q_expired_items"], figures["queue_q+r_expired_items"]) == ("2", "2")
    assert ask(sock, b"get q\r\n", b"END\r\n") == b"VALUE q 0 4\r\nlive\r\nEND\r\n"
    assert ask(sock, b"get q\r\n") == b"END\r\n"  # the last one expired when the reader reached it
    assert ask(sock, b"flush_expired q noreply\r\nversion\r\n").startswith(b"VERSION ")
    sock.close()


# -- open reads, monitor, confirm ----------------------------------------------------------


def test_open_reads_up_to_the_limit_close_and_abort_take_the_oldest(server: RunningServer) -> None:
    put(server, "jobs", b"a", b"b", b"c", b"d")
    sock = raw(server)
    for data in (b"a", b"b", b"c"):  # max_open_reads=3
        assert ask(sock, b"get jobs/open\r\n", b"END\r\n") == b"VALUE jobs/open 0 1\r\n%s\r\nEND\r\n" % data
    assert ask(sock, b"get jobs/open\r\n") == b"ERROR\r\n"  # a fourth: too many open reads
    assert ask(sock, b"get jobs\r\n") == b"ERROR\r\n"  # no plain get beside open reads
    assert ask(sock, b"get jobs/close\r\n") == b"END\r\n"  # confirms a
    assert ask(sock, b"get jobs/abort\r\n") == b"END\r\n"  # gives b back
    assert stats(server)["queue_jobs_open_transactions"] == "1"
    assert ask(sock, b"get jobs/open\r\n", b"END\r\n") == b"VALUE jobs/open 0 1\r\nb\r\nEND\r\n"  # b first again
    assert ask(sock, b"confirm jobs 2\r\n") == b"END\r\n"  # c and b
    assert ask(sock, b"get jobs\r\n", b"END\r\n") == b"VALUE jobs 0 1\r\nd\r\nEND\r\n"
    sock.close()


def test_monitor_streams_open_items_then_end_and_confirm_takes_them(server: RunningServer) -> None:
    put(server, "jobs", b"one", b"two", b"three")
    sock = raw(server)
    reply = ask(sock, b"monitor jobs 5 2\r\n", b"END\r\nEND\r\n")
    assert reply == b"VALUE jobs 0 3\r\none\r\nEND\r\nVALUE jobs 0 3\r\ntwo\r\nEND\r\nEND\r\n"
    figures = stats(server)
    assert (figures["queue_jobs_open_transactions"], figures["queue_jobs_items"]) == ("2", "1")
    assert ask(sock, b"confirm jobs 3\r\n") == b"ERROR\r\n"  # only two are open: nothing confirmed
    assert ask(sock, b"confirm jobs 0\r\n") == b"ERROR\r\n"
    assert ask(sock, b"confirm jobs 2\r\n") == b"END\r\n"
    assert ask(sock, b"confirm jobs 1\r\n") == b"ERROR\r\n"
    assert ask(sock, b"monitor jobs 0\r\n") == b"END\r\n"  # no time: nothing
    sock.close()
    c = client(server)
    assert c.get("jobs") == b"three" and c.get("jobs") is None
    c.close()


def test_monitor_waits_for_items_and_stops_at_the_open_read_limit(server: RunningServer) -> None:
    sock = raw(server)
    assert ask(sock, b"get jobs\r\n") == b"END\r\n"
    later = threading.Timer(0.2, put, args=(server, "jobs", b"a", b"b", b"c", b"d"))
    later.start()
    # No max-items: as many as may be open (3); the 4th stays queued.
    reply = ask(sock, b"monitor jobs 30\r\n", b"END\r\nEND\r\n")
    later.join()
    assert reply.count(b"VALUE jobs 0 1\r\n") == 3 and reply.endswith(b"c\r\nEND\r\nEND\r\n")
    assert ask(sock, b"monitor jobs 30\r\n") == b"END\r\n"  # the limit is reached: at once
    sock.close()  # the three open reads are given back, in order
    c = client(server)
    assert [c.get("jobs") for _ in range(5)] == [b"a", b"b", b"c", b"d", None]
    c.close()


def test_monitor_of_an_empty_queue_ends_after_its_time(server: RunningServer) -> None:
    sock = raw(server)
    assert ask(sock, b"monitor idle 1\r\n") == b"END\r\n"
    assert ask(sock, b"version\r\n").startswith(b"VERSION ")
    sock.close()


# -- stats -----------------------------------------------------------------------------------


def test_stats_has_every_kestrel_field_as_a_number_for_every_queue(server: RunningServer, tmp_path: Path) -> None:
    """Every global and per-queue field Kestrel's ``stats`` prints, numbers all: a
    queue no reader has touched (we printed ``None``), fanout readers (the
    parent lists them in ``children``), a queue with fanout readers only, and
    items and bytes that leave out the reads open on connections."""
    directory = tmp_path / "queues"
    with Queue.open(directory, "untouched") as q:  # another process's queue: no reader yet
        q.put(b"12345")
    with Queue.open(directory, "fanned") as q:
        q.reader("audit")  # a reader on disk that the server has not opened
        q.put(b"678")
    c = client(server)
    assert c.get("jobs") is None and c.get("jobs+audit") is None
    c.set("jobs", b"aaaa")
    c.set("jobs", b"bb")
    assert c.get("jobs/open") == b"aaaa"
    figures = stats(server)
    for name in SERVER_FIGURES:
        assert name in figures, name
    names = {"jobs", "jobs+audit", "untouched", "fanned", "fanned+audit"}
    for queue in names:
        for figure in FIGURES:
            value = figures.get(f"queue_{queue}_{figure}")
            assert value is not None and value.isdigit(), (queue, figure, value)
    per_queue = {key.split("_")[1] for key in figures if key.startswith("queue_") and key.count("_") >= 2
                 and key not in SERVER_FIGURES}
    assert per_queue == names
    expect = {
        "queue_jobs_items": "1", "queue_jobs_bytes": "2", "queue_jobs_open_transactions": "1",
        "queue_jobs+audit_items": "2", "queue_jobs+audit_bytes": "6", "queue_jobs_children": "jobs+audit",
        "queue_jobs_total_items": "2", "queue_untouched_items": "1", "queue_untouched_bytes": "5",
        "queue_fanned_items": "0", "queue_fanned_children": "fanned+audit", "queue_fanned+audit_items": "1",
        "queue_fanned+audit_bytes": "3", "curr_items": "5", "bytes": "16", "total_items": "2", "cmd_set": "2",
        "queue_creates": "2", "queue_expires": "0", "reserved_memory_ratio": "0.000",
    }
    assert {key: figures.get(key) for key in expect} == expect
    c.close()


def test_journal_rotations_are_counted(tmp_path: Path) -> None:
    """A set that fills the 16 MiB journal file starts a new one: Kestrel's
    ``journal_rotations``."""
    with serve_in_thread(str(tmp_path), port=0, sync="never") as server:
        c = client(server)
        assert stats(server).get("queue_big_journal_rotations") is None
        for _ in range(17):
            assert c.set("big", b"x" * (1 << 20)) is True
        figures = stats(server)
        assert figures["queue_big_journal_rotations"] == "1"
        assert figures["queue_big_journal_rewrites"] == "0"
        assert int(figures["queue_big_logsize"]) > 17 << 20
        c.close()


def test_dump_stats_groups_the_figures_by_queue(server: RunningServer) -> None:
    sock = raw(server)
    assert ask(sock, b"get a\r\n") == b"END\r\n"
    assert ask(sock, b"get a+r\r\n") == b"END\r\n"  # a fanout reader: sees items put from now on
    put(server, "a", b"xyz")
    ask(sock, b"get a+r\r\n", b"END\r\n")
    reply = ask(sock, b"dump_stats\r\n", b"END\r\n").decode()
    blocks = re.findall(r"queue '([^']+)' \{\r\n((?:  [a-z_]+=[^\r]*\r\n)*)\}\r\n", reply)
    assert [name for name, _ in blocks] == ["a", "a+r"] and reply.endswith("}\r\nEND\r\n")
    first = dict(line.strip().split("=") for line in blocks[0][1].splitlines())
    assert list(first)[: len(FIGURES)] == list(FIGURES)
    assert (first["items"], first["bytes"], first["children"]) == ("1", "3", "a+r")
    one = ask(sock, b"dump_stats a+r nosuch\r\n", b"END\r\n").decode()
    assert one.startswith("queue 'a+r' {\r\n  items=0\r\n") and one.endswith("queue 'nosuch' {\r\n}\r\nEND\r\n")
    sock.close()


def test_stats_items_and_cachedump_list_the_queues(server: RunningServer) -> None:
    c = client(server)
    assert c.get("a") is None and c.get("a+r") is None
    c.set("a", b"xyz")
    assert c.get("a+r") == b"xyz"
    items = c.stats("items")
    assert items[b"items:1:number"] == 2 and b"items:1:age" in items
    c.close()
    sock = raw(server)
    assert ask(sock, b"stats cachedump 1 0\r\n", b"END\r\n") == b"ITEM a [3 b; 0 s]\r\nITEM a+r [0 b; 0 s]\r\nEND\r\n"
    assert ask(sock, b"stats cachedump 1 1\r\n", b"END\r\n") == b"ITEM a [3 b; 0 s]\r\nEND\r\n"
    assert ask(sock, b"stats cachedump 2 0\r\n") == b"END\r\n"
    sock.close()


# -- status, version, reload ---------------------------------------------------------------


def test_status_read_only_and_quiescent(server: RunningServer) -> None:
    put(server, "jobs", b"a", b"b")
    sock = raw(server)
    assert ask(sock, b"status\r\n") == b"UP\r\n"
    assert ask(sock, b"get jobs/open\r\n", b"END\r\n") == b"VALUE jobs/open 0 1\r\na\r\nEND\r\n"
    assert ask(sock, b"status readonly\r\n") == b"END\r\n"
    assert ask(sock, b"status\r\n") == b"READONLY\r\n"
    for write in (b"set jobs 0 0 1\r\nc\r\n", b"delete jobs\r\n", b"flush jobs\r\n", b"flush_all\r\n",
                  b"flush_expired jobs\r\n"):
        assert ask(sock, write).startswith(b"SERVER_ERROR the server is readonly"), write
    assert ask(sock, b"get jobs/peek\r\n", b"END\r\n") == b"VALUE jobs/peek 0 1\r\nb\r\nEND\r\n"  # reads go on
    assert ask(sock, b"status quiescent\r\n") == b"END\r\n"
    for read in (b"get jobs/peek\r\n", b"get jobs/close/open\r\n", b"monitor jobs 1\r\n"):
        assert ask(sock, read).startswith(b"SERVER_ERROR the server is quiescent"), read
    assert ask(sock, b"confirm jobs 1\r\n") == b"ERROR\r\n"  # /close/open confirmed "a" before it was refused
    assert ask(sock, b"status up\r\n") == b"END\r\n"
    assert ask(sock, b"get jobs\r\n", b"END\r\n") == b"VALUE jobs 0 1\r\nb\r\nEND\r\n"
    sock.close()


def test_version_is_numeric_for_memcache_tools(server: RunningServer) -> None:
    """libmemcached parses ``<major>.<minor>.<micro>`` and refuses a major 0
    (``VERSION engine-0.1.0`` gave memcstat "strtol() failed")."""
    c = client(server)
    version = c.version().decode()
    c.close()
    match = re.fullmatch(r"([1-9]\d*)\.(\d+)\.(\d+)\+engine-(\S+)", version)
    assert match is not None, version
    import engine

    assert match.group(4) == engine.__version__
    assert stats(server)["version"] == version


def test_reload_answers_as_kestrel(server: RunningServer) -> None:
    sock = raw(server)
    assert ask(sock, b"reload\r\n") == b"Reloaded config.\r\n"
    sock.close()


# -- a client that half-closes ------------------------------------------------------------------


def test_half_closed_client_gets_stored_and_every_other_reply(server: RunningServer) -> None:
    """A client that sends a whole set and shuts its sending side got no STORED
    although the item was stored."""
    sock = raw(server)
    sock.sendall(b"set jobs 0 0 3\r\nabc\r\n")
    sock.shutdown(socket.SHUT_WR)
    assert drain(sock) == b"STORED\r\n"  # then the server closes
    sock.close()
    sock = raw(server)
    sock.sendall(b"get jobs/peek\r\nset jobs 0 0 1\r\nd\r\nget jobs/open\r\nget jobs/close\r\nversion\r\n"
                 b"set jobs 0 0 5\r\nhalf")  # the last set is cut short: dropped
    sock.shutdown(socket.SHUT_WR)
    reply = drain(sock)
    assert reply.startswith(b"VALUE jobs/peek 0 3\r\nabc\r\nEND\r\nSTORED\r\nVALUE jobs/open 0 3\r\nabc\r\nEND\r\n"
                            b"END\r\nVERSION ")
    sock.close()
    c = client(server)
    assert c.get("jobs") == b"d" and c.get("jobs") is None
    c.close()


def test_half_closed_client_still_gets_its_waiting_get(server: RunningServer) -> None:
    sock = raw(server)
    sock.sendall(b"get jobs/t=8000/open\r\n")
    sock.shutdown(socket.SHUT_WR)
    later = threading.Timer(0.2, put, args=(server, "jobs", b"late"))
    later.start()
    assert drain(sock) == b"VALUE jobs/t=8000/open 0 4\r\nlate\r\nEND\r\n"
    later.join()
    sock.close()
    c = client(server)
    assert c.get("jobs") == b"late"  # it was open when the connection closed: given back
    c.close()
