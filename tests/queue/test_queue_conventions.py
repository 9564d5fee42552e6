"""The queue's everyday-Python API: durations and instants, Item time accessors,
serializers, the bytes check, len / in / with, unclosed queues, stats names."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from engine.errors import ConfigError
from engine.fs import default_fs, make_dirs
from engine.queue import Queue
from engine.queue.diagnose import queue_stats
from stress.simfs import SimFS

UTC = dt.timezone.utc  # noqa: UP017
NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0}


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sim_queue(clock: Clock | None = None, **opts: object) -> Queue:
    sim = SimFS()
    make_dirs(sim, "/db")
    return Queue.open("/db", "q", fs=sim, clock=clock or Clock(), **{**NOCKPT, **opts})


def test_expire_at_takes_a_datetime_or_epoch_seconds_and_items_say_when() -> None:
    clock = Clock()
    q = sim_queue(clock)
    q.put(b"dated", expire_at=dt.datetime.fromtimestamp(clock.now + 60, UTC))
    q.put(b"seconds", expire_at=clock.now + 30)
    q.put_many([b"all"], expire_at=dt.datetime.fromtimestamp(clock.now + 10, UTC))
    q.put_many([(b"own", clock.now + 5)])
    r = q.reader()
    items = [r.get(0) for _ in range(4)]
    assert all(i is not None for i in items)
    first = items[0]
    assert first is not None
    assert first.add_time_ms == 1_700_000_000_000 and first.expire_time_ms == 1_700_000_060_000
    assert first.added_at == dt.datetime.fromtimestamp(1_700_000_000, UTC)
    assert first.expires_at == dt.datetime.fromtimestamp(1_700_000_060, UTC)
    assert first.add_timestamp == 1_700_000_000.0 and first.expire_timestamp == 1_700_000_060.0
    assert [i.expire_time_ms for i in items if i is not None][1:] == [
        1_700_000_030_000,
        1_700_000_010_000,
        1_700_000_005_000,
    ]
    q.put(b"forever")
    last = r.get(0)
    assert last is not None and last.expires_at is None and last.expire_timestamp is None
    with pytest.raises(TypeError, match="expire_at is an instant"):
        q.put(b"x", expire_at=dt.timedelta(minutes=1))  # type: ignore[arg-type]
    q.close()


def test_durations_take_timedeltas_and_messages_name_the_option() -> None:
    q = sim_queue(
        max_age=dt.timedelta(minutes=5),
        open_read_timeout=dt.timedelta(seconds=30),
        checkpoint_interval=dt.timedelta(seconds=2),
        sync=dt.timedelta(milliseconds=50),
    )
    cfg = q.config
    assert (cfg.max_age, cfg.open_read_timeout, cfg.checkpoint_interval, cfg.sync) == (300.0, 30.0, 2.0, 0.05)
    assert q.reader().get(timeout=dt.timedelta(0)) is None
    q.close()
    with pytest.raises(TypeError, match=r"max_age must be a number of seconds or a datetime\.timedelta, not str"):
        sim_queue(max_age="5m")
    with pytest.raises(ConfigError, match="poll_interval must be > 0 seconds, got -1"):
        sim_queue(poll_interval=-1)
    with pytest.raises(ConfigError, match="timeout must be >= 0 seconds"):
        sim_queue().reader().get(timeout=-1)


def test_a_str_gets_a_type_error_that_says_so() -> None:
    q = sim_queue()
    with pytest.raises(TypeError, match=r"data must be bytes, not str: encode it"):
        q.put("hello")
    with pytest.raises(TypeError, match="data must be bytes, not int"):
        q.put(5)
    with pytest.raises(TypeError, match="put_many item must be bytes, not str"):
        q.put_many(["a"])
    assert q.tail_id == 0
    q.put(bytearray(b"ok"))
    q.close()


@pytest.mark.parametrize("chosen", ["json", "pickle", "pair"])
def test_serializers_round_trip(chosen: str) -> None:
    spec: object = (lambda o: json.dumps(o).encode(), json.loads) if chosen == "pair" else chosen
    q = sim_queue(serializer=spec)
    q.put({"job": 1})
    q.put_many([[1, 2], ("a", "tuple")])  # with a serializer every element is a value
    r = q.reader()
    values = []
    for item in r:
        assert isinstance(item.data, bytes)
        values.append(item.value)
    assert values == [{"job": 1}, [1, 2], ["a", "tuple"] if chosen != "pickle" else ("a", "tuple")]
    q.close()


def test_bytes_queues_value_is_data_and_moved_items_keep_their_bytes() -> None:
    q = sim_queue(serializer="json", max_errors=1, error_queue="q_errors")
    q.put({"n": 1})
    r = q.reader()
    item = r.get(0)
    assert item is not None
    r.abort(item.id)  # one error: moved to q_errors as stored
    errors = q._punt_queues["q_errors"]
    moved = errors.reader().get(0)
    assert moved is not None and moved.data == b'{"n":1}' and moved.value == b'{"n":1}'
    q.close()


def test_len_in_and_with() -> None:
    q = sim_queue()
    assert len(q) == 0
    q.put_many([b"a", b"b", b"c"])
    assert len(q) == 3  # no reader yet: the first one gets them all
    with q.reader() as r:
        item = r.get(0)
        assert item is not None
        assert len(r) == 3 and item.id in r  # an open read is not confirmed
        r.confirm(item.id)
        assert len(r) == 2 and item.id not in r and 2 in r and 99 not in r and "2" not in r
        late = q.reader("late")  # starts at the end
        assert len(late) == 0 and len(q) == 2
    assert r.closed
    assert len(q) == 2  # the closed reader's file still counts
    q.close()


def test_stats_use_one_backlog_figure(tmp_path: Path) -> None:
    q = Queue.open(str(tmp_path), "jobs", **NOCKPT)
    q.put_many([b"x" * 10, b"y" * 20, b"z" * 30])
    r = q.reader()
    item = r.get(0)
    assert item is not None
    r.confirm(item.id)
    live = q.stats()
    (entry,) = live["readers"]  # type: ignore[misc]
    assert entry["backlog_bytes"] == 50 and entry["items"] == 2
    for key, value in entry.items():
        assert key == key.lower() and " " not in key
        assert key == "reader" or value is None or isinstance(value, (int, float)), key
    q.close()
    (disk,) = queue_stats(default_fs(), str(tmp_path), "jobs")["readers"]  # type: ignore[misc]
    assert disk["backlog_bytes"] == 50 and disk["items"] == 2
    spark = pytest.importorskip("engine.spark.queuesource")
    assert sum(len(p.data) for p in spark.pending_puts(default_fs(), str(tmp_path), "jobs", "")) == 50


def test_a_queue_left_open_at_exit_is_closed_cleanly(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        from engine import Queue
        q = Queue.open({str(tmp_path)!r}, "jobs", sync="never")
        r = q.reader("local")
        other = Queue.open_reader({str(tmp_path)!r}, "jobs", "remote")
        q.put_many([b"a", b"b", b"c"])  # staged: only the exit's close writes them
        r.confirm(r.get(0).id)
        q.flush()
        other.confirm(other.get(5).id)
        """
    )
    done = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning: unclosed queue 'jobs'" in done.stderr
    assert "ResourceWarning: unclosed reader 'remote' of queue 'jobs'" in done.stderr
    with Queue.open(str(tmp_path), "jobs") as q:
        assert not q.recovery.repaired, q.recovery.summary()
        assert q.tail_id == 3 and q.reader_names() == ["local", "remote"]
        assert [r.head for r in (q.reader("local"), q.reader("remote"))] == [1, 1] and len(q) == 2


def test_the_old_millisecond_names_still_work_with_a_deprecation_warning() -> None:
    q = sim_queue()
    q.put(b"x", expire_at=1_700_000_100)
    item = q.reader().get(0)
    assert item is not None
    with pytest.warns(DeprecationWarning, match="use add_time_ms"):
        assert item.add_time == item.add_time_ms == 1_700_000_000_000
    with pytest.warns(DeprecationWarning, match="use expire_time_ms"):
        assert item.expire_time == 1_700_000_100_000
    q.close()


def test_a_bytes_name_is_named_the_right_way_round(tmp_path: Path) -> None:
    """Issue 31: ``Queue.open(d, b"x")`` said "a bytes-like object is required,
    not 'str'"; the name must be a str, and nothing is created."""
    with pytest.raises(TypeError, match=r"queue name must be str, not bytes: decode it \(name.decode\(\)\)"):
        Queue.open(tmp_path / "q", b"jobs")  # type: ignore[arg-type]
    assert not (tmp_path / "q").exists()
