"""The C replay walker (engine/events/_native.c) against its pure-Python reference.

The walker is a pure function of bytes: ``walk_runs_native`` must return what
``walk_runs_py`` returns -- the same events (Event objects), state, status and
detail, the same ``checked`` marks -- and raise the same errors, for any window,
state and ``data.crc`` arrays (the direct tests at the end).  Driven by
:func:`engine.events.runs.read_runs_with`, which reads the windows it asks for,
``read_runs_native`` must return what ``read_runs_py`` returns and make the same
``read_at`` calls, on valid chains and on corrupted, truncated and hostile bytes.
Skipped when the extension is not built (or ENGINE_PURE_PYTHON=1); the
journal tests then run the reference alone.
"""

from __future__ import annotations

import os
import random
import struct
from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.events import EventJournal
from engine.events.codec import encode_block
from engine.events.runs import (
    ANY_PREVIOUS,
    RUN_BAD,
    RUN_DONE,
    RUN_LINK,
    RUN_MORE,
    RUN_READ,
    RUN_SHORT,
    RUN_SUM,
    Event,
    Sums,
    read_runs_native,
    read_runs_py,
    run_detail,
    run_error,
    walk_runs_native,
    walk_runs_py,
    walk_slots,
)
from engine.events.sums import batch_crc

native = pytest.mark.skipif(read_runs_native is None, reason="engine.events._native not built or disabled")

I64 = (-(2**63), 2**63 - 1)


def _chain(rng: random.Random, events: int, others: int, max_payload: int,
           batches: list[tuple[int, int, int]] | None = None) -> tuple[bytes, list[int]]:
    """A data file holding one id's chain (sequence numbers 1..events) in batches,
    interleaved with other ids' blocks; returns the bytes and the chain's offsets,
    and appends each batch's ``(start, last, end)`` to ``batches`` (another id's
    block is a batch of its own)."""
    data = bytearray(b"AKFD\0\0\0\0")
    offsets: list[int] = []
    seq = 0
    pending_link: int | None = None  # index in data of the previous batch's last ``next``
    while seq < events:
        for _ in range(rng.randrange(others + 1)):  # other ids' blocks
            at = len(data)
            data += encode_block(at, 0, 0, rng.randrange(1, 9), os.urandom(rng.randrange(40)))
            if batches is not None:
                batches.append((at, at, len(data)))
        batch = min(events - seq, rng.randrange(1, 8))
        batch_start = len(data)
        for k in range(batch):
            at = len(data)
            if pending_link is not None:
                data[pending_link : pending_link + 4] = at.to_bytes(4, "big", signed=True)
            size = 24 + rng.randrange(max_payload + 1)
            nxt = at + size if k < batch - 1 else 0
            data += encode_block(at, offsets[-1] if offsets else 0, nxt, seq + 1,
                                 bytes(rng.randrange(256) for _ in range(size - 24)))
            offsets.append(at)
            seq += 1
            pending_link = at + 12 if k == batch - 1 else None
        if batches is not None:
            batches.append((batch_start, offsets[-1], len(data)))
    return bytes(data), offsets


class Reader:
    """``read_at`` over bytes, logging the calls; optionally failing or misbehaving."""

    def __init__(self, data: bytes, fail_at: int = -1, wrong_type_at: int = -1) -> None:
        self.data = data
        self.calls: list[tuple[int, int]] = []
        self.fail_at = fail_at
        self.wrong_type_at = wrong_type_at

    def __call__(self, offset: int, size: int) -> Any:
        self.calls.append((offset, size))
        if len(self.calls) - 1 == self.fail_at:
            raise OSError(5, "injected read error")
        if len(self.calls) - 1 == self.wrong_type_at:
            return bytearray(self.data[offset : offset + size])
        return self.data[max(0, offset) : max(0, offset) + size]


def _sums(data: bytes, batches: list[tuple[int, int, int]], checked: bytes = b"") -> Sums:
    """``data.crc``'s entries for ``batches`` of ``data`` (as the walker takes them)."""
    ends = array("q", [e for _s, _l, e in batches])
    lasts = array("q", [last for _s, last, _e in batches])
    crcs = array("I", [batch_crc(data, s, last, e) for s, last, e in batches])
    return ends, lasts, crcs, bytearray(checked or bytes(len(batches)))


def _copy(sums: Sums | None) -> Sums | None:
    if sums is None:
        return None
    ends, lasts, crcs, checked = sums
    return array("q", ends), array("q", lasts), array("I", crcs), bytearray(checked)


def _both(data: bytes, args: tuple[int, ...], fail_at: int = -1, wrong_type_at: int = -1,
          sums: Sums | None = None) -> Any:
    """Run both walkers on the same input (each with its own copy of ``sums``);
    assert equal outcomes, read calls and checked states; return the result."""
    outcomes = []
    assert read_runs_native is not None  # the callers are marked @native
    walkers: tuple[Any, Any] = (read_runs_py, read_runs_native)
    for walk in walkers:
        reader = Reader(data, fail_at, wrong_type_at)
        mine = _copy(sums)
        try:
            outcome: Any = ("ok", walk(reader, *args, mine) if sums is not None else walk(reader, *args))
        except Exception as exc:  # compared below: type and text
            outcome = ("error", type(exc), str(exc))
        outcomes.append((outcome, reader.calls, None if mine is None else bytes(mine[3])))
    (py, py_calls, py_checked), (c, c_calls, c_checked) = outcomes
    assert c == py
    assert c_calls == py_calls
    assert c_checked == py_checked
    if py[0] == "ok":
        assert all(type(e) is Event for e in py[1][0]) and all(type(e) is Event for e in c[1][0])
        assert all(type(e.payload) is bytes and type(e.sequence_nr) is int for e in c[1][0])
    return py


@native
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), events=st.integers(1, 40), others=st.integers(0, 4),
       max_payload=st.sampled_from([0, 10, 200, 3000]), cap=st.sampled_from([24, 100, 4096, 1 << 18]),
       max_events=st.integers(1, 50), data=st.data())
def test_native_walker_equals_reference_on_valid_chains(seed: int, events: int, others: int, max_payload: int,
                                                        cap: int, max_events: int, data: st.DataObject) -> None:
    rng = random.Random(seed)
    blob, offsets = _chain(rng, events, others, max_payload)
    lo = data.draw(st.integers(1, events))
    hi = data.draw(st.integers(lo, events))
    prev = ANY_PREVIOUS if data.draw(st.booleans()) else (offsets[lo - 2] if lo > 1 else 0)
    want = data.draw(st.sampled_from([24, 4096, cap]))
    state = (offsets[lo - 1], prev, lo)
    got: list[Event] = []
    for _ in range(events + 2):  # a driver loop, as EventJournal._runs
        result = _both(blob, (*state, hi, len(blob), cap, want, max_events))
        assert result[0] == "ok"
        batch, offset, prev_, expected, want, status, _detail = result[1]
        got += batch
        if status == RUN_DONE:
            break
        assert status == RUN_MORE
        state = (offset, prev_, expected)
    assert [e.sequence_nr for e in got] == list(range(lo, hi + 1))


@native
@settings(max_examples=500, deadline=None)
@given(seed=st.integers(0, 2**32), events=st.integers(1, 30), flips=st.integers(0, 6),
       cut=st.integers(0, 100), data=st.data())
def test_native_walker_equals_reference_on_corrupted_files(seed: int, events: int, flips: int, cut: int,
                                                           data: st.DataObject) -> None:
    rng = random.Random(seed)
    blob, offsets = _chain(rng, events, 2, 300)
    damaged = bytearray(blob)
    for _ in range(flips):  # overwrite header bytes mostly (the fields that are checked)
        at = rng.choice(offsets) + rng.randrange(24) if rng.random() < 0.8 else rng.randrange(len(damaged))
        damaged[at] = rng.randrange(256)
    truncated = bytes(damaged[: max(0, len(damaged) - cut * 7)])  # short reads at the end
    limit = data.draw(st.sampled_from([len(blob), len(truncated), rng.randrange(len(blob) + 50)]))
    lo = data.draw(st.integers(1, events))
    hi = data.draw(st.integers(lo, events))
    prev = data.draw(st.sampled_from([ANY_PREVIOUS, offsets[lo - 2] if lo > 1 else 0, rng.randrange(-5, 2**31)]))
    cap = data.draw(st.sampled_from([24, 500, 4096]))
    result = _both(truncated, (offsets[lo - 1], prev, lo, hi, limit, cap, 4096, data.draw(st.integers(1, 40))))
    if result[0] == "ok":
        _events, offset, prev_, expected, _want, status, detail = result[1]
        if status in (RUN_BAD, RUN_LINK, RUN_SHORT):
            err = run_error(status, detail, offset, prev_, expected, limit, "data")
            assert err.path == "data" and err.offset == offset


@native
@settings(max_examples=300, deadline=None)
@given(blob=st.binary(max_size=600), offset=st.integers(*I64), prev=st.integers(*I64),
       expected=st.integers(*I64), hi=st.integers(*I64), limit=st.one_of(st.integers(-10, 700), st.integers(*I64)),
       cap=st.integers(-5, 5000), want=st.integers(-5, 5000), max_events=st.integers(-2, 10))
def test_native_walker_equals_reference_on_hostile_input(blob: bytes, offset: int, prev: int, expected: int, hi: int,
                                                         limit: int, cap: int, want: int, max_events: int) -> None:
    _both(blob, (offset, prev, expected, hi, limit, cap, want, max_events))


@native
@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32), fail_at=st.integers(0, 5), wrong_type=st.booleans())
def test_native_walker_equals_reference_when_reads_fail(seed: int, fail_at: int, wrong_type: bool) -> None:
    blob, offsets = _chain(random.Random(seed), 20, 3, 100)
    _both(blob, (offsets[0], ANY_PREVIOUS, 1, 20, len(blob), 200, 100, 100),
          fail_at=-1 if wrong_type else fail_at, wrong_type_at=fail_at if wrong_type else -1)


@native
def test_native_walker_builds_the_reference_event_class() -> None:
    # The C walker binds engine.events.codec.Event at its first call (engine/native.h):
    # the very class the reference builds, re-exported by engine.events.runs.
    from engine.events.codec import Event as CodecEvent
    from engine.events.runs import Event

    blob, offsets = _chain(random.Random(7), 3, 1, 10)
    assert read_runs_native is not None
    walked = read_runs_native(lambda at, n: blob[at : at + n], offsets[0], ANY_PREVIOUS, 1, 3, len(blob), 200, 100, 100)
    assert Event is CodecEvent and walked[0] and all(type(e) is CodecEvent for e in walked[0])


@pytest.mark.parametrize("pure", [False, True])
def test_journal_replay_is_the_same_with_either_walker(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                       pure: bool) -> None:
    # The journal's own driver with each walker: same events, same typed error.
    import engine.events.view as journal_module

    if not pure and read_runs_native is None:
        pytest.skip("engine.events._native not built or disabled")
    monkeypatch.setattr(journal_module, "read_runs", read_runs_py if pure else read_runs_native)
    d = str(tmp_path / "j")
    with EventJournal.open(d, sync="never") as j:
        for round_ in range(6):
            for i in range(5):
                j.write(f"id{i}", [(round_ * 3 + k + 1, bytes([i, k]) * (k + round_)) for k in range(3)])
        assert [(e.sequence_nr, e.payload) for e in j.replay("id3", 2, 17)] == [
            (s, bytes([3, (s - 1) % 3]) * ((s - 1) % 3 + (s - 1) // 3)) for s in range(2, 18)]
        info = j.id_info("id3")
        assert info is not None
    # Break the link out of id3's 4th block: the first four come out, then the error.
    from engine.errors import CorruptFileError

    with open(os.path.join(d, "data"), "r+b") as f:
        # id3's first block is at info.first_offset; walk 3 links to reach block 4's ``next`` field.
        at = info.first_offset
        for _ in range(3):
            f.seek(at + 12)
            at = int.from_bytes(f.read(4), "big")
        f.seek(at + 12)
        f.write((at + 1).to_bytes(4, "big"))  # block 4 now links to a wrong offset
    block4 = at
    with EventJournal.open_reader(d) as j:
        # The batch holding block 4 (blocks 4-6) fails its checksum in data.crc
        # before any of its events is handed out.
        with pytest.raises(CorruptFileError, match="checksum") as info_err:
            list(j.replay("id3"))
        assert info_err.value.offset == block4
    # Without the side file (a journal older than it), the walker's link checks
    # find it: the first four come out, then the error.
    os.unlink(os.path.join(d, "data.crc"))
    with EventJournal.open_reader(d) as j:
        seen: list[int] = []
        with pytest.raises(CorruptFileError) as info_err:
            for e in j.replay("id3"):
                seen.append(e.sequence_nr)
        assert seen == [1, 2, 3, 4]
        assert info_err.value.offset == at + 1


@native
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), events=st.integers(1, 40), others=st.integers(0, 4),
       max_payload=st.sampled_from([0, 10, 200, 3000]), cap=st.sampled_from([24, 100, 4096, 1 << 18]),
       max_events=st.integers(1, 50), data=st.data())
def test_native_walker_equals_reference_checking_sums_on_valid_chains(
        seed: int, events: int, others: int, max_payload: int, cap: int, max_events: int,
        data: st.DataObject) -> None:
    # Every batch checked once, in both walkers alike (same reads, same ``checked``).
    rng = random.Random(seed)
    batches: list[tuple[int, int, int]] = []
    blob, offsets = _chain(rng, events, others, max_payload, batches)
    covered = data.draw(st.integers(0, len(batches)))  # entries past it are missing (not checked)
    sums = _sums(blob, batches[:covered], bytes(rng.choice([0, 0, 1]) for _ in range(covered)))
    lo = data.draw(st.integers(1, events))
    hi = data.draw(st.integers(lo, events))
    want = data.draw(st.sampled_from([24, 4096, cap]))
    state = (offsets[lo - 1], ANY_PREVIOUS, lo)
    got: list[Event] = []
    for _ in range(events + 2):
        result = _both(blob, (*state, hi, len(blob), cap, want, max_events), sums=sums)
        assert result[0] == "ok"
        batch, offset, prev_, expected, want, status, _detail = result[1]
        read_runs_py(Reader(blob), *state, hi, len(blob), cap, want, max_events, sums)  # carry ``checked`` on
        got += batch
        if status == RUN_DONE:
            break
        assert status == RUN_MORE
        state = (offset, prev_, expected)
    assert [e.sequence_nr for e in got] == list(range(lo, hi + 1))


@native
@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32), events=st.integers(1, 30), flips=st.integers(0, 6),
       cut=st.integers(0, 100), data=st.data())
def test_native_walker_equals_reference_checking_sums_on_damaged_files(seed: int, events: int, flips: int,
                                                                       cut: int, data: st.DataObject) -> None:
    rng = random.Random(seed)
    batches: list[tuple[int, int, int]] = []
    blob, offsets = _chain(rng, events, 2, 300, batches)
    sums = _sums(blob, batches, bytes(rng.choice([0, 0, 0, 1, 2]) for _ in batches))
    damaged = bytearray(blob)
    for _ in range(flips):  # anywhere: payload flips only the checksums find
        damaged[rng.randrange(len(damaged))] = rng.randrange(256)
    truncated = bytes(damaged[: max(0, len(damaged) - cut * 7)])
    lo = data.draw(st.integers(1, events))
    hi = data.draw(st.integers(lo, events))
    cap = data.draw(st.sampled_from([24, 500, 4096]))
    result = _both(truncated, (offsets[lo - 1], ANY_PREVIOUS, lo, hi, len(blob), cap, 4096,
                               data.draw(st.integers(1, 40))), sums=sums)
    if result[0] == "ok" and result[1][5] == RUN_SUM:
        k, got = result[1][6]
        assert 0 <= k < len(batches) and batches[k][0] <= result[1][1] < batches[k][2]
        assert got is None or got == -1 or got != sums[2][k]


@native
@settings(max_examples=300, deadline=None)
@given(blob=st.binary(max_size=600), offset=st.integers(-5, 700), expected=st.integers(*I64),
       hi=st.integers(*I64), limit=st.integers(-10, 700), cap=st.integers(-5, 5000), want=st.integers(-5, 5000),
       ends=st.lists(st.integers(-50, 800), max_size=6), lasts=st.lists(st.integers(-50, 800), max_size=6),
       crcs=st.lists(st.integers(0, 2**32 - 1), max_size=6), checked=st.binary(max_size=6))
def test_native_walker_equals_reference_on_hostile_sums(blob: bytes, offset: int, expected: int, hi: int, limit: int,
                                                        cap: int, want: int, ends: list[int], lasts: list[int],
                                                        crcs: list[int], checked: bytes) -> None:
    # Entries that are unsorted, outside the file or the limit, of different
    # lengths, with any ``checked`` bytes: the same result or the same error.
    sums = (array("q", ends), array("q", lasts), array("I", crcs), bytearray(checked))
    _both(blob, (offset, ANY_PREVIOUS, expected, hi, limit, cap, want, 10), sums=sums)


@pytest.mark.parametrize("pure", [False, True])
def test_replay_checks_each_batch_once_and_reports_damage(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                          pure: bool) -> None:
    # The journal with either walker: a payload byte flipped in one batch is a
    # checksum error (path and offset of the batch) for the id holding it only;
    # a second replay reports it again; every batch replay reaches is checked.
    import engine.events.view as journal_module
    from engine.errors import CorruptFileError

    if not pure and read_runs_native is None:
        pytest.skip("engine.events._native not built or disabled")
    monkeypatch.setattr(journal_module, "read_runs", read_runs_py if pure else read_runs_native)
    d = str(tmp_path / "j")
    with EventJournal.open(d, sync="never") as j:
        for round_ in range(4):
            for i in range(3):
                j.write(f"id{i}", [(round_ * 5 + k + 1, bytes([i]) * 30) for k in range(5)])
        info = j.id_info("id1")
        assert info is not None
    with open(os.path.join(d, "data"), "r+b") as f:
        f.seek(info.first_offset + 24 + 3)  # a payload byte of id1's first batch
        f.write(b"X")
    with EventJournal.open_reader(d) as j:
        for pid in ("id0", "id2"):
            assert len(list(j.replay(pid))) == 20
        for _ in range(2):
            with pytest.raises(CorruptFileError, match="checksum") as err:
                list(j.replay("id1"))
            assert err.value.path == j.data_path and err.value.offset == info.first_offset
        checked = bytes(j._dsums.checked)
        # id1's later batches are never reached (its replay stops at the bad one).
        assert checked.count(2) == 1 and checked.count(0) == 3 and checked.count(1) == 8


def _walk_both(buf: bytes, base: int, fresh: int, state: tuple[int, ...], hi: int, limit: int, cap: int,
               max_events: int, sums: Sums | None = None) -> Any:
    """Both walkers on one window (each with its own walk, events list and copy of
    ``sums``): equal outcomes -- status, walk slots and detail, events, or the
    error's type and text with the events appended before it and the walk left as
    it was -- and equal ``checked`` marks; returns the reference's outcome as
    ``("ok", (events, state, status, detail))``."""
    outcomes = []
    assert walk_runs_native is not None  # the callers are marked @native
    walkers: tuple[Any, Any] = (walk_runs_py, walk_runs_native)
    for walker in walkers:
        mine = _copy(sums)
        walk = bytearray(struct.pack("=13q", *state, hi, limit, cap, max_events, base, 0, fresh))
        events: list[Event] = []
        try:
            status = walker(buf, walk, events, mine) if mine is not None else walker(buf, walk, events)
            slots = walk_slots(walk)
            outcome: Any = ("ok", (events, slots[:6], status, run_detail(status, walk, buf)), slots)
        except Exception as exc:  # compared below: type and text
            outcome = ("error", type(exc), str(exc), events, bytes(walk))
        outcomes.append((outcome, None if mine is None else bytes(mine[3])))
    assert outcomes[1] == outcomes[0]
    if outcomes[0][0][0] == "ok":
        assert all(type(e) is Event for e in outcomes[1][0][1][0])
    return outcomes[0][0]


@native
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), events=st.integers(1, 30), flips=st.integers(0, 6), data=st.data())
def test_native_walker_equals_reference_on_any_window(seed: int, events: int, flips: int,
                                                      data: st.DataObject) -> None:
    # The walker alone, on a window cut anywhere from a valid or damaged file, any
    # ``fresh`` promise and a state that may or may not fit it; with and without sums.
    rng = random.Random(seed)
    batches: list[tuple[int, int, int]] = []
    blob, offsets = _chain(rng, events, 2, 300, batches)
    damaged = bytearray(blob)
    for _ in range(flips):
        damaged[rng.randrange(len(damaged))] = rng.randrange(256)
    start = data.draw(st.integers(0, len(blob)))
    stop = data.draw(st.integers(start, len(blob)))
    window = bytes(damaged[start:stop])
    at = data.draw(st.integers(0, events - 1))
    offset = data.draw(st.sampled_from([offsets[at], rng.randrange(-30, len(blob) + 30)]))
    prev = data.draw(st.sampled_from([ANY_PREVIOUS, offsets[at - 1] if at else 0]))
    bs, be = data.draw(st.sampled_from([(0, 0), batches[rng.randrange(len(batches))][::2]]))
    state = (offset, prev, at + 1, data.draw(st.sampled_from([24, 500, 4096])), bs, be)
    fresh = data.draw(st.sampled_from([0, 0, 24, 300, -1]))
    sums = _sums(blob, batches, bytes(rng.choice(b"\0\0\1\2") for _ in batches)) if data.draw(st.booleans()) else None
    limit = data.draw(st.sampled_from([len(blob), stop, len(blob) + 10]))
    result = _walk_both(window, start, fresh, state, data.draw(st.integers(at + 1, events + 2)), limit,
                        data.draw(st.sampled_from([24, 500, 1 << 16])), data.draw(st.integers(-1, 40)), sums)
    if result[0] == "ok" and result[1][2] == RUN_READ:
        read_start, size, _fresh = result[1][3]
        assert read_start >= 8 and size >= 0


@native
@settings(max_examples=300, deadline=None)
@given(buf=st.binary(max_size=300), base=st.integers(*I64), fresh=st.integers(*I64),
       state=st.tuples(*[st.integers(*I64)] * 6), hi=st.integers(*I64),
       limit=st.one_of(st.integers(-10, 700), st.integers(*I64)), cap=st.integers(-5, 5000),
       max_events=st.integers(-2, 10))
def test_native_walker_equals_reference_on_hostile_arguments(buf: bytes, base: int, fresh: int,
                                                             state: tuple[int, ...], hi: int, limit: int, cap: int,
                                                             max_events: int) -> None:
    _walk_both(buf, base, fresh, state, hi, limit, cap, max_events)


@native
@settings(max_examples=200, deadline=None)
@given(buf=st.binary(max_size=400), base=st.integers(0, 200), fresh=st.integers(-3, 500),
       offset=st.integers(-5, 700), bs=st.integers(-5, 700), be=st.integers(-5, 700), limit=st.integers(0, 800),
       ends=st.lists(st.integers(-5, 800), max_size=6), lasts=st.lists(st.integers(-5, 800), max_size=6),
       checked=st.binary(max_size=6).map(lambda b: bytes(x % 3 for x in b)))
def test_native_walker_equals_reference_on_hostile_sums_and_windows(
        buf: bytes, base: int, fresh: int, offset: int, bs: int, be: int, limit: int, ends: list[int],
        lasts: list[int], checked: bytes) -> None:
    n = min(len(ends), len(lasts), len(checked))
    sums = (array("q", sorted(ends[:n])), array("q", lasts[:n]), array("I", [0] * n), bytearray(checked[:n]))
    _walk_both(buf, base, fresh, (offset, ANY_PREVIOUS, 1, 100, bs, be), 5, limit, 4096, 10, sums)


@native
def test_native_walker_refuses_what_is_not_bytes() -> None:
    walkers: tuple[Any, Any] = (walk_runs_py, walk_runs_native)
    for walker in walkers:
        walk = bytearray(struct.pack("=13q", 8, ANY_PREVIOUS, 1, 100, 0, 0, 1, 100, 100, 10, 0, 0, 0))
        before = bytes(walk)
        with pytest.raises(TypeError, match="buf must be bytes"):
            walker(bytearray(8), walk, [])
        for bad_walk in (before, walk[:96], walk + b"\0", array("q", walk), memoryview(walk), [0] * 13):
            with pytest.raises(TypeError, match="walk must be a bytearray of 104 bytes"):
                walker(b"", bad_walk, [])
        for bad_events in ((), None, bytearray()):
            with pytest.raises(TypeError, match="events must be a list"):
                walker(b"", walk, bad_events)
        assert walk == before
