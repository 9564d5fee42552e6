"""ReaderState (READ_HEAD + READ_DONE logic) against a plain set model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.queue.state import ReaderState


def test_confirm_in_order_advances_head() -> None:
    s = ReaderState(0)
    assert s.confirm(1) and s.head == 1 and not s.done


def test_out_of_order_then_fill_gap_swallows_run() -> None:
    s = ReaderState(0)
    s.confirm(3)
    s.confirm(2)
    assert s.head == 0 and list(s.done) == [2, 3]
    s.confirm(1)
    assert s.head == 3 and not s.done
    assert not s.confirm(2)  # already done


def test_clamp_rules() -> None:
    s = ReaderState(50, [52, 60, 99])
    notes = s.clamp(earliest=10, tail=70)
    assert s.head == 50 and list(s.done) == [52, 60] and notes
    s = ReaderState(80, [])
    s.clamp(earliest=10, tail=70)
    assert s.head == 70
    s = ReaderState(3, [5])
    s.clamp(earliest=20, tail=70)  # ids below the journal's first are gone: done
    assert s.head == 19 and not s.done
    s = ReaderState(0, [2])
    s.clamp(earliest=1, tail=5)
    assert s.head == 0 and list(s.done) == [2]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 20), st.lists(st.integers(1, 60)))
def test_matches_set_model(start: int, confirms: list[int]) -> None:
    s = ReaderState(start)
    model = set(range(1, start + 1))
    for xid in confirms:
        assert s.confirm(xid) == (xid not in model)
        model.add(xid)
        # invariant: head = largest n with 1..n all done; done = the rest above head
        head = 0
        while head + 1 in model:
            head += 1
        assert s.head == head
        assert set(s.done) == {i for i in model if i > head}
        assert all(s.is_done(i) == (i in model) for i in range(1, 62))
    assert s.pending(60) == 60 - len(model & set(range(1, 61)))
