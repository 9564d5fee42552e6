"""Unit tests of AppendLog and LogReader on the real file system."""

from __future__ import annotations

import datetime
import os
import threading

import pytest

import engine
from engine.applog import AppendLog, LogReader, Record
from engine.applog.codec import segment_name
from engine.errors import ClosedError, ConfigError, LockedError


@pytest.fixture
def logdir(tmp_path: os.PathLike[str]) -> str:
    return os.path.join(str(tmp_path), "log")


def test_engine_exports_appendlog() -> None:
    assert engine.AppendLog is AppendLog


def test_append_get_and_reopen(logdir: str) -> None:
    with AppendLog.open(logdir) as log:
        assert (log.first_index, log.next_index) == (0, 0)
        assert log.append(b"a", flags=3, time_ns=10) == 0
        assert log.append(b"bb", time_ns=10) == 1
        assert log.append(b"", time_ns=11) == 2
        assert log.get(0) == Record(0, 10, 3, b"a")
        assert log.get(2) == Record(2, 11, 0, b"")
        with pytest.raises(IndexError):
            log.get(3)
    with AppendLog.open(logdir) as log:
        assert not log.recovery.repaired
        assert [r.data for r in log.scan()] == [b"a", b"bb", b""]
        assert log.append(b"c") == 3
        assert log.get(3).time_ns >= 11
        assert log.verify() == []
    names = sorted(os.listdir(logdir))
    assert names == [".lock", segment_name(0, ".crc"), segment_name(0, ".idx"), segment_name(0, ".log")]


def test_times_never_go_backwards(logdir: str) -> None:
    with AppendLog.open(logdir) as log:
        log.append(b"x", time_ns=1_000)
        with pytest.raises(ConfigError, match="never go backwards"):
            log.append(b"y", time_ns=999)
        assert log.append(b"y", time_ns=1_000) == 1
        # the default clock is never earlier than the newest record
        log.append(b"future", time_ns=2**62)
        assert log.get(log.append(b"now")).time_ns == 2**62
    with AppendLog.open(logdir) as log:  # the rule survives a reopen
        with pytest.raises(ConfigError):
            log.append(b"z", time_ns=5)


def test_bad_arguments(logdir: str) -> None:
    with pytest.raises(ConfigError):
        AppendLog.open(logdir, segment_bytes=8)
    with pytest.raises(ConfigError):
        AppendLog.open(logdir, sync="sometimes")
    with AppendLog.open(logdir) as log:
        with pytest.raises(ConfigError):
            log.append(b"x", flags=-1)
        with pytest.raises(ConfigError):
            log.append(b"x", flags=1 << 32)
        with pytest.raises(ConfigError):
            log.truncate_before(5)


def test_rotation_names_segments_by_first_index(logdir: str) -> None:
    with AppendLog.open(logdir, segment_bytes=16 + 3 * 26) as log:  # 3 records of 10 bytes each
        for k in range(10):
            log.append(b"%010d" % k, time_ns=100 + k)
        segs = log.segments()
        assert [(s.first_index, s.next_index) for s in segs] == [(0, 3), (3, 6), (6, 9), (9, 10)]
        assert all(os.path.getsize(s.log_path) <= 16 + 3 * 26 for s in segs)
        assert [log.get(k).data for k in range(10)] == [b"%010d" % k for k in range(10)]
        log.verify()
    # a record larger than a segment gets a segment of its own
    with AppendLog.open(logdir, segment_bytes=16 + 3 * 26) as log:
        big = log.append(b"x" * 500)
        after = log.append(b"y")
        assert [s.first_index for s in log.segments()][-2:] == [big, after]
        log.verify()


def test_between_and_index_at_time(logdir: str) -> None:
    with AppendLog.open(logdir, segment_bytes=60) as log:
        times = [5, 5, 8, 13, 13, 13, 20, 21, 40, 40]
        for k, t in enumerate(times):
            log.append(b"%d" % k, time_ns=t)
        assert len(log.segments()) > 2
        for t0 in range(0, 45):
            want = next((k for k, t in enumerate(times) if t >= t0), len(times))
            assert log.index_at_time(time_ns=t0) == want
            for t1 in (t0, t0 + 1, t0 + 10, 100):
                got = [r.index for r in log.between(start_ns=t0, end_ns=t1)]
                assert got == [k for k, t in enumerate(times) if t0 <= t < t1]


def test_scan_ranges_and_chunks(logdir: str) -> None:
    with AppendLog.open(logdir, segment_bytes=4096, sync="never") as log:
        log.append_many(b"%d" % k for k in range(10_000))
        assert len(log.segments()) > 10
        assert [r.index for r in log.scan(9_990)] == list(range(9_990, 10_000))
        assert [r.data for r in log.scan(4_095, 4_099)] == [b"4095", b"4096", b"4097", b"4098"]
        assert sum(1 for _ in log.scan()) == 10_000
        assert list(log.scan(20_000)) == []


def test_append_many_forms(logdir: str) -> None:
    with AppendLog.open(logdir) as log:
        r = log.append_many([b"a", b"b"], flags=2, time_ns=7)
        assert r == range(0, 2)
        r2 = log.append_many([(b"c", 1), (b"d", 5, 2**62)])
        assert r2 == range(2, 4)
        got = list(log.scan())
        assert [(x.flags, x.time_ns) for x in got[:2]] == [(2, 7), (2, 7)]
        assert got[3] == Record(3, 2**62, 5, b"d") and got[2].flags == 1 and got[2].time_ns >= 7
        assert log.append_many([]) == range(4, 4)


def test_expire_deletes_whole_segments_by_header_ttl(logdir: str) -> None:
    with AppendLog.open(logdir, ttl_ns=100, segment_bytes=16 + 2 * 17) as log:
        for k in range(7):  # segments [0,2) [2,4) [4,6) [6,7), times 1000..1006
            log.append(b"x", time_ns=1000 + k)
        assert log.expire(now_ns=1100) == 0  # 1100 > 1001 + 100 is false
        assert log.expire(now_ns=1102) == 2  # segment [0,2) newest time 1001
        assert log.first_index == 2
        assert not os.path.exists(os.path.join(logdir, segment_name(0, ".log")))
        with pytest.raises(IndexError):
            log.get(1)
        assert log.expire(now_ns=1106) == 4  # [2,4) and [4,6); [6,7) has 1006 + 100 = 1106
        assert [s.first_index for s in log.segments()] == [6]
        # the newest segment too: an empty segment keeps the numbering
        assert log.expire(now_ns=10_000) == 1
        assert [s.first_index for s in log.segments()] == [7]
        assert (log.first_index, log.next_index) == (7, 7)
        assert log.append(b"again", time_ns=20_000) == 7
        log.verify()
    with AppendLog.open(logdir) as log:
        assert (log.first_index, log.next_index, log.ttl_ns) == (7, 8, 100)


def test_buffered_records_count_for_expiry_and_reads(logdir: str) -> None:
    """Records still in the writer's buffer (not yet in the files) are the
    log's all the same: reads see them, and expiry judges the active segment by
    its newest record, buffered or not."""
    with AppendLog.open(logdir, ttl_ns=100, sync="never", buffer_bytes=1 << 20, segment_bytes=16 + 3 * 17) as log:
        for k in range(4):  # segments [0,3) [3,4): the roll flushes the first
            log.append(b"x", time_ns=1000 + k)
        assert log.next_index == 4 and log.get(3) == Record(3, 1003, 0, b"x")
        assert log.append(b"y", time_ns=1050) == 4  # buffered
        assert log.expire(now_ns=1103) == 3  # [0,3): newest 1002
        assert log.expire(now_ns=1149) == 0  # [3,5): newest 1050, in the buffer until now
        assert log.expire(now_ns=1151) == 2
        assert (log.first_index, log.next_index) == (5, 5)
        log.verify()


def test_no_ttl_never_expires(logdir: str) -> None:
    with AppendLog.open(logdir, segment_bytes=40) as log:
        for k in range(5):
            log.append(b"x", time_ns=k)
        assert log.expire(now_ns=2**62) == 0
        assert log.first_index == 0


def test_ttl_as_timedelta_and_change_applies_to_new_segments(logdir: str) -> None:
    with AppendLog.open(logdir, ttl=datetime.timedelta(seconds=2), segment_bytes=40) as log:
        assert log.ttl_ns == 2_000_000_000
        log.append(b"x", time_ns=0)
    with AppendLog.open(logdir, ttl_ns=5, segment_bytes=40) as log:
        log.append(b"y", time_ns=1)  # rolls: new segment with TTL 5
        assert [s.ttl_ns for s in log.segments()] == [2_000_000_000, 5]


def test_truncate_before(logdir: str) -> None:
    with AppendLog.open(logdir, segment_bytes=16 + 2 * 17) as log:
        for k in range(7):
            log.append(b"x", time_ns=k)
        assert log.truncate_before(3) == 3
        assert log.first_index == 3
        assert [s.first_index for s in log.segments()] == [2, 4, 6]  # [2,4) straddles
        with pytest.raises(IndexError):
            log.get(2)
        assert [r.index for r in log.scan()] == [3, 4, 5, 6]
        assert log.index_at_time(time_ns=0) == 3
        assert log.truncate_before(2) == 0
    with AppendLog.open(logdir) as log:
        assert log.first_index == 3
        assert log.truncate_before(7) == 4
        assert (log.first_index, log.next_index) == (7, 7)
        assert log.append(b"z") == 7
        log.verify()
    with LogReader.open(logdir) as reader:
        assert reader.first_index == 7 and [r.index for r in reader.scan()] == [7]


def test_one_writer_many_readers(logdir: str) -> None:
    log = AppendLog.open(logdir)
    try:
        with pytest.raises(LockedError):
            AppendLog.open(logdir)
        log.append(b"one")
        r1, r2 = LogReader.open(logdir), LogReader.open(logdir)
        assert r1.get(0).data == r2.get(0).data == b"one"
        log.append(b"two")
        assert r1.get(1).data == b"two"  # a lookup past the known end re-reads
        r1.close()
        r2.close()
        with pytest.raises(ClosedError):
            r1.get(0)
    finally:
        log.close()
    with pytest.raises(ClosedError):
        log.append(b"x")
    AppendLog.open(logdir).close()  # the lock is released


def test_buffered_records_visible_to_reader_after_flush(logdir: str) -> None:
    with AppendLog.open(logdir, sync="never", buffer_bytes=1 << 20) as log, LogReader.open(logdir) as reader:
        log.append(b"buffered")
        assert reader.next_index == 0  # still in the writer's buffer
        assert log.get(0).data == b"buffered"  # the writer reads its own buffer
        log.flush()
        assert reader.next_index == 1 and reader.get(0).data == b"buffered"


@pytest.mark.parametrize("many", [False, True])
def test_the_buffer_is_written_out_when_it_fills(logdir: str, many: bool) -> None:
    """Records stay in the writer's buffer until their bytes reach buffer_bytes,
    then all of them reach the files (append and append_many alike, across a
    roll to a new segment too)."""
    rec = 16 + 10  # one record of 10 bytes, with its header
    with AppendLog.open(logdir, sync="never", buffer_bytes=3 * rec, segment_bytes=16 + 5 * rec) as log, \
            LogReader.open(logdir) as reader:
        seen = []
        for k in range(12):
            if many:
                log.append_many([b"%010d" % k])
            else:
                log.append(b"%010d" % k)
            reader.refresh()
            seen.append(reader.next_index)
        # Written out at 3 records (full); a segment holds 5, so the 6th record
        # rolls (records 4 and 5 written first) and starts the next buffer, full
        # again at 8; the 11th rolls again.
        assert seen == [0, 0, 3, 3, 3, 5, 5, 8, 8, 8, 10, 10]
        assert [r.data for r in reader.scan()] == [b"%010d" % k for k in range(10)]
        assert log.next_index == 12


def test_reader_never_sees_an_entry_without_its_record(logdir: str) -> None:
    with AppendLog.open(logdir, sync="never", buffer_bytes=0) as log:
        log.append(b"a", time_ns=1)
        log.append(b"b", time_ns=2)
    # simulate a writer that wrote the index entry of record 2 but not its record
    idx = os.path.join(logdir, segment_name(0, ".idx"))
    logf = os.path.join(logdir, segment_name(0, ".log"))
    size = os.path.getsize(logf)
    with open(idx, "ab") as out:
        out.write((3).to_bytes(8, "little") + (2).to_bytes(8, "little") + size.to_bytes(8, "little"))
    with LogReader.open(logdir) as reader:
        assert reader.next_index == 2
        notes = reader.verify()
        assert any("torn tail" in n for n in notes)
    with AppendLog.open(logdir) as log:
        assert log.recovery.total("dropped", "entries") == 1 and log.next_index == 2


def test_follow_in_process(logdir: str) -> None:
    with AppendLog.open(logdir, sync="never", buffer_bytes=0) as log:
        log.append(b"old")
        got: list[bytes] = []

        def consume() -> None:
            with LogReader.open(logdir) as reader:
                for rec in reader.follow(1, poll=0.005, timeout=5):
                    got.append(rec.data)
                    if len(got) == 3:
                        return

        t = threading.Thread(target=consume)
        t.start()
        for k in range(3):
            log.append(b"new%d" % k)
        t.join(10)
        assert got == [b"new0", b"new1", b"new2"]
        # timeout ends a follow that sees nothing new
        assert list(log.follow(timeout=0.01, poll=0.005)) == []


def test_group_commit_across_threads(logdir: str) -> None:
    with AppendLog.open(logdir, sync="always") as log:
        indexes: list[int] = []
        lock = threading.Lock()

        def work(k: int) -> None:
            for j in range(50):
                i = log.append(b"%d-%d" % (k, j))
                with lock:
                    indexes.append(i)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(indexes) == list(range(200))
        assert log._gc is not None and 0 < log._gc.syncs <= 200
        log.verify()


def test_periodic_sync_mode(logdir: str) -> None:
    with AppendLog.open(logdir, sync=0.01) as log:
        for k in range(100):
            log.append(b"%d" % k)
        log.sync()
        assert log.next_index == 100
    with AppendLog.open(logdir) as log:
        assert [r.data for r in log.scan(98)] == [b"98", b"99"]


def test_append_many_is_all_or_nothing_on_bad_items(logdir: str) -> None:
    with AppendLog.open(logdir) as log:
        log.append(b"a", time_ns=100)
        with pytest.raises(ConfigError):
            log.append_many([(b"b", 0, 200), (b"c", 0, 150)])
        with pytest.raises(ConfigError):
            log.append_many([(b"b", 0), (b"c", -1)])
        assert log.next_index == 1


def test_index_at_time_over_large_sealed_segments(logdir: str) -> None:
    import bisect
    import random

    rng = random.Random(5)
    times: list[int] = []
    t = 0
    for _ in range(2000):
        t += rng.choice([0, 0, 1, 3])  # many repeats, across block boundaries too
        times.append(t)
    with AppendLog.open(logdir, segment_bytes=16 + 700 * 17, sync="never") as log:
        log.append_many([(b"x", 0, tt) for tt in times])
        assert len(log.segments()) == 3
        log.flush()
        with LogReader.open(logdir) as reader:
            for t0 in range(-1, t + 2):
                want = bisect.bisect_left(times, t0)
                assert log.index_at_time(time_ns=t0) == want
                assert reader.index_at_time(time_ns=t0) == want


def test_get_across_many_segments_uses_a_bounded_index_cache(logdir: str) -> None:
    from engine.applog.view import INDEX_CACHE_SEGMENTS

    n_segs = INDEX_CACHE_SEGMENTS + 12
    with AppendLog.open(logdir, segment_bytes=16 + 50 * 22, sync="never") as log:
        log.append_many([b"%06d" % k for k in range(50 * n_segs)])  # segments of 50
        assert len(log.segments()) == n_segs
        for rnd in range(2):
            for k in range(0, 50 * n_segs, 3):
                assert log.get(k).data == b"%06d" % k, rnd
            assert len(log._index_cache) == INDEX_CACHE_SEGMENTS
        assert log.expire(now_ns=0) == 0
    with AppendLog.open(logdir, ttl_ns=1, segment_bytes=16 + 50 * 22) as log, LogReader.open(logdir) as reader:
        for k in range(0, 50 * n_segs, 13):
            assert reader.get(k).data == log.get(k).data == b"%06d" % k
        assert log.index_at_time(time_ns=0) == 0


def test_reader_alongside_a_live_writer_sees_only_whole_records(logdir: str) -> None:
    def payload(i: int) -> bytes:
        return (b"%d:" % i) * (1 + i % 50)

    log = AppendLog.open(logdir, sync="never", buffer_bytes=0, segment_bytes=16 + 40 * 200)
    done = threading.Event()

    def write() -> None:
        for i in range(3000):
            log.append(payload(i), time_ns=i)
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    seen = 0
    try:
        with LogReader.open(logdir) as reader:
            while not done.is_set() or seen < 3000:
                nxt = reader.next_index
                for rec in reader.scan(seen, nxt):
                    assert rec.data == payload(rec.index) and rec.time_ns == rec.index
                seen = nxt
                if done.is_set() and reader.next_index == seen == 3000:
                    break
            writer.join()
            assert reader.verify() == []  # the writer's files are whole and consistent
    finally:
        writer.join()
        log.close()
    assert seen == 3000


def test_expire_does_not_count_records_already_truncated(tmp_path: os.PathLike[str]) -> None:
    """expire() returns how far first_index moved: records hidden by an earlier
    truncate_before() are not counted again when their segment is deleted
    (found by test_applog_props: first_index 1 -> 2 was reported as 2 records)."""
    path = os.path.join(str(tmp_path), "log")
    with AppendLog.open(path, ttl_ns=60, segment_bytes=120, sync="never") as log:
        log.append(b"", time_ns=1000)
        log.append(b"", time_ns=1000)
        assert log.truncate_before(1) == 1
        assert log.expire(now_ns=1061) == 1
        assert log.first_index == log.next_index == 2


def test_a_second_writer_is_refused_naming_the_lock_file(logdir: str) -> None:
    from engine.errors import LockedError

    with AppendLog.open(logdir, sync="never") as log:
        log.append(b"x", time_ns=1)
        for wait in (0, 0.01):
            with pytest.raises(LockedError) as err:
                AppendLog.open(logdir, lock_wait=wait)
            assert err.value.path == logdir + "/.lock" and "writer lock" in str(err.value)
    with AppendLog.open(logdir, lock_wait=None) as again:  # free again once closed
        assert again.next_index == 1 and not again.recovery.repaired


def test_recovery_is_the_shared_report_logged_once(logdir: str, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from engine.fs import RecoveryReport

    with AppendLog.open(logdir) as log:
        for k in range(3):
            log.append(b"record-%d" % k, time_ns=10 + k)
    logf = os.path.join(logdir, segment_name(0, ".log"))
    with open(logf, "ab") as f:
        f.write(b"\x05\x00\x00\x00" + bytes(4))  # half a record header: a torn append
    os.unlink(os.path.join(logdir, segment_name(0, ".idx")))
    with caplog.at_level(logging.WARNING, logger="engine.applog"):
        with AppendLog.open(logdir) as log:
            rep = log.recovery
            assert isinstance(rep, RecoveryReport) and rep.repaired
            assert rep.total("cut", "bytes") == 8 and rep.total("rebuilt", "entries") == 3
            assert rep.total("cut", "records") == 1  # the torn append
            assert [a.kind for a in rep.actions] == ["cut", "cut", "rebuilt"]
            assert rep.to_dict()["repaired"] is True
    assert sum("recovered" in r.message for r in caplog.records) == 1
    with AppendLog.open(logdir) as log:
        assert not log.recovery.repaired and log.recovery.summary() == "clean"


def test_indexes_end_at_the_largest_i64_with_a_typed_error(logdir: str) -> None:
    from engine.applog.codec import INT64_MAX, LOG_MAGIC, encode_header

    base = INT64_MAX - 1
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, segment_name(base, ".log")), "wb") as f:
        f.write(encode_header(LOG_MAGIC, 0))  # a segment created just before a crash
    with AppendLog.open(logdir, sync="never") as log:
        assert log.append(b"last", time_ns=5) == base
        for attempt in (lambda: log.append(b"x"), lambda: log.append_many([b"x", b"y"])):
            with pytest.raises(ConfigError, match="index out of range"):
                attempt()
        assert log.next_index == INT64_MAX
    with AppendLog.open(logdir) as log:
        assert [r.data for r in log.scan(base)] == [b"last"] and log.verify() == []


def test_sync_always_returns_each_append_synced(logdir: str) -> None:
    """Under ``sync="always"`` the encoder reports back after every record (the
    store's write state asks it to), and ``append`` takes its group-commit ticket
    on that path: each append returns only after an fdatasync of the log that
    covers it, while the records stay buffered until then (one write per file a
    sync, not one per append)."""
    from engine.fs.osfs import OsFileSystem
    from stress.faults import FaultyFS, OpKind

    fs = FaultyFS(OsFileSystem())
    with AppendLog.open(logdir, sync="always", fs=fs) as log:
        for k in range(5):
            since = len(fs.log)
            assert log.append(b"x%d" % k) == k
            done = fs.log[since:]
            log_ops = [e.kind for e in done if e.path.endswith(".log")]
            assert log_ops == [OpKind.WRITE, OpKind.FSYNC], done
        assert log.append_many([b"a", b"b"]) == range(5, 7)
    with AppendLog.open(logdir) as log:
        assert [r.data for r in log.scan()] == [b"x0", b"x1", b"x2", b"x3", b"x4", b"a", b"b"]


def test_a_refused_append_says_why_and_appends_nothing(logdir: str) -> None:
    """``append`` hands the encoder what it is given; what the encoder refuses is
    explained: bytes-like data is taken as bytes, a str is a TypeError, bad
    flags a ConfigError, a closed log ClosedError (bytes-like data too), each
    with nothing appended."""
    log = AppendLog.open(logdir, sync="never")
    assert log.append(bytearray(b"ba")) == 0 and log.append(memoryview(b"mv"), 3) == 1
    with pytest.raises(TypeError, match="encode it"):
        log.append("text")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="flags must be a u32"):
        log.append(bytearray(b"x"), -1)
    assert log.next_index == 2 and [(r.data, r.flags) for r in log.scan()] == [(b"ba", 0), (b"mv", 3)]
    log.close()
    for data in (b"x", bytearray(b"x")):
        with pytest.raises(ClosedError):
            log.append(data)
    with pytest.raises(TypeError, match="encode it"):
        log.append("text")  # type: ignore[arg-type]
    with AppendLog.open(logdir) as again:
        assert again.next_index == 2
