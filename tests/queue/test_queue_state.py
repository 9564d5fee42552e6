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
    """Only raises the head past ids no longer in the journal: a head or done ids
    past the tail are kept (the writer burns every id a reader mentions)."""
    s = ReaderState(50, [52, 60, 99])
    notes = s.clamp(earliest=10)
    assert s.head == 50 and list(s.done) == [52, 60, 99] and not notes
    s = ReaderState(80, [])
    assert not s.clamp(earliest=10) and s.head == 80
    s = ReaderState(3, [5])
    notes = s.clamp(earliest=20)  # ids below the journal's first are gone: done, and said
    assert s.head == 19 and not s.done and notes and notes[0][:3] == ("reset", 16, "ids")
    s = ReaderState(0, [2])
    assert not s.clamp(earliest=1)
    assert s.head == 0 and list(s.done) == [2]
    s = ReaderState(4, [9])
    assert not s.clamp(earliest=None) and s.head == 4  # no item: nothing to raise to


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


def test_skip_missing_is_one_range_whatever_its_width() -> None:
    s = ReaderState(5, [7])
    s.skip_missing(10, 2**60)  # a gap above an open read (id 6): kept as a range
    assert list(s.done) == [7] and s.gaps == [(10, 2**60)]
    assert s.is_done(2**59) and not s.is_done(6) and not s.is_done(8)
    assert s.pending(2**60 + 3) == 2**60 + 3 - 5 - 1 - (2**60 - 9)
    s.confirm(8)
    s.confirm(9)
    assert s.head == 5
    s.confirm(6)  # 6, 7, 8, 9 then the whole gap are swallowed
    assert s.head == 2**60 and not s.done and not s.gaps


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 10),
    st.lists(
        st.one_of(
            st.tuples(st.just("confirm"), st.integers(1, 60), st.just(0)),
            st.tuples(st.just("skip"), st.integers(1, 60), st.integers(0, 8)),
            st.tuples(st.just("clamp"), st.integers(1, 30), st.just(0)),
        )
    ),
)
def test_gaps_match_set_model(start: int, ops: list[tuple[str, int, int]]) -> None:
    """confirm / skip_missing / clamp against a plain set of done ids."""
    s = ReaderState(start)
    model = set(range(1, start + 1))
    for kind, a, b in ops:
        if kind == "confirm":
            s.confirm(a)
            model.add(a)
        elif kind == "skip":
            s.skip_missing(a, a + b)
            model |= set(range(a, a + b + 1))
        else:
            earliest = a
            s.clamp(earliest)
            # The clamping rule on the model: every id before the journal's first is done.
            model |= set(range(1, earliest))
        head = 0
        while head + 1 in model:
            head += 1
        assert s.head == head
        assert all(s.is_done(i) == (i in model) for i in range(1, 75))
        assert s.pending(70) == 70 - len(model & set(range(1, 71)))
        assert set(s.done).isdisjoint({i for lo, hi in s.gaps for i in range(lo, hi + 1)})
