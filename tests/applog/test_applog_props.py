"""Property tests: an AppendLog behaves like a list of records under any sequence of
appends, reopens, expiries and truncations (checked against a plain model)."""

from __future__ import annotations

import bisect
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.applog import AppendLog, LogReader
from engine.fs import make_dirs
from stress.simfs import SimFS

DIR = "/log"

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.binary(max_size=40), st.integers(0, 2**32 - 1), st.integers(0, 30)),
        st.tuples(st.just("many"), st.lists(st.binary(max_size=20), max_size=6), st.integers(0, 30)),
        st.tuples(st.just("reopen"), st.sampled_from(["always", "never", 0.5]), st.integers(0, 300)),
        st.tuples(st.just("expire"), st.integers(0, 400)),
        st.tuples(st.just("truncate"), st.integers(0, 100)),
    ),
    max_size=40,
)


def _open(fs: SimFS, sync: Any, buffer_bytes: int) -> AppendLog:
    return AppendLog.open(DIR, ttl_ns=60, segment_bytes=120, sync=sync, buffer_bytes=buffer_bytes, fs=fs)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_log_matches_model(script: list[tuple[Any, ...]]) -> None:
    fs = SimFS()
    make_dirs(fs, DIR)
    log = _open(fs, "never", 0)
    model: dict[int, tuple[int, int, bytes]] = {}
    first, nxt, now = 0, 0, 1000
    try:
        for op in script:
            if op[0] == "append":
                now += op[3]
                assert log.append(op[1], flags=op[2], time_ns=now) == nxt
                model[nxt] = (now, op[2], op[1])
                nxt += 1
            elif op[0] == "many":
                now += op[2]
                assert log.append_many(op[1], time_ns=now) == range(nxt, nxt + len(op[1]))
                for data in op[1]:
                    model[nxt] = (now, 0, data)
                    nxt += 1
            elif op[0] == "reopen":
                log.close()
                log = _open(fs, op[1], op[2])
                assert not log.recovery.repaired
            elif op[0] == "expire":
                before = log.first_index
                removed = log.expire(now_ns=now + op[1])
                assert log.first_index == before + removed
                # whatever went had expired; whatever stayed starts a segment that has not
                for i in range(before, log.first_index):
                    assert model[i][0] + 60 < now + op[1] or i < first
                first = max(first, log.first_index)
            else:
                target = min(first + op[1], nxt)
                got = log.truncate_before(target)
                assert got == max(0, target - first)
                first = max(first, target)
            assert (log.first_index, log.next_index) == (first, nxt)
        # every kept record, by index, by scan and by time
        recs = list(log.scan())
        assert [(r.index, r.time_ns, r.flags, r.data) for r in recs] == [
            (i, *model[i]) for i in range(first, nxt)
        ]
        for i in range(first, nxt):
            assert log.get(i).data == model[i][2]
        times = [model[i][0] for i in range(first, nxt)]
        for t0 in {1000, now, now + 1, *times[:5]}:
            assert log.index_at_time(time_ns=t0) == first + bisect.bisect_left(times, t0)
        log.flush()
        with LogReader.open(DIR, fs=fs) as reader:
            assert [r.index for r in reader.scan()] == list(range(first, nxt))
        assert log.verify() == []
    finally:
        log.close()
