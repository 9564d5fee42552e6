"""The native appender (``engine/applog/_native.c``) against its pure-Python
reference (``engine.applog.fastpath.Appender``), and whole logs written with and
without it: same results, same errors, same bytes.

The native module is imported directly (not through ``engine.native.load``), so
these comparisons also run under ``ENGINE_PURE_PYTHON=1``; they are skipped only
when the extension is not built.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
import zlib
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

import pytest
from applog_helpers import segment_file_bytes
from hypothesis import example, given, settings
from hypothesis import strategies as st

import engine.applog.log as log_module
from engine.applog import AppendLog
from engine.applog.fastpath import INT64_MAX, INT64_MIN, Appender
from engine.errors import ConfigError, PoisonedError
from engine.fs import make_dirs


def _native() -> ModuleType | None:
    try:
        return importlib.import_module("engine.applog._native")
    except ImportError:
        return None


NATIVE = _native()
needs_native = pytest.mark.skipif(NATIVE is None, reason="engine.applog._native is not built")

FAR = 1 << 62  # a "newest time" beyond the wall clock: calls without a time get exactly it


class FlushSpy:
    """The flush callback: records its calls; every third one fails."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls % 3 == 0:
            raise OSError(5, "flush failed")


class SlowSpy:
    """The slow path: records its calls; raises for some inputs (like the real one)."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append((args, dict(kwargs)))
        if args and isinstance(args[0], str):
            raise ConfigError("slow: not bytes")
        return -len(self.calls)


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as exc:  # the type and message are what is compared
        return ("error", (type(exc), str(exc)))


def _state(app: Any) -> tuple[Any, ...]:
    return (app.armed, app.next_index, app.log_size, app.seg_count, app.last_time, app.segment_bytes,
            app.flush_at, app.pending)


def _setup(app: Any, state: dict[str, Any]) -> None:
    for name, value in state.items():
        setattr(app, name, value)


def _mostly(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` about four times in five (the fast path's boundaries need many
    fully valid calls), else ``invalid``."""
    return st.integers(0, 9).flatmap(lambda k: valid if k < 8 else invalid)


STATES = st.fixed_dictionaries(
    {
        "armed": _mostly(st.just(True), st.just(False)),
        "next_index": _mostly(st.integers(0, 1 << 40), st.sampled_from([INT64_MAX - 1, INT64_MAX])),
        "log_size": _mostly(st.integers(16, 600), st.just(INT64_MAX - 20)),
        "seg_count": st.integers(0, 3),
        "last_time": _mostly(st.integers(FAR - 3, FAR + 3), st.just(INT64_MAX)),
        "segment_bytes": _mostly(st.integers(300, 3000), st.integers(16, 300)),
        "flush_at": _mostly(st.integers(300, 3000), st.integers(-1, 300)),
    }
)
TIMES = _mostly(
    st.none() | st.integers(FAR - 2, FAR + 8),
    st.sampled_from([INT64_MAX, INT64_MAX + 1, INT64_MIN - 1, True, 1.5, "1"]),
)
FLAGS = _mostly(st.integers(0, 20) | st.just(0xFFFFFFFF), st.sampled_from([1 << 32, -1, False, 1 << 70, 2.0]))
DATA = _mostly(st.binary(max_size=60), st.binary(max_size=20).map(bytearray) | st.text(max_size=5) | st.none())
APPEND_CALLS = st.one_of(
    st.tuples(DATA).map(lambda a: ("append", a, {})),
    st.tuples(DATA, FLAGS).map(lambda a: ("append", a, {})),
    st.tuples(DATA, FLAGS, TIMES).map(lambda a: ("append", a, {})),
    st.tuples(DATA, FLAGS, TIMES).map(lambda a: ("append", a, {})),
    st.tuples(DATA, FLAGS, TIMES, st.integers()).map(lambda a: ("append", a, {})),
    st.tuples(DATA).map(lambda a: ("append", a, {"time_ns": FAR + 1})),
    st.just(("append", (), {})),
)
ITEMS = _mostly(
    st.lists(st.binary(max_size=60), max_size=12),
    st.lists(st.binary(max_size=50) | st.text(max_size=3), max_size=5) | st.just(()),
)
EXTEND_CALLS = st.tuples(
    ITEMS,
    FLAGS,
    _mostly(st.integers(FAR - 2, FAR + 8), st.sampled_from([INT64_MAX + 1, "x"])),
    _mostly(st.integers(0, 3), st.integers(-1, 14)),
).map(lambda a: ("extend", a, {}))
CALLS = st.lists(
    st.one_of(APPEND_CALLS, APPEND_CALLS, EXTEND_CALLS, st.just(("take", (), {})), st.just(("arm", (), {}))),
    max_size=30,
)


_EDGE = {"armed": True, "next_index": 7, "log_size": 100, "seg_count": 1, "last_time": FAR,
         "segment_bytes": 100 + 16 + 4, "flush_at": 16 + 4}


@needs_native
@settings(max_examples=500, deadline=None)
@given(STATES, CALLS)
# The boundaries, exactly: a time equal to the newest, a record ending exactly at
# (or one byte past) the segment's limit, a buffer reaching (or not) flush_at.
@example(_EDGE, [("append", (b"abcd", 0, FAR), {}), ("append", (b"", 1, FAR - 1), {})])
@example(_EDGE, [("append", (b"abcde", 0, FAR), {}), ("take", (), {})])
@example(_EDGE, [("append", (b"abcd",), {}), ("append", (b"",), {}), ("append", (b"",), {})])
@example(_EDGE, [("extend", ([b"abcd", b""], 2, FAR, 0), {}), ("extend", ([b"abcde"], 2, FAR, 0), {})])
@example(_EDGE, [("extend", ([b"abc"], 2, FAR - 1, 0), {}), ("extend", ([b"abc"], 2, FAR, 1), {})])
@example({**_EDGE, "seg_count": 0}, [("extend", ([b"x" * 200, b"y"], 0, FAR, 0), {})])
@example({**_EDGE, "seg_count": 0}, [("append", (b"x" * 200, 0, FAR), {}), ("append", (b"x", 0, FAR), {})])
@example({**_EDGE, "segment_bytes": 1 << 20}, [("append", (b"abcd",), {}), ("append", (b"",), {})])
@example({**_EDGE, "seg_count": 0, "log_size": INT64_MAX - 20}, [("append", (b"abcd",), {}), ("take", (), {})])
@example({**_EDGE, "seg_count": 0, "log_size": INT64_MAX - 20}, [("extend", ([b"abcd"], 0, FAR, 0), {})])
def test_appender_twins_agree(state: dict[str, Any], calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> None:
    assert NATIVE is not None
    spies = SlowSpy(), SlowSpy()
    flushes = FlushSpy(), FlushSpy()
    twins = Appender(spies[0], flushes[0]), NATIVE.Appender(spies[1], flushes[1])
    for app in twins:
        _setup(app, state)
    for name, args, kwargs in calls:
        results = []
        for app in twins:
            if name == "arm":
                app.armed = True
                results.append(("ok", None))
            else:
                results.append(_outcome(partial(getattr(app, name), *args, **kwargs)))
        assert results[0] == results[1], (name, args, kwargs)
        assert _state(twins[0]) == _state(twins[1])
        assert spies[0].calls == spies[1].calls
        assert flushes[0].calls == flushes[1].calls
    assert twins[0].take() == twins[1].take()


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000), st.integers(0, 0xFFFFFFFF))
def test_native_crc32_is_zlibs(data: bytes, start: int) -> None:
    assert NATIVE is not None
    assert NATIVE.crc32(data, start) == zlib.crc32(data, start)
    assert NATIVE.crc32(data) == zlib.crc32(data)


@needs_native
def test_append_without_time_uses_the_clock() -> None:
    assert NATIVE is not None
    for app in (Appender(SlowSpy(), FlushSpy()), NATIVE.Appender(SlowSpy(), FlushSpy())):
        _setup(app, {"armed": True, "log_size": 16, "segment_bytes": 1 << 20, "flush_at": 1 << 20})
        before = time.time_ns()
        assert app.append(b"abc") == 0
        after = time.time_ns()
        n, first, log, crc, idx = app.take()
        assert n == 1 and before <= first <= after and app.last_time == first
        assert log[:16] == (3).to_bytes(4, "little") + bytes(4) + first.to_bytes(8, "little")
        assert crc == zlib.crc32(log).to_bytes(4, "little")
        assert idx == first.to_bytes(8, "little") + bytes(8) + (16).to_bytes(8, "little")


@needs_native
def test_native_appender_does_not_leak() -> None:
    """Many calls (appends, hand-overs, takes) leave the traced memory flat."""
    import tracemalloc

    assert NATIVE is not None
    app = NATIVE.Appender(lambda *a, **k: -1, lambda: None)
    _setup(app, {"armed": True, "log_size": 16, "segment_bytes": 1 << 40, "flush_at": 1 << 20})

    def burst() -> None:
        app.last_time = FAR
        for k in range(20_000):
            app.append(b"x" * 100, 3, FAR + k)
            if k % 1000 == 0:
                app.append(bytearray(b"y"))  # handed to the slow path
                app.extend([b"z" * 10] * 5, 1, FAR + k, 0)
                app.take()
                app.last_time = FAR
        app.take()

    burst()
    tracemalloc.start()
    try:
        burst()
        first = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            burst()
        assert tracemalloc.get_traced_memory()[0] - first < 64 * 1024
    finally:
        tracemalloc.stop()


# -- whole logs: native fast path against the pure-Python writer ------------------------
def _open(path: str, native: bool, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> AppendLog:
    with monkeypatch.context() as m:
        m.setattr(log_module, "_native", NATIVE if native else None)
        return AppendLog.open(path, **kw)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.binary(max_size=90), st.integers(0, 3), st.integers(0, 3)),
        # Consecutive appends with nothing between them: the fast path's own work.
        st.tuples(
            st.just("appends"),
            st.lists(st.tuples(st.binary(max_size=90), st.integers(0, 3), st.booleans()), max_size=12),
        ),
        st.tuples(st.just("append-bad"), st.sampled_from(["flags", "time", "type", "size-kw"])),
        st.tuples(st.just("many"), st.lists(st.binary(max_size=90), max_size=9), st.integers(0, 3)),
        st.tuples(st.just("get"), st.integers(0, 60)),
        st.tuples(st.just("flush")),
        st.tuples(st.just("between"), st.integers(0, 30)),
    ),
    max_size=40,
)


def _apply(lg: AppendLog, op: tuple[Any, ...], t: int) -> Any:
    """Run one generated operation on ``lg`` (times from ``t`` on)."""
    kind = op[0]
    if kind == "append":
        return lg.append(op[1], op[2], t + op[3])
    if kind == "appends":
        # Consecutive appends with nothing between them (the fast path's own work).
        # Times: explicit, or None once the log's newest time is ahead of the
        # clock, so that both writers use exactly that time.
        timed = lg.next_index == 0
        out = []
        for data, flags, explicit in op[1]:
            out.append(lg.append(data, flags, t + 2 if explicit or timed else None))
            timed = False
        return out
    if kind == "append-bad":
        if op[1] == "flags":
            return lg.append(b"x", -1)
        if op[1] == "time":
            return lg.append(b"x", 0, 5 if lg.next_index else INT64_MIN - 1)
        if op[1] == "type":
            return lg.append("text")  # type: ignore[arg-type]
        return lg.append(data=b"kw", flags=1, time_ns=t + 9)
    if kind == "many":
        return lg.append_many(op[1], op[2], t + 5)
    if kind == "get":
        return lg.get(op[1])
    if kind == "between":
        return list(lg.between(t + op[1] - 10, t + op[1] + 10))
    lg.flush()
    return None


@needs_native
@settings(max_examples=60, deadline=None)
@given(OPS, st.sampled_from([0, 64, 1 << 16]), st.sampled_from(["never", 0.05]))
def test_native_and_pure_logs_write_the_same_bytes(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]], buffer_bytes: int, sync: object
) -> None:
    monkeypatch = pytest.MonkeyPatch()
    root = str(tmp_path_factory.mktemp("twins"))
    kw: dict[str, Any] = {"segment_bytes": 16 + 4 * 60, "sync": sync, "buffer_bytes": buffer_bytes}
    logs = [_open(os.path.join(root, name), name == "native", monkeypatch, **kw) for name in ("pure", "native")]
    assert "append" not in vars(logs[0]) and "append" in vars(logs[1])
    t = FAR  # ahead of the clock: an append without a time gets the newest time
    try:
        for op in ops:
            results = [_outcome(partial(_apply, lg, op, t)) for lg in logs]
            assert results[0] == results[1], op
            t += 10
        assert logs[0].next_index == logs[1].next_index
        assert logs[0].segments() == [
            type(s)(**{**vars(s), "log_path": s.log_path.replace("/native/", "/pure/"),
                       "idx_path": s.idx_path.replace("/native/", "/pure/")})
            for s in logs[1].segments()
        ]
        for lg in logs:
            lg.verify()
    finally:
        for lg in logs:
            lg.close()
    pure, native = segment_file_bytes(os.path.join(root, "pure")), segment_file_bytes(os.path.join(root, "native"))
    assert pure == native


@needs_native
def test_native_fast_path_is_installed_only_without_fsync_waits(tmp_path: os.PathLike[str]) -> None:
    if os.environ.get("ENGINE_PURE_PYTHON"):
        pytest.skip("pure Python forced")
    with AppendLog.open(os.path.join(str(tmp_path), "a"), sync="always") as a:
        assert "append" not in vars(a)
    with AppendLog.open(os.path.join(str(tmp_path), "b"), sync=0.05) as b:
        assert "append" in vars(b)
        b.append(b"x")
        b.close()
        with pytest.raises(Exception, match="closed"):
            b.append(b"y")


def test_threads_appending_and_reading_stay_dense(tmp_path: os.PathLike[str]) -> None:
    """Several appending threads, a reader and the periodic syncer: every record
    is there once, in order of index, and the files verify (native or not)."""
    path = os.path.join(str(tmp_path), "log")
    per_thread = 3000
    with AppendLog.open(path, sync=0.01, segment_bytes=16 + 2000 * 30, buffer_bytes=4096) as lg:
        got: dict[int, bytes] = {}
        lock = threading.Lock()

        def writer(k: int) -> None:
            for j in range(per_thread):
                data = b"%d:%d" % (k, j)
                idx = lg.append_many([data])[0] if j % 500 == 7 else lg.append(data)
                with lock:
                    got[idx] = data

        stop = threading.Event()

        def reader() -> None:
            while not stop.is_set():
                n = lg.next_index
                if n:
                    lg.get(n - 1)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        rd = threading.Thread(target=reader)
        rd.start()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        stop.set()
        rd.join()
        assert sorted(got) == list(range(4 * per_thread))
        assert [r.data for r in lg.scan()] == [got[i] for i in range(4 * per_thread)]
        lg.verify()
    with AppendLog.open(path) as again:
        assert not again.recovery.repaired
        assert again.next_index == 4 * per_thread


@needs_native
@pytest.mark.parametrize("kind", ["write", "fsync"])
def test_failures_poison_the_fast_path_like_the_pure_one(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed write or fsync under a period poisons the log: the native fast
    path must not keep buffering records that can never be written; the outcome
    of every call matches the pure-Python writer's."""
    import errno

    from stress.faults import FaultyFS
    from stress.simfs import SimFS

    outcomes = []
    for native in (False, True):
        sim = SimFS()
        make_dirs(sim, "/db")
        ffs = FaultyFS(sim, errno=errno.EIO, kinds=(kind,))
        with monkeypatch.context() as m:
            m.setattr(log_module, "_native", NATIVE if native else None)
            lg = AppendLog.open("/db", sync=3600, buffer_bytes=100, fs=ffs)
        assert ("append" in vars(lg)) == native
        seen = []
        for i in range(3):
            seen.append(_outcome(partial(lg.append, b"ok%d" % i, 0, 10 + i)))
        ffs.fail_at = ffs.ops + 1
        for i in range(12):
            res = _outcome(partial(lg.append, b"x" * 30, 0, 100 + i))
            seen.append(res if res[0] == "ok" else ("error", res[1][0]))
            if i == 6:
                res = _outcome(lg.sync)
                seen.append(res if res[0] == "ok" else ("error", res[1][0]))
        lg.close()
        with AppendLog.open("/db", fs=sim) as again:
            again.verify()
            seen.append(("records", [r.data for r in again.scan()]))
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]
    assert any(o[0] == "error" for o in outcomes[0])
    assert outcomes[0][-2] == ("error", PoisonedError)


@pytest.mark.parametrize("native", [False, True])
def test_crash_states_with_fast_path_appends(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Crash states of a periodic-sync log fed mostly by the native fast path
    (a buffer of several records, rolls, explicit syncs): every record synced
    before the crash survives, nothing else appears, indexes stay dense."""
    if native and NATIVE is None:
        pytest.skip("engine.applog._native is not built")
    from test_applog_crash import DIR, _check_state, _payload

    from stress.simfs import SimFS

    sim = SimFS()
    make_dirs(sim, DIR)
    attempted: dict[int, tuple[int, int, bytes]] = {}
    with monkeypatch.context() as m:
        m.setattr(log_module, "_native", NATIVE if native else None)
        lg = AppendLog.open(DIR, segment_bytes=160, sync=3600, buffer_bytes=90, fs=sim)
    assert ("append" in vars(lg)) == native
    for i in range(30):
        attempted[i] = (100 + i, i % 3, _payload(i))
        assert lg.append(_payload(i), i % 3, 100 + i) == i
        if i % 7 == 6:
            lg.sync()  # what a period does
            for k in range(i + 1):
                sim.mark(("append", k))
    lg.close()
    seen = 0
    for state in sim.crash_states(limit=300, seed=11):
        _check_state(state.fs(), state.marks, attempted, state.describe())
        seen += 1
    assert seen > 50
