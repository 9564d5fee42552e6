"""StreamJournal: writing, reading back, group commit, wrapping, recovery."""

from __future__ import annotations

import multiprocessing
import os
import threading
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streams_helpers import GatedFS

from engine.errors import ClosedError, ConfigError, FormatError, FullError, LockedError
from engine.fs import FileSystem, OpenMode, make_dirs
from engine.streams import StreamJournal, codec, read_events, read_streams
from stress.simfs import SimFS


def _streams(path: str, fs: FileSystem | None = None) -> dict[bytes, tuple[str, int, bytes]]:
    return {s.ident: (s.status, s.start_offset, s.data) for s in read_streams(path, fs)}


def test_write_close_read_back(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "j.jd")
    payloads = {
        b"empty": b"",
        b"one": b"x",
        b"full": os.urandom(8192),
        b"over": os.urandom(8193),
        b"big": os.urandom(50_000),
    }
    with StreamJournal.open(path, size=1 << 20) as journal:
        streams = {ident: journal.open_stream(ident) for ident in payloads}
        # Interleave the streams' writes in 1000-byte pieces.
        for start in range(0, 50_000, 1000):
            for ident, data in payloads.items():
                if start < len(data):
                    streams[ident].write(data[start : start + 1000])
        for s in streams.values():
            s.close()
        assert journal.verify() == []
    got = _streams(path)
    assert got == {ident: ("complete", 0, data) for ident, data in payloads.items()}
    events = list(read_events(path))
    by_stream: dict[int, list[str]] = {}
    for ev in events:
        by_stream.setdefault(ev.stream, []).append(ev.kind)
    number = {s.ident: s.number for s in streams.values()}
    assert by_stream[number[b"empty"]] == ["init", "end"]  # INFO + EOS only
    # A stream of exactly one record's worth ends with DATA|EOS of 8192 bytes.
    assert by_stream[number[b"full"]] == ["init", "append", "end"]
    assert by_stream[number[b"over"]] == ["init", "append", "append", "end"]
    assert by_stream[number[b"big"]] == ["init"] + ["append"] * 7 + ["end"]


def test_abort_is_never_complete(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "j.jd")
    with StreamJournal.open(path, size=1 << 20) as journal:
        small = journal.open_stream("small")
        small.write(b"abc")
        small.abort()  # nothing journaled yet: nothing written at all
        big = journal.open_stream("big")
        big.write(os.urandom(20_000))
        big.abort()
        with pytest.raises(ClosedError):
            big.write(b"more")
        ok = journal.open_stream("ok")
        ok.write(b"fine")
        ok.close()
        left = journal.open_stream("left")
        left.write(os.urandom(9000))
    # close() aborted "left", which had a record out already.
    got = _streams(path)
    assert got[b"big"][0] == "aborted" and got[b"left"][0] == "aborted"
    assert b"small" not in got
    assert got[b"ok"] == ("complete", 0, b"fine")


def test_context_manager_aborts_on_error(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "j.jd")
    with StreamJournal.open(path, size=1 << 20) as journal:
        with pytest.raises(RuntimeError):
            with journal.open_stream("x") as s:
                s.write(os.urandom(10_000))
                raise RuntimeError("boom")
        with journal.open_stream("y") as s:
            s.write(b"yes")
    assert _streams(path) == {b"x": ("aborted", 0, _streams(path)[b"x"][2]), b"y": ("complete", 0, b"yes")}


def test_group_commit_shares_one_fsync(tmp_path: object) -> None:
    """Deterministic: while the first close's fsync is held, seven more streams
    close; all seven are covered by one further fsync."""
    from engine.fs import default_fs

    gfs = GatedFS(default_fs())
    path = os.path.join(str(tmp_path), "j.jd")
    journal = StreamJournal.open(path, size=1 << 20, sync_delay=0, fs=gfs)
    streams = [journal.open_stream(f"s{i}") for i in range(8)]
    for i, s in enumerate(streams):
        s.write(bytes([i]) * 10_000)
    before = journal.fsyncs
    gfs.armed = True
    first = threading.Thread(target=streams[0].close)
    first.start()
    assert gfs.entered.wait(10)
    others = [threading.Thread(target=s.close) for s in streams[1:]]
    for t in others:
        t.start()
    while journal._gc._issued < 8:  # every close has queued its EOS and waits
        threading.Event().wait(0.001)
    gfs.gate.set()
    for t in [first, *others]:
        t.join(10)
    assert journal.fsyncs - before == 2
    assert all(s.state == "closed" for s in streams)
    journal.close()
    got = _streams(path)
    assert all(got[f"s{i}".encode()] == ("complete", 0, bytes([i]) * 10_000) for i in range(8))


def test_many_threads(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "j.jd")
    journal = StreamJournal.open(path, size=4 << 20)
    datas = {f"t{i}".encode(): os.urandom(30_000 + i) for i in range(12)}

    def work(ident: bytes) -> None:
        with journal.open_stream(ident) as s:
            data = datas[ident]
            for start in range(0, len(data), 4096):
                s.write(data[start : start + 4096])

    threads = [threading.Thread(target=work, args=(ident,)) for ident in datas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert journal.verify() == []
    journal.close()
    assert _streams(path) == {ident: ("complete", 0, data) for ident, data in datas.items()}


def _sim_journal(size_pages: int = 16, page: int = 512, record_size: int = 100) -> tuple[SimFS, StreamJournal]:
    sim = SimFS()
    make_dirs(sim, "/db")
    journal = StreamJournal.open("/db/j", size=size_pages * page, page_size=page, record_size=record_size, fs=sim)
    return sim, journal


def test_wrap_rewrites_header_and_info() -> None:
    sim, journal = _sim_journal(size_pages=8)
    across = journal.open_stream("across")
    across.write(b"A" * 250)  # two 100-byte records out, 50 buffered
    for i in range(12):
        with journal.open_stream(f"filler{i}") as s:
            s.write(bytes([i]) * 300)
    assert journal.wraps >= 1
    journal.sync()
    events = list(read_events("/db/j", sim))
    inits = [e for e in events if e.kind == "init" and e.ident == b"across"]
    # After the wrap the open stream's INFO comes again with its offset... once it writes.
    across.write(b"B" * 120)
    across.close()
    journal.verify()
    events = list(read_events("/db/j", sim))
    inits = [e for e in events if e.kind == "init" and e.ident == b"across"]
    assert len(inits) == 1 and inits[0].offset > 0
    got = {s.ident: s for s in read_streams("/db/j", sim)}
    data = b"A" * 250 + b"B" * 120
    assert got[b"across"].status == "complete"
    assert got[b"across"].data == data[got[b"across"].start_offset :]
    with sim.open("/db/j") as handle:
        header = codec.decode_file_header(handle.read_at(0, 32))
    assert header.first_global > 0
    assert events[0].global_record == header.first_global
    journal.close()


def test_reopen_recovers_and_continues() -> None:
    sim, journal = _sim_journal(size_pages=64)
    with journal.open_stream("a") as s:
        s.write(b"a" * 333)
    hanging = journal.open_stream("hanging")
    hanging.write(b"h" * 500)  # records out, never closed
    journal.sync()
    g = journal.next_global
    # The process dies: take what is durable and open it again.
    fs2 = sim.durable_image().fs()
    journal2 = StreamJournal.open("/db/j", fs=fs2, record_size=100)
    assert journal2.next_global == g + 1  # the ABORT written for "hanging"
    # Nothing was torn; the stream the dead writer left open was aborted.
    assert [(a.kind, a.count, a.unit) for a in journal2.recovery.actions] == [("undone", 1, "streams")]
    with journal2.open_stream("b") as s:
        assert s.number == hanging.number + 1
        s.write(b"b" * 10)
    journal2.verify()
    journal2.close()
    got = _streams("/db/j", fs2)
    assert got == {
        b"a": ("complete", 0, b"a" * 333),
        b"hanging": ("aborted", 0, b"h" * 400),
        b"b": ("complete", 0, b"b" * 10),
    }


def test_open_errors(tmp_path: object) -> None:
    base = str(tmp_path)
    with pytest.raises(ConfigError):
        StreamJournal.open(os.path.join(base, "a"))  # new journal without size
    with pytest.raises(ConfigError):
        StreamJournal.open(os.path.join(base, "b"), size=3 * 4096, page_size=4096)  # fewer than 4 pages
    with pytest.raises(FileNotFoundError):
        StreamJournal.open(os.path.join(base, "c"), create=False)
    foreign = os.path.join(base, "foreign")
    with open(foreign, "wb") as out:
        out.write(b"SQLite format 3\x00" + bytes(8000))
    with pytest.raises(FormatError):
        StreamJournal.open(foreign)
    path = os.path.join(base, "j")
    journal = StreamJournal.open(path, size=1 << 16)
    with pytest.raises(LockedError):
        StreamJournal.open(path)
    with pytest.raises(ConfigError):
        journal.open_stream(b"x" * 1025)
    journal.close()
    with pytest.raises(ClosedError):
        journal.open_stream("late")


def test_record_too_big_for_journal_is_full() -> None:
    _sim, journal = _sim_journal(size_pages=4, record_size=5000)
    s = journal.open_stream("huge")
    with pytest.raises(FullError):
        s.write(os.urandom(5001))


def test_empty_file_is_initialised() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    with sim.open("/db/j", OpenMode.CREATE):
        pass
    journal = StreamJournal.open("/db/j", size=8 * 512, page_size=512, fs=sim)
    with journal.open_stream("x") as s:
        s.write(b"1")
    journal.close()
    assert _streams("/db/j", sim) == {b"x": ("complete", 0, b"1")}


def test_reset_starts_over() -> None:
    sim, journal = _sim_journal()
    with journal.open_stream("old") as s:
        s.write(b"old")
    journal.close()
    journal = StreamJournal.open("/db/j", reset=True, page_size=512, fs=sim)
    with journal.open_stream("new") as s:
        s.write(b"new")
    journal.close()
    assert _streams("/db/j", sim) == {b"new": ("complete", 0, b"new")}


def test_record_header_straddling_a_page_boundary() -> None:
    """Regression (found by the property test below): records are contiguous in a
    transaction, so a record header can start 2 bytes before a page end.  The
    reader once took "fewer than 4 bytes left in the page" for the end of the
    transaction and reported the rest as torn."""
    sim, journal = _sim_journal(size_pages=256, record_size=64)
    streams = [journal.open_stream(f"s{i}".encode()) for i in range(3)]
    for stream, n in zip(streams, (193, 321, 193)):
        stream.write(b"\x03" * n)
    journal.sync()
    with sim.open("/db/j", OpenMode.READ) as handle:
        image = handle.read_at(0, 4096)
    # The 13th record's type word (DATA = 2, MSB first) starts at 1534, 2 bytes
    # before the page boundary at 1536: the layout this test is about.
    assert image[1534:1538] == bytes.fromhex("00000002")
    journal.verify()
    for stream in streams:
        stream.close()
    journal.close()
    sizes = (193, 321, 193)
    assert _streams("/db/j", sim) == {f"s{i}".encode(): ("complete", 0, b"\x03" * n) for i, n in enumerate(sizes)}


ops = st.lists(
    st.tuples(
        st.sampled_from(["open", "write", "write", "write", "close", "abort"]), st.integers(0, 5), st.integers(0, 400)
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, st.booleans())
def test_property_matches_model(program: list[tuple[str, int, int]], small: bool) -> None:
    """Random interleavings of several streams read back as the model says;
    with a small journal it wraps, and complete streams are then suffixes."""
    sim, journal = _sim_journal(size_pages=8 if small else 256, record_size=64)
    live: dict[int, tuple[object, bytearray]] = {}
    model: dict[bytes, tuple[str, bytes]] = {}
    counter = 0
    for op, slot, n in program:
        if op == "open" and slot not in live:
            ident = f"s{counter}".encode()
            counter += 1
            live[slot] = (journal.open_stream(ident), bytearray())
        elif slot in live:
            stream, data = live[slot]
            if op == "write":
                chunk = bytes([counter % 256]) * n
                stream.write(chunk)  # type: ignore[attr-defined]
                data += chunk
            elif op == "close":
                stream.close()  # type: ignore[attr-defined]
                model[stream.ident] = ("complete", bytes(data))  # type: ignore[attr-defined]
                del live[slot]
            elif op == "abort":
                stream.abort()  # type: ignore[attr-defined]
                model[stream.ident] = ("aborted", bytes(data))  # type: ignore[attr-defined]
                del live[slot]
    for stream, data in live.values():
        model[stream.ident] = ("aborted", bytes(data))  # type: ignore[attr-defined]
    journal.verify()
    journal.close()
    wrapped = journal.wraps > 0  # after close: the aborts of the streams left open may wrap too
    got = {s.ident: s for s in read_streams("/db/j", sim)}
    for ident, read in got.items():
        status, payload = model[ident]
        assert read.status == status
        if read.status == "complete":
            assert read.data == payload[read.start_offset :]
            assert wrapped or read.start_offset == 0
    if not wrapped:
        for ident, (status, payload) in model.items():
            if status == "complete":
                assert got[ident].data == payload and got[ident].status == "complete"


def test_preallocated_blank_file_is_initialised() -> None:
    """Like the original server: a file of zeros (made with dd) becomes the journal, size and all."""
    sim = SimFS()
    make_dirs(sim, "/db")
    with sim.open("/db/j", OpenMode.CREATE) as handle:
        handle.write_at(0, bytes(16 * 512))
    journal = StreamJournal.open("/db/j", page_size=512, fs=sim)
    assert journal.size == 16 * 512
    with journal.open_stream("x") as s:
        s.write(b"1")
    journal.close()
    assert _streams("/db/j", sim) == {b"x": ("complete", 0, b"1")}
    # A file with a non-blank, foreign header is never overwritten.
    with sim.open("/db/k", OpenMode.CREATE) as handle:
        handle.write_at(0, b"\x01" + bytes(4095))
    with pytest.raises(FormatError):
        StreamJournal.open("/db/k", size=8192, fs=sim)


def test_global_record_numbers_wrap_at_2_32() -> None:
    sim, journal = _sim_journal(size_pages=64)
    with journal._lock:  # start a lap just below 2**32, as a long-lived journal would
        journal._global = 2**32 - 3
        journal._wrap_locked()
    for i in range(3):
        with journal.open_stream(f"w{i}") as s:
            s.write(bytes([i]) * 150)
    journal.verify()
    journal.close()
    events = list(read_events("/db/j", sim))
    numbers = [e.global_record for e in events if e.kind in ("init", "append")]
    assert numbers[:4] == [2**32 - 3, 2**32 - 2, 2**32 - 1, 0]
    assert _streams("/db/j", sim) == {f"w{i}".encode(): ("complete", 0, bytes([i]) * 150) for i in range(3)}
    reopened = StreamJournal.open("/db/j", fs=sim, record_size=100)
    assert reopened.next_global == numbers[-1] + 1
    reopened.close()


def _race_to_create(path: str, start: Barrier, hold: Barrier, out: Any) -> None:
    """Child: create the journal when both are ready; report; keep it open until
    the other child has tried too."""
    start.wait()
    try:
        journal = StreamJournal.open(path, size=16 * 4096, page_size=4096)
    except LockedError as exc:
        out.put(("locked", exc.path))
        hold.wait()
        return
    except Exception as exc:  # reported to the parent, which fails the test
        out.put((type(exc).__name__, str(exc)))
        hold.wait()
        return
    out.put(("opened", None))
    hold.wait()
    with journal.open_stream("s") as stream:
        stream.write(b"x")
    journal.close()


def test_two_processes_racing_to_create_the_same_journal(tmp_path: object) -> None:
    """The writer lock (``<journal>.lock``) is taken before the journal is built:
    of two processes creating it at once, one does and the other gets LockedError
    naming the lock file (never FileExistsError, never a clobbered journal)."""
    ctx = multiprocessing.get_context("fork")
    for round_ in range(10):
        path = os.path.join(str(tmp_path), f"j{round_}")
        start, hold, out = ctx.Barrier(2), ctx.Barrier(2), ctx.Queue()
        children = [ctx.Process(target=_race_to_create, args=(path, start, hold, out)) for _ in range(2)]
        for child in children:
            child.start()
        results = sorted(out.get(timeout=60) for _ in children)
        for child in children:
            child.join(timeout=60)
            assert child.exitcode == 0
        assert results == [("locked", path + ".lock"), ("opened", None)]
        assert _streams(path) == {b"s": ("complete", 0, b"x")}
        assert sorted(os.listdir(os.path.dirname(path))) == sorted(
            n for r in range(round_ + 1) for n in (f"j{r}", f"j{r}.lock"))


def test_lock_file_and_recovery_report_of_a_clean_journal(tmp_path: object) -> None:
    """A new or cleanly closed journal reports no recovery; the lock is released
    on close (another writer may then open) and held while open (a second open,
    even in the same process, gets LockedError naming the lock file)."""
    path = os.path.join(str(tmp_path), "j")
    journal = StreamJournal.open(path, size=16 * 4096, page_size=4096)
    assert not journal.recovery.repaired and journal.recovery.summary() == "clean"
    # The shared report replaced the journal's own recovery attributes.
    assert not hasattr(journal, "recovered") and not hasattr(journal, "recovery_note")
    with pytest.raises(LockedError) as info:
        StreamJournal.open(path, create=False)
    assert info.value.path == path + ".lock"
    journal.close()
    with StreamJournal.open(path, create=False) as again:
        assert not again.recovery.repaired
        assert again.verify() == []


class _BigBlocks(SimFS):
    """A simulated file system whose block size is 8 KiB."""

    def block_size(self, path: str) -> int:
        return 8192


def test_default_page_size_is_the_file_systems_block_size() -> None:
    sim = _BigBlocks()
    make_dirs(sim, "/db")
    with StreamJournal.open("/db/j", size=8 * 8192, fs=sim) as journal:
        assert journal.page_size == 8192
    with StreamJournal.open("/db/j", fs=sim) as journal:  # an existing journal keeps its page size
        assert journal.page_size == 8192 and not journal.recovery.repaired
    plain = SimFS()
    make_dirs(plain, "/db")
    with StreamJournal.open("/db/j", size=8 * 4096, fs=plain) as journal:
        assert journal.page_size == 4096


def test_format_handler_reads_through_the_given_file_system() -> None:
    """The handler's callbacks take the file system first: a journal that exists
    only in the crash simulator is recognised, summarised and verified."""
    from engine.streams.handler import HANDLER

    sim, journal = _sim_journal()
    with journal.open_stream("a") as stream:
        stream.write(b"x" * 10)
    journal.close()
    with sim.open("/db/j") as handle:
        head = handle.read_at(0, 64)
    assert HANDLER.sniff(sim, "/db/j", head, False)
    assert not HANDLER.sniff(sim, "/db", b"", True)
    assert HANDLER.summarize(sim, "/db/j")["records"] == 2
    assert HANDLER.verify(sim, "/db/j") == []
