"""Property test: random operations with reopens behave like a simple model."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.fs import make_dirs
from engine.queue import Queue
from stress.simfs import SimFS

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(1, 3)),
        st.tuples(st.just("get"), st.integers(0, 2)),
        st.tuples(st.just("confirm"), st.integers(0, 5)),
        st.tuples(st.just("abort"), st.integers(0, 5)),
        st.tuples(st.just("reopen"), st.integers(0, 0)),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(OPS, st.sampled_from([120, 400, 16 * 1024 * 1024]))
def test_queue_matches_model(ops: list[tuple[str, int]], journal_size: int) -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    opts: dict[str, Any] = {"checkpoint_interval": 3600.0, "journal_size": journal_size}
    q = Queue.open("/db", "q", fs=sim, **opts)
    r = q.reader()
    n = 0
    pending: list[int] = []  # model: ids not confirmed, not open, in delivery order
    opened: list[int] = []  # model: open reads, oldest first
    errors: dict[int, int] = {}
    for op, arg in ops:
        if op == "put":
            ids = q.put_many([b"%d" % (n + i + 1) for i in range(arg)])
            assert ids == list(range(n + 1, n + arg + 1))
            n += arg
            pending.extend(ids)
        elif op == "get":
            for _ in range(arg):
                item = r.get(timeout=0)
                if not pending:
                    assert item is None
                    break
                expected = pending.pop(0)
                assert item is not None and item.id == expected and item.data == b"%d" % expected
                assert item.error_count == errors.get(expected, 0)
                opened.append(expected)
        elif op in ("confirm", "abort") and opened:
            xid = opened.pop(arg % len(opened))
            if op == "confirm":
                assert r.confirm(xid) == 1
            else:
                assert r.abort(xid) == 1
                errors[xid] = errors.get(xid, 0) + 1
                pending.append(xid)
                pending.sort()  # aborted items come back ahead of the journal, by id
        elif op == "reopen":
            q.close()
            q = Queue.open("/db", "q", fs=sim, **opts)
            r = q.reader()
            pending = sorted(pending + opened)  # open reads are delivered again...
            errors.clear()  # ...and abort counts were never journaled
            opened = []
        assert len(r) == len(pending) + len(opened)
        assert q.verify() == []
    q.close()
