"""The floor programs (``benchmarks/floor``) build, run on a tiny workload, and write
exactly the bytes they claim -- the bytes the engine writes for the same work -- so
a floor can never silently do less I/O than the store it is the limit of.

No timing: only byte counts (the programs' own and the kernel's, /proc/self/io).
"""

from __future__ import annotations

import os
import sys
import threading

import pytest

from benchmarks import floor

pytestmark = [
    pytest.mark.skipif(floor.compiler() is None, reason="no C compiler"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/io (Linux)"),
]


@pytest.fixture(autouse=True)
def _build_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINE_FLOOR_DIR", str(tmp_path_factory.getbasetemp() / "floor-build"))


def _wchar() -> int:
    return floor.io_counts()[1]


def test_every_program_builds_and_is_cached() -> None:
    for name in floor.PROGRAMS:
        exe = floor.build(name)
        assert os.access(exe, os.X_OK)
        assert floor.build(name) == exe  # cached by source hash
    with pytest.raises(ValueError):
        floor.build("nothing")


def test_no_compiler_is_a_clear_message(monkeypatch: pytest.MonkeyPatch, tmp_path: str) -> None:
    monkeypatch.setenv("ENGINE_FLOOR_DIR", str(tmp_path))
    monkeypatch.setattr(floor, "compiler", lambda: None)
    with pytest.raises(floor.FloorUnavailable, match="no C compiler"):
        floor.build("pages_tx")
    assert floor.available("pages_tx") is not None


def _check(res: floor.FloorRun) -> None:
    """The kernel saw every byte the program claims to have written and read."""
    assert res.wchar == res.bytes
    assert res.rchar >= res.read_bytes


def test_pages_tx_writes_what_the_store_writes(tmp_path: str) -> None:
    from benchmarks.floor.stores import pages_args, tx_journal_bytes
    from engine.pages import PageStore

    pages, cycle, count = 3, 6, 4
    store = PageStore.open(os.path.join(tmp_path, "s.db"), page_size=4096)
    with store.transaction() as tx:
        ids = [tx.allocate() for _ in range(cycle)]
    store.checkpoint()
    blobs = [os.urandom(4096) for _ in range(count * pages)]  # every write changes its page
    before = _wchar()
    for n in range(count):
        with store.transaction() as tx:
            for i in range(pages):
                tx.write(ids[(n * pages + i) % cycle], 0, blobs[n * pages + i])
    store.checkpoint()
    engine_bytes = _wchar() - before
    store.close()
    res = floor.run("pages_tx", pages_args(str(tmp_path), pages, cycle, count, 0, final=True))
    _check(res)
    tx_bytes = tx_journal_bytes(pages)
    assert tx_bytes == 25 + pages * (17 + 2 * 4096) + 21
    # journal header + transactions, then the checkpoint: store header twice, the
    # dirty pages and their sums, one flag byte per transaction, header + wipe.
    expected = 20 + count * tx_bytes + 40 + cycle * 4096 + cycle * 4 + 40 + count + 50
    assert res.bytes == expected == engine_bytes
    assert res.syncs == count + 3 and res.ops == count


def test_pages_tx_checkpoints_as_the_store_policy_says(tmp_path: str) -> None:
    from benchmarks.floor.stores import pages_args

    # One-page transactions: a checkpoint every 4 MiB of journal (508 of 8,255 bytes).
    res = floor.run("pages_tx", pages_args(str(tmp_path), 1, 1, 1100, 0, final=False))
    _check(res)
    assert res.extra["checkpoints"] == 2
    # A continued run picks up the journal where the last one left it.
    more = floor.run("pages_tx", pages_args(str(tmp_path), 1, 1, 20, 0, final=False, start_tx=1100))
    assert more.extra["next_tx"] == 1120 and more.extra["checkpoints"] == 0


def _journal_bytes(directory: str, stem: str) -> int:
    """Bytes of the queue's writer files ``<stem>.<number>`` in ``directory``."""
    return sum(
        os.path.getsize(os.path.join(directory, f))
        for f in os.listdir(directory)
        if f.startswith(stem + ".") and f[len(stem) + 1 :].isdigit()
    )


def test_queue_put_and_get_write_and_read_what_the_queue_does(tmp_path: str) -> None:
    from benchmarks.floor.stores import queue_get_args, queue_put_args
    from engine.queue import Queue

    n, item = 40, os.urandom(4096)
    edir = os.path.join(tmp_path, "engine")
    q = Queue.open(edir, "q", sync=60.0)  # no periodic sync within the test
    q.reader().close()
    for _ in range(n):
        q.put(item)
    q.close()
    fdir = os.path.join(tmp_path, "floor")
    os.makedirs(fdir)
    put = floor.run("queue_put", queue_put_args(os.path.join(fdir, "q"), len(item), n))
    _check(put)
    record = 25 + 4096
    flushes = -(-n * record // (64 * 1024 // record * record + record))  # 64 KiB writes, each with a CHECK
    assert put.bytes == n * record + 9 * flushes
    # The same journal, byte for byte in size: header, records, one CHECK per write.
    assert _journal_bytes(fdir, "q") == _journal_bytes(edir, "q") == 13 + put.bytes
    size = _journal_bytes(fdir, "q")
    got = floor.run("queue_get", queue_get_args(os.path.join(fdir, "q"), cold=True))
    _check(got)
    assert got.read_bytes == size
    assert got.bytes == 36 * got.extra["checkpoints"]  # the reader file, rewritten whole each time


def test_applog_append_writes_what_the_log_does(tmp_path: str) -> None:
    from benchmarks.floor.stores import applog_args
    from engine.applog import AppendLog

    batch = [os.urandom(4096)] * 10
    log = AppendLog.open(os.path.join(tmp_path, "log"), sync=60.0)
    before = _wchar()
    for _ in range(3):
        log.append_many(batch)
    log.close()
    engine_bytes = _wchar() - before
    base = os.path.join(tmp_path, "f")
    res = floor.run("applog_append", applog_args(base, 4096, 10, 3, period_ms=60_000))
    _check(res)
    assert res.bytes == 30 * (16 + 4096 + 4 + 24) == engine_bytes
    assert res.syncs == 3  # close: one fdatasync per file
    assert os.path.getsize(base + ".log") == 16 + 30 * (16 + 4096)


def test_streams_write_writes_what_the_journal_does(tmp_path: str) -> None:
    from benchmarks.streams import _floor
    from engine.streams import StreamJournal

    size, streams, records = 8 << 20, 2, 4
    path = os.path.join(tmp_path, "e.jd")
    journal = StreamJournal.open(path, size=size)
    chunk = os.urandom(8192)
    before = _wchar()

    def run() -> None:  # one client thread, as the floor's
        for i in range(streams):
            with journal.open_stream(f"bench-0-{i}") as s:
                for _ in range(records):
                    s.write(chunk)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    engine_bytes = _wchar() - before
    journal.close()
    row = _floor(str(tmp_path), 1, streams, records * 8192, 8192, size)
    assert row.extra["bytes"] == engine_bytes
    assert row.extra["fsyncs_per_stream"] == 1.0
