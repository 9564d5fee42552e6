"""Everyday use of the append log (issue 18): time arguments in the shared
conventions (durations and instants; exact ``_ns`` spellings), ``serializer=``,
the Python protocols (``len``, ``[i]``, ``in``, iteration, ``with``), closing a
log left open, ``stats()``, and the CLI's ``--json`` and time arguments."""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap
import warnings

import pytest

from engine.applog import AppendLog, LogReader, Record
from engine.cli import main
from engine.errors import ConfigError

UTC = dt.UTC
T0 = 1_764_000_000  # 2025-11-24 16:00:00 UTC, in seconds


@pytest.fixture
def path(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "log")


# -- TTL ---------------------------------------------------------------------------------


def test_ttl_is_seconds_or_a_timedelta_and_ttl_ns_is_exact(tmp_path: pathlib.Path) -> None:
    with AppendLog.open(tmp_path / "a", ttl=3600) as log:
        assert log.ttl_ns == 3600 * 10**9
    with AppendLog.open(tmp_path / "b", ttl=0.25) as log:
        assert log.ttl_ns == 250_000_000
    with AppendLog.open(tmp_path / "c", ttl=dt.timedelta(days=7)) as log:
        assert log.ttl_ns == 7 * 86400 * 10**9
    with AppendLog.open(tmp_path / "d", ttl_ns=1234) as log:
        assert log.ttl_ns == 1234
        assert [s.ttl_ns for s in log.segments()] == [1234]
    with AppendLog.open(tmp_path / "e", ttl=0) as log:
        assert log.ttl_ns == 0  # never expires


def test_ttl_misuse_is_an_error_that_says_what_to_do(path: str) -> None:
    with pytest.raises(TypeError, match=r"ttl .* or ttl_ns .*not both"):
        AppendLog.open(path, ttl=1, ttl_ns=1)
    with pytest.raises(ConfigError, match=r"ttl=3600000000000 is .* years in seconds.*ttl_ns=3600000000000"):
        AppendLog.open(path, ttl=3600 * 10**9)  # the nanosecond TTL of older engines
    with pytest.raises(ConfigError, match="ttl must be >= 0 seconds"):
        AppendLog.open(path, ttl=-1)
    with pytest.raises(TypeError, match=r"ttl must be a number of seconds or a datetime.timedelta, not str"):
        AppendLog.open(path, ttl="1h")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ttl_ns must be an int of nanoseconds, not float"):
        AppendLog.open(path, ttl_ns=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="ttl must be under"):
        AppendLog.open(path, ttl=dt.timedelta(days=400 * 366))
    assert not os.path.exists(path)  # every argument checked before anything is created


def test_sync_period_takes_a_timedelta(path: str) -> None:
    with AppendLog.open(path, sync=dt.timedelta(milliseconds=50)) as log:
        assert log.sync_policy.mode == "periodic" and log.sync_policy.period == 0.05
    with pytest.raises(ConfigError, match="sync must be > 0 seconds"):
        AppendLog.open(path, sync=dt.timedelta(0))


# -- instants -------------------------------------------------------------------------------


def _fill(log: AppendLog) -> None:
    """Records 0..9 at T0 + k seconds."""
    for k in range(10):
        log.append(b"r%d" % k, time_ns=(T0 + k) * 10**9)


def test_between_and_index_at_time_take_datetimes_or_seconds(path: str) -> None:
    with AppendLog.open(path) as log:
        _fill(log)
        start = dt.datetime.fromtimestamp(T0 + 2, UTC)
        end = dt.datetime.fromtimestamp(T0 + 5, UTC)
        assert [r.index for r in log.between(start, end)] == [2, 3, 4]
        assert [r.index for r in log.between(T0 + 2, T0 + 4.5)] == [2, 3, 4]
        assert [r.index for r in log.between(start_ns=(T0 + 2) * 10**9, end_ns=(T0 + 4) * 10**9)] == [2, 3]
        assert [r.index for r in log.between(T0 + 8)] == [8, 9]  # no end: up to the newest
        assert [r.index for r in log.between(end=T0 + 1)] == [0]  # no start: from the oldest
        assert len(list(log.between())) == 10
        assert log.index_at_time(start) == 2
        assert log.index_at_time(T0 + 2.5) == 3
        assert log.index_at_time(time_ns=(T0 + 3) * 10**9) == 3
        assert log.index_at_time(T0 + 100) == log.next_index


def test_instant_misuse_names_the_argument(path: str) -> None:
    with AppendLog.open(path) as log:
        _fill(log)
        with pytest.raises(ConfigError, match=r"start=1764000000000000000 is past the year 9999.*start_ns="):
            list(log.between(T0 * 10**9, (T0 + 5) * 10**9))  # nanoseconds where seconds belong
        with pytest.raises(TypeError, match=r"give start .* or start_ns, not both"):
            list(log.between(T0, start_ns=T0))
        with pytest.raises(TypeError, match=r"end is an instant .*not a timedelta"):
            list(log.between(T0, dt.timedelta(seconds=5)))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="end_ns must be an int of nanoseconds since the epoch, not float"):
            list(log.between(end_ns=1.5))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"index_at_time\(\) needs time"):
            log.index_at_time()
        with pytest.raises(ConfigError, match=r"now=.*now_ns="):
            log.expire(now=time_ns_now())
        with pytest.raises(TypeError, match="time_ns must be an int of nanoseconds since the epoch"):
            log.append(b"x", time_ns=T0 + 20.0)  # type: ignore[arg-type]


def time_ns_now() -> int:
    import time

    return time.time_ns()


def test_expire_takes_a_datetime_or_seconds(path: str) -> None:
    with AppendLog.open(path, ttl=10, segment_bytes=16 + 2 * 18) as log:  # two records per segment
        _fill(log)
        assert log.expire(now=T0 + 11) == 0  # segment [0, 2): newest T0 + 1, expires after T0 + 11
        assert log.expire(now=dt.datetime.fromtimestamp(T0 + 11.5, UTC)) == 2
        assert log.expire(now_ns=(T0 + 13) * 10**9 + 1) == 2
        assert log.first_index == 4
        with pytest.raises(TypeError, match=r"give now .* or now_ns, not both"):
            log.expire(now=T0, now_ns=T0)


def test_records_have_an_aware_utc_time(path: str) -> None:
    with AppendLog.open(path) as log:
        i = log.append(b"x", time_ns=T0 * 10**9 + 123_456_789)
        rec = log[i]
        assert rec.time_ns == T0 * 10**9 + 123_456_789
        assert rec.time == dt.datetime(2025, 11, 24, 16, 0, 0, 123456, tzinfo=UTC)
        assert rec.time.tzinfo is UTC
        assert rec.value == rec.data == b"x"


def test_follow_takes_timedeltas(path: str) -> None:
    with AppendLog.open(path) as log:
        log.append(b"a")
        got = list(log.follow(0, poll=dt.timedelta(milliseconds=5), timeout=dt.timedelta(milliseconds=20)))
        assert [r.data for r in got] == [b"a"]
        with pytest.raises(ConfigError, match="poll must be > 0 seconds"):
            log.follow(poll=0)
        with pytest.raises(TypeError, match="timeout must be a number of seconds"):
            log.follow(timeout="1s")  # type: ignore[arg-type]


# -- serializers and payloads ------------------------------------------------------------


@pytest.mark.parametrize("serializer", ["json", "pickle", (lambda o: json.dumps(o).encode(), json.loads)])
def test_serializer_round_trips_values(path: str, serializer: object) -> None:
    values = [{"user": 7, "page": "/cart"}, [1, 2, 3], "text", None]
    with AppendLog.open(path, serializer=serializer) as log:
        first = log.append(values[0])
        log.append_many(values[1:], flags=2)
        assert log[first].value == values[0]
        assert isinstance(log[first].data, bytes)
        assert [r.value for r in log] == values
        assert [r.value for r in log.scan(1, 3)] == values[1:3]
        assert [r.value for r in log.between()] == values
        assert [r.value for r in log.follow(0, timeout=0)] == values
        assert [r.flags for r in log] == [0, 2, 2, 2]
    with LogReader.open(path, serializer=serializer) as reader:
        assert [r.value for r in reader] == values
        assert reader[first].value == values[0]
    with LogReader.open(path) as reader:  # without one: the stored bytes
        assert reader[first].value == reader[first].data
    rec = LogReader.open(path, serializer="json")
    try:
        record = rec[0]
    finally:
        rec.close()
    assert type(pickle.loads(pickle.dumps(record))) is Record  # pickles as a plain Record
    assert repr(record).startswith("Record(index=0,")


def test_pickle_serializer_stores_bytes_values_too(path: str) -> None:
    with AppendLog.open(path, serializer="pickle") as log:
        i = log.append(b"raw bytes are a value like any other")
        assert log[i].value == b"raw bytes are a value like any other"
        assert log[i].data != log[i].value


def test_bad_serializer_is_refused(path: str) -> None:
    with pytest.raises(ConfigError, match="serializer must be one of"):
        AppendLog.open(path, serializer="yaml")
    with pytest.raises(ConfigError, match="serializer must be one of"):
        LogReader.open(path, serializer="yaml")


def test_a_str_is_a_type_error_that_says_so(path: str) -> None:
    with AppendLog.open(path) as log:
        with pytest.raises(TypeError, match=r"data must be bytes, not str: encode it \(data.encode\(\)\)"):
            log.append("hello")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="data must be bytes, not int"):
            log.append(5)  # type: ignore[arg-type]  # (bytes(5) would be five zero bytes)
        with pytest.raises(TypeError, match="item 1 must be bytes, not str"):
            log.append_many([b"a", "b"])
        with pytest.raises(TypeError, match="the data of item 0 must be bytes, not str"):
            log.append_many([("a", 0)])
        assert len(log) == 0  # nothing appended
        assert log[log.append(bytearray(b"ba"))].data == b"ba"
        assert log[log.append(memoryview(b"mv"))].data == b"mv"
        assert [r.data for r in log] == [b"ba", b"mv"]


# -- protocols -----------------------------------------------------------------------------


def test_len_getitem_contains_iter(path: str) -> None:
    with AppendLog.open(path, ttl_ns=1, segment_bytes=16 + 2 * 18) as log:
        assert len(log) == 0 and list(log) == [] and 0 not in log
        with pytest.raises(IndexError, match="record 0 does not exist yet: the log is empty"):
            log[0]
        _fill(log)
        assert len(log) == 10
        assert log[3].data == b"r3" and log[3] == log.get(3)
        assert 0 in log and 9 in log and 10 not in log and -1 not in log and "3" not in log
        assert [r.index for r in log] == list(range(10))
        log.expire(now_ns=(T0 + 4) * 10**9)  # segments [0, 2), [2, 4) go
        assert log.first_index == 4 and 3 not in log and 4 in log
        gone = r"record 3 is no longer in the log: expired or truncated \(the oldest kept is 4\)"
        with pytest.raises(IndexError, match=gone):
            log[3]
        with pytest.raises(IndexError, match="record 12 does not exist yet: the newest record is 9"):
            log[12]
        with pytest.raises(IndexError, match="record -1 does not exist: record indexes start at 0"):
            log[-1]
        with pytest.raises(TypeError, match="not a slice: use scan"):
            log[1:3]  # type: ignore[index]
        with pytest.raises(TypeError, match="record indexes are ints, not str"):
            log["3"]  # type: ignore[index]
        seen = []
        for rec in log:  # appending while iterating: the records kept when it started
            seen.append(rec.index)
            log.append(b"more")
        assert seen == list(range(4, 10))
        with LogReader.open(path) as reader:
            assert len(reader) == len(log) and reader[5] == log[5] and 4 in reader and 3 not in reader
            assert [r.index for r in reader] == list(range(4, log.next_index))
            with pytest.raises(IndexError, match="no longer in the log"):
                reader[3]


def test_stats_is_a_dict_of_numbers(path: str) -> None:
    with AppendLog.open(path, ttl=60, segment_bytes=16 + 2 * 18) as log:
        empty = log.stats()
        assert empty["records"] == 0 and empty["first_time_ns"] is None and empty["last_time_ns"] is None
        _fill(log)
        stats = log.stats()
        with LogReader.open(path) as reader:
            assert reader.stats() == stats
    assert stats == {
        "directory": path,
        "first_index": 0,
        "next_index": 10,
        "records": 10,
        "segment_count": 5,
        "log_bytes": 5 * (16 + 2 * 18),
        "first_time_ns": T0 * 10**9,
        "last_time_ns": (T0 + 9) * 10**9,
        "ttl_ns": 60 * 10**9,
    }


# -- closing what was left open ---------------------------------------------------------------


def _abandon(path: str, **options: object) -> None:
    log = AppendLog.open(path, **options)  # type: ignore[arg-type]
    log.append(b"left open")


@pytest.mark.parametrize("sync", ["always", "never", 0.05])
def test_an_unclosed_log_is_closed_when_collected(path: str, sync: object) -> None:
    with pytest.warns(ResourceWarning, match=f"unclosed append log '{path}'"):
        _abandon(path, sync=sync, buffer_bytes=1 << 20)
        gc.collect()
    with AppendLog.open(path) as log:  # the lock was released, the buffer written, nothing to repair
        assert not log.recovery.repaired
        assert [r.data for r in log] == [b"left open"]


def test_a_closed_log_warns_nothing(path: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        log = AppendLog.open(path)
        log.close()
        log.close()
        del log
        with LogReader.open(path) as reader:
            len(reader)
        del reader
        gc.collect()


def test_an_unclosed_reader_is_closed_when_collected(path: str) -> None:
    AppendLog.open(path).close()
    reader = LogReader.open(path)
    with pytest.warns(ResourceWarning, match="unclosed append log reader"):
        del reader
        gc.collect()


def test_left_open_at_exit_is_closed_cleanly(path: str) -> None:
    script = textwrap.dedent(
        f"""
        from engine.applog import AppendLog
        log = AppendLog.open({path!r}, sync="never", buffer_bytes=1 << 20)
        log.append(b"unclosed at exit")
        """
    )
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", script],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ResourceWarning: unclosed append log" in out.stderr
    with AppendLog.open(path) as log:
        assert not log.recovery.repaired
        assert [r.data for r in log] == [b"unclosed at exit"]


# -- the command line ------------------------------------------------------------------------


@pytest.fixture
def filled(path: str) -> str:
    with AppendLog.open(path, ttl=dt.timedelta(hours=1), segment_bytes=16 + 4 * 18) as log:
        _fill(log)
        log.append(b"\xff\x00", flags=3, time_ns=(T0 + 10) * 10**9)
    return path


def _json_lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def test_cli_json_reports(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", "stats", filled, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert {k: stats[k] for k in ("first_index", "next_index", "records", "segment_count", "ttl_ns")} == {
        "first_index": 0, "next_index": 11, "records": 11, "segment_count": 3, "ttl_ns": 3600 * 10**9,
    }
    assert stats["first_time_ns"] == T0 * 10**9 and stats["last_time_ns"] == (T0 + 10) * 10**9
    assert [s["first_index"] for s in stats["segments"]] == [0, 4, 8]
    assert set(stats["segments"][0]) == {
        "first_index", "next_index", "records", "first_time_ns", "last_time_ns", "ttl_ns", "log_bytes", "log_path",
    }
    assert main(["log", "get", filled, "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "index": 10, "time_ns": (T0 + 10) * 10**9, "flags": 3, "data": None, "data_hex": "ff00",
    }
    assert main(["log", "tail", filled, "-n", "2", "--json"]) == 0
    assert [(r["index"], r["data"]) for r in _json_lines(capsys.readouterr().out)] == [(9, "r9"), (10, None)]
    assert main(["log", "between", filled, "2025-11-24T16:00:02", "2025-11-24T16:00:04Z", "--json"]) == 0
    assert [r["index"] for r in _json_lines(capsys.readouterr().out)] == [2, 3]
    assert main(["log", "expire", filled, "--now", "2025-11-24T17:00:04", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "expired_records": 4, "first_index": 4, "next_index": 11, "recovered": None,
    }


def test_cli_text_is_human(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", "stats", filled]) == 0
    out = capsys.readouterr().out
    assert "11 records, indexes [0, 11), 3 segments" in out and "TTL 1 h" in out
    assert "2025-11-24 16:00:00.000000 UTC .. 2025-11-24 16:00:10.000000 UTC" in out and " B" in out
    assert main(["log", "get", filled, "10"]) == 0
    assert capsys.readouterr().out == "10\t2025-11-24 16:00:10.000000 UTC\tflags=0x3\t0xff00\n"
    for start, end in [(str(T0 + 2), str(T0 + 4)), (f"{(T0 + 2) * 10**9}ns", f"{(T0 + 4) * 1000}ms"),
                       ("2025-11-24 16:00:02", "2025-11-24T18:00:04+02:00")]:
        assert main(["log", "between", filled, start, end]) == 0
        assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == ["2", "3"]


def test_cli_errors_are_one_line(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", "get", filled, "11"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "record 11 does not exist yet" in err
    assert main(["log", "expire", filled, "--now", "2025-11-24T17:00:04"]) == 0
    capsys.readouterr()
    assert main(["log", "get", filled, "0", "--json"]) == 1
    assert "record 0 is no longer in the log" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["log", "between", filled, "yesterday", "now"])
    assert exc.value.code == 2
    assert "START: 'yesterday' is not a time" in capsys.readouterr().err
    assert main(["log", "stats", filled + "-missing"]) == 1
    assert "no such append log directory" in capsys.readouterr().err
