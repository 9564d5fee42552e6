"""The Kestrel-compatible server with a real memcache client (pymemcache) and raw
sockets: servers bind 127.0.0.1 on a free port, every socket has a timeout, and
every server is stopped."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kestrel_helpers
import pytest
from kestrel_helpers import TIMEOUT, ask

from engine.queue import Queue
from engine.queue.kestrel import RunningServer, serve_in_thread

pymemcache = pytest.importorskip("pymemcache.client.base")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    with serve_in_thread(str(tmp_path / "queues"), port=0) as running:
        yield running


def client(server: RunningServer) -> Any:
    return kestrel_helpers.client(server.host, server.port)


def raw(server: RunningServer) -> socket.socket:
    return kestrel_helpers.raw(server.host, server.port)


def test_set_get_round_trip(server: RunningServer) -> None:
    c = client(server)
    assert c.set("jobs", b"one") is True
    assert c.set("jobs", b"two") is True
    assert c.get("jobs") == b"one"
    assert c.get("jobs") == b"two"
    assert c.get("jobs") is None
    c.close()


def test_noreply_set_is_stored(server: RunningServer) -> None:
    c = pymemcache.Client((server.host, server.port), default_noreply=True, timeout=TIMEOUT)
    c.set("jobs", b"quiet")
    assert c.get("jobs") == b"quiet"  # the same connection: the set came first
    c.close()


def test_open_then_drop_connection_gives_the_item_back(server: RunningServer) -> None:
    c = client(server)
    c.set("jobs", b"a")
    c.set("jobs", b"b")
    first = client(server)
    assert first.get("jobs/open") == b"a"
    first.close()  # the connection drops with "a" open
    other = client(server)
    assert other.get("jobs/t=5000") == b"a"  # back at the head
    assert other.get("jobs") == b"b"
    other.close()
    c.close()


def test_close_confirms_and_abort_gives_back(server: RunningServer) -> None:
    c = client(server)
    for data in (b"a", b"b", b"c"):
        c.set("jobs", data)
    assert c.get("jobs/open") == b"a"
    assert c.get("jobs/close/open") == b"b"  # a confirmed
    assert c.get("jobs/abort") is None  # b given back
    assert c.get("jobs/open") == b"b"
    assert c.get("jobs/close") is None  # confirms b, opens nothing
    assert c.get("jobs/close") is None  # nothing open: ignored
    c.close()
    other = client(server)
    assert other.get("jobs") == b"c"
    assert other.get("jobs") is None
    other.close()


def test_one_open_read_per_queue_and_connection(server: RunningServer) -> None:
    sock = raw(server)
    ask(sock, b"set jobs 0 0 1\r\na\r\nset jobs 0 0 1\r\nb\r\n", b"STORED\r\nSTORED\r\n")
    assert ask(sock, b"get jobs/open\r\n", b"END\r\n") == b"VALUE jobs/open 0 1\r\na\r\nEND\r\n"
    assert ask(sock, b"get jobs/open\r\n") == b"ERROR\r\n"
    assert ask(sock, b"get jobs\r\n") == b"ERROR\r\n"
    assert ask(sock, b"get jobs/close/open\r\n", b"END\r\n") == b"VALUE jobs/close/open 0 1\r\nb\r\nEND\r\n"
    sock.close()


def test_peek_leaves_the_item(server: RunningServer) -> None:
    c = client(server)
    assert c.get("jobs/peek") is None
    c.set("jobs", b"x")
    assert c.get("jobs/peek") == b"x"
    assert c.get("jobs/peek") == b"x"
    assert c.get("jobs") == b"x"
    c.close()


def _stat(server: RunningServer, name: str) -> int:
    c = client(server)
    try:
        return int(c.stats()[name.encode()])
    finally:
        c.close()


def test_wait_is_woken_by_a_set_from_another_connection(server: RunningServer) -> None:
    got: list[object] = []
    waiter = client(server)
    c = client(server)
    c.set("jobs", b"first")  # the queue exists: its waiters show in stats
    assert c.get("jobs") == b"first"
    thread = threading.Thread(target=lambda: got.append(waiter.get("jobs/t=8000/open")))
    thread.start()
    for _ in range(500):  # until the get waits (bounded)
        if _stat(server, "queue_jobs_waiters") == 1:
            break
        time.sleep(0.01)
    assert c.set("jobs", b"late") is True
    thread.join(TIMEOUT)
    assert got == [b"late"]
    assert _stat(server, "queue_jobs_open_transactions") == 1
    waiter.close()
    c.close()


def test_fanout_readers(server: RunningServer) -> None:
    c = client(server)
    assert c.get("orders+audit") is None  # created now: sees items put from now on
    assert c.get("orders+billing") is None
    assert c.get("orders") is None  # the default reader, also created on first use
    c.set("orders", b"o1")
    c.set("orders", b"o2")
    assert c.get("orders+audit") == b"o1"
    assert c.get("orders+billing/open") == b"o1"
    assert c.get("orders+billing/close/open") == b"o2"
    assert c.get("orders+audit") == b"o2"
    assert c.get("orders") == b"o1"  # the default reader sees every item too
    with pytest.raises(pymemcache.MemcacheClientError):
        c.set("orders+audit", b"no")  # items go to the parent queue
    c.close()


def test_stats_names(server: RunningServer) -> None:
    c = client(server)
    assert c.get("jobs") is None  # readers are created on first use: the default reader
    c.set("jobs", b"12345")
    assert c.get("jobs+r") is None  # and a fanout reader, which starts at the tail
    c.set("jobs", b"678")
    stats = {k.decode(): v for k, v in c.stats().items()}
    for name in ("uptime", "time", "version", "curr_items", "total_items", "bytes", "cmd_get", "cmd_set",
                 "get_hits", "get_misses", "curr_connections", "total_connections"):
        assert name in stats, name
    for queue in ("jobs", "jobs+r"):
        for figure in ("items", "bytes", "total_items", "logsize", "expired_items", "age", "open_transactions",
                       "waiters", "discarded", "total_flushes"):
            assert f"queue_{queue}_{figure}" in stats, (queue, figure)
    assert int(stats["queue_jobs_items"]) == 2 and int(stats["queue_jobs_bytes"]) == 8
    assert int(stats["queue_jobs+r_items"]) == 1 and int(stats["queue_jobs+r_bytes"]) == 3
    assert int(stats["cmd_set"]) == 2 and int(stats["curr_connections"]) == 1
    c.close()


def test_expiry_field(server: RunningServer) -> None:
    c = client(server)
    c.set("jobs", b"old", expire=1_000_000)  # absolute: 1970-01-12, long gone
    c.set("jobs", b"later", expire=3600)  # relative: an hour from now
    c.set("jobs", b"far", expire=int(time.time()) + 3600)  # absolute
    assert c.get("jobs") == b"later"
    assert c.get("jobs") == b"far"
    assert int(c.stats()[b"queue_jobs_expired_items"]) == 1
    c.close()


@pytest.mark.parametrize("name", [b"../x", b"a\x00b", b"x" * 300, b"..", b"a.read.b", b"q\x7f"])
def test_bad_names_are_client_errors(server: RunningServer, tmp_path: Path, name: bytes) -> None:
    sock = raw(server)
    reply = ask(sock, b"set " + name + b" 0 0 1\r\nz\r\n")
    assert reply.startswith(b"CLIENT_ERROR "), reply
    assert ask(sock, b"get " + name + b"\r\n").startswith(b"CLIENT_ERROR ")
    assert ask(sock, b"version\r\n").startswith(b"VERSION ")  # still in step
    sock.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["queues"]
    assert list((tmp_path / "queues").iterdir()) == []


def test_oversized_item_is_refused_and_the_connection_stays_in_step(tmp_path: Path) -> None:
    with serve_in_thread(str(tmp_path), port=0, max_item_size=1000) as server:
        sock = raw(server)
        reply = ask(sock, b"set jobs 0 0 5000\r\n" + b"x" * 5000 + b"\r\n")
        assert reply.startswith(b"CLIENT_ERROR item of 5000 bytes"), reply
        assert ask(sock, b"set jobs 0 0 1000\r\n" + b"y" * 1000 + b"\r\n") == b"STORED\r\n"
        assert ask(sock, b"get jobs\r\n", b"END\r\n").startswith(b"VALUE jobs 0 1000\r\n")
        sock.close()


def test_malformed_input(server: RunningServer) -> None:
    sock = raw(server)
    assert ask(sock, b"hello world\r\n") == b"ERROR\r\n"
    assert ask(sock, b"\r\n") == b"ERROR\r\n"
    assert ask(sock, b"get\r\n").startswith(b"CLIENT_ERROR ")
    assert ask(sock, b"get jobs/t=soon\r\n").startswith(b"CLIENT_ERROR ")
    assert ask(sock, b"get jobs/peek/open\r\n").startswith(b"CLIENT_ERROR ")
    assert ask(sock, b"version\r\n").startswith(b"VERSION ")
    # A data block not followed by \r\n: out of step, the connection closes.
    assert ask(sock, b"set jobs 0 0 2\r\nabcd\r\n").startswith(b"CLIENT_ERROR bad data chunk")
    assert sock.recv(100) == b""
    sock.close()
    # A line over the limit: refused and closed; others are not touched.
    other = raw(server)
    other.sendall(b"set jobs 0 0 1\r\nk\r\n")
    assert other.recv(100) == b"STORED\r\n"
    long_line = raw(server)
    assert ask(long_line, b"get " + b"x" * 5000 + b"\r\n").startswith(b"CLIENT_ERROR request line over")
    long_line.close()
    assert ask(other, b"get jobs\r\n", b"END\r\n") == b"VALUE jobs 0 1\r\nk\r\nEND\r\n"
    other.close()


def test_client_that_disconnects_mid_item(server: RunningServer) -> None:
    sock = raw(server)
    sock.sendall(b"set jobs 0 0 10\r\nabc")
    sock.close()
    half_line = raw(server)
    half_line.sendall(b"set jo")
    half_line.close()
    c = client(server)
    assert c.get("jobs") is None  # nothing stored
    assert c.set("jobs", b"fine") is True
    assert c.get("jobs") == b"fine"
    c.close()


def test_connections_up_to_the_limit(tmp_path: Path) -> None:
    with serve_in_thread(str(tmp_path), port=0, max_connections=20) as server:
        socks = [raw(server) for _ in range(20)]
        for sock in socks:
            assert ask(sock, b"version\r\n").startswith(b"VERSION ")
        extra = raw(server)
        assert ask(extra, b"version\r\n").startswith(b"SERVER_ERROR too many connections")
        extra.close()
        socks.pop().close()
        for _ in range(500):  # the server notices the close (bounded)
            again = raw(server)
            reply = ask(again, b"version\r\n")
            again.close()
            if reply.startswith(b"VERSION "):
                break
            time.sleep(0.01)
        assert reply.startswith(b"VERSION ")
        for sock in socks:
            sock.close()


def test_delete_and_flush(server: RunningServer, tmp_path: Path) -> None:
    sock = raw(server)
    assert ask(sock, b"get q+r\r\n") == b"END\r\n"  # readers are created on first use
    assert ask(sock, b"get q\r\n") == b"END\r\n"
    ask(sock, b"set q 0 0 1\r\na\r\nset q 0 0 1\r\nb\r\n", b"STORED\r\nSTORED\r\n")
    assert ask(sock, b"flush q+r\r\n") == b"END\r\n"
    assert ask(sock, b"get q+r\r\n") == b"END\r\n"
    assert ask(sock, b"get q\r\n", b"END\r\n") == b"VALUE q 0 1\r\na\r\nEND\r\n"
    assert ask(sock, b"delete q+r\r\n") == b"DELETED\r\n"
    assert not (tmp_path / "queues" / "q.read.r").exists()
    assert ask(sock, b"flush_all\r\n") == b"OK\r\n"
    assert ask(sock, b"get q\r\n") == b"END\r\n"
    ask(sock, b"set q 0 0 1\r\nc\r\n")
    assert ask(sock, b"delete q\r\n") == b"DELETED\r\n"
    assert list((tmp_path / "queues").iterdir()) == []
    assert ask(sock, b"get q\r\n") == b"END\r\n"  # a new, empty queue
    sock.close()


def test_shutdown_is_opt_in(tmp_path: Path) -> None:
    with serve_in_thread(str(tmp_path), port=0) as server:
        sock = raw(server)
        assert ask(sock, b"shutdown\r\n").startswith(b"CLIENT_ERROR shutdown is disabled")
        sock.close()
    server = serve_in_thread(str(tmp_path), port=0, allow_shutdown=True)
    sock = raw(server)
    assert ask(sock, b"shutdown\r\n") == b""  # closed
    sock.close()
    server._thread.join(TIMEOUT)
    assert not server._thread.is_alive()
    with Queue.open(tmp_path, "any") as q:  # the server's queues were closed
        assert len(q) == 0


def test_items_survive_a_clean_stop(tmp_path: Path) -> None:
    with serve_in_thread(str(tmp_path), port=0) as server:
        c = client(server)
        c.set("jobs", b"kept")
        c.set("jobs", b"taken")
        assert c.get("jobs/open") == b"kept"  # open when the server stops: comes back
        c.close()
    with Queue.open(tmp_path, "jobs") as q:
        assert not q.recovery.repaired
        reader = q.reader()
        item = reader.get(timeout=0)
        assert item is not None and item.data == b"kept"
    assert os.listdir(tmp_path)


def test_a_waiting_get_does_not_poll(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.queue.reader import Reader

    calls = []
    real_get = Reader.get

    def counting_get(self: Reader, timeout: object = None) -> object:
        calls.append(timeout)
        return real_get(self, timeout)  # type: ignore[arg-type]

    c = client(server)
    assert c.get("idle") is None
    monkeypatch.setattr(Reader, "get", counting_get)
    assert c.get("idle/t=300") is None  # nothing comes: looked at once, and once at the end
    assert len(calls) <= 2 and all(t == 0 for t in calls)
    c.close()


def test_bad_input_elsewhere_leaves_an_open_read_alone(server: RunningServer) -> None:
    holder = client(server)
    holder.set("jobs", b"mine")
    holder.set("jobs", b"next")
    assert holder.get("jobs/open") == b"mine"
    rude = raw(server)
    assert ask(rude, b"get jobs/abort\r\n") == b"END\r\n"  # nothing open on *this* connection
    assert ask(rude, b"get " + b"j" * 4000 + b"\r\n").startswith(b"CLIENT_ERROR")
    rude.close()
    assert holder.get("jobs/close") is None  # still open on its connection: confirmed now
    other = client(server)
    assert other.get("jobs") == b"next"
    assert other.get("jobs") is None
    other.close()
    holder.close()


def test_items_put_by_another_producer_reach_the_servers_clients(server: RunningServer, tmp_path: Path) -> None:
    """The server is one producer among others: a waiting get sees another
    process's put (here another handle: the same protocol) without a set."""
    import threading

    from engine.queue import Queue

    c = client(server)
    c.set("shared", b"from the server")
    assert c.get("shared") == b"from the server"
    other = Queue.open(str(tmp_path / "queues"), "shared")
    other.put(b"from elsewhere")
    assert c.get("shared/t=3000") == b"from elsewhere"  # the queue is shared now: polled
    later = threading.Timer(0.2, other.put, args=(b"later",))
    later.start()
    assert c.get("shared/t=3000") == b"later"
    later.join()
    other.close()
    c.close()


def test_sets_of_many_clients_share_fsyncs_and_are_stored_only_once_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sync="always": each STORED follows a sync that covered its item (the ids are
    1..N, so when the m-th STORED is read, some finished sync covered id m); the sets
    of concurrent clients are committed in batches (at most one sync per set)."""
    synced: list[int] = []
    real_sync = Queue.sync

    def recording_sync(self: Queue) -> None:
        real_sync(self)
        synced.append(self.tail_id)  # on the server's loop, before the replies go out

    monkeypatch.setattr(Queue, "sync", recording_sync)
    clients, rounds = 8, 20
    with serve_in_thread(str(tmp_path), port=0) as server:
        socks = [raw(server) for _ in range(clients)]
        stored = 0
        for r in range(rounds):
            for i, sock in enumerate(socks):  # every client's set goes out before any reply is read
                sock.sendall(b"set jobs 0 0 4\r\n%02d%02d\r\n" % (i, r))
            for sock in socks:
                assert ask(sock, b"") == b"STORED\r\n"
                stored += 1
                assert max(synced) >= stored
        for sock in socks:
            sock.close()
    assert max(synced) == clients * rounds
    assert len(synced) <= clients * rounds
    with Queue.open(tmp_path, "jobs") as q:
        assert len(q) == clients * rounds


def test_a_failed_sync_answers_each_set_of_its_batch_with_server_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_sync = Queue.sync
    failures = [OSError(28, "No space left on device")]

    def failing_sync(self: Queue) -> None:
        if failures:
            raise failures.pop()
        real_sync(self)

    with serve_in_thread(str(tmp_path), port=0) as server:
        c = client(server)
        assert c.set("jobs", b"first") is True  # the queue is open
        monkeypatch.setattr(Queue, "sync", failing_sync)
        sock = raw(server)
        assert ask(sock, b"set jobs 0 0 4\r\nlost\r\n").startswith(b"SERVER_ERROR")
        assert ask(sock, b"set jobs 0 0 4\r\nkept\r\n") == b"STORED\r\n"  # the server serves on
        assert c.get("jobs") == b"first"
        sock.close()
        c.close()
