"""Reading runs of one id's linked data blocks: replay's hot loop.

Two parts.  :func:`walk_runs_py` is the walker, a pure function of bytes: it walks
the chain through a window of the file it is given and, when the chain leaves the
window, says which window to read next (:data:`RUN_READ`).  It has a C twin
(``engine/events/_native.c``, bound through ``engine.native.kernel("events.walk_runs")``)
that returns equal results on every input (tests/events/test_events_native.py
runs both on random valid, damaged and hostile input).  :func:`read_runs_with` is
the driver: it reads the windows the walker asks for through the ``read_at``
callable it is given (the journal's :class:`engine.fs.FileHandle` method, so every
read goes through the file system seam; errors raised by ``read_at`` itself, a
closed handle or an OSError, propagate as they are).  :data:`read_runs` is the
driver with the C walker when it is built and allowed, else with the reference.

The walker also checks each batch it decodes blocks of against ``data.crc``
(the ``sums`` it is given: see :func:`walk_runs_py`), once per journal instance:
that check is on the first replay's every window, so it lives in the walker
(and its C twin) rather than in a Python wrapper around each read.

The walker never raises for bad data: it returns the events decoded so far and
*why* it stopped, and the caller (``EventJournal._runs``) hands the events out
and then raises the typed error from :func:`run_error` -- so a consumer sees
every good event before the bad block, as with a block-at-a-time loop.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Callable
from functools import partial
from typing import Any

from engine.errors import CorruptFileError
from engine.events.codec import BLOCK_HEADER, BLOCK_HEADER_SIZE, DATA_HEADER_SIZE, Event
from engine.events.sums import batch_crc
from engine.native import kernel

__all__ = ["Event"]  # re-exported: defined in engine.events.codec (the C twin builds it)

#: ``status``: ``hi`` was reached; the replay is complete.
RUN_DONE = 0
#: ``status``: ``max_events`` were decoded; call again with the returned state.
RUN_MORE = 1
#: ``status``: the block at ``offset`` fails a check; ``detail`` is its 24-byte header.
RUN_BAD = 2
#: ``status``: ``offset`` (a link) does not leave room for ``detail`` bytes in [8, limit).
RUN_LINK = 3
#: ``status``: a read at ``offset`` returned fewer than the ``detail`` bytes needed.
RUN_SHORT = 4
#: ``status``: the ``data.crc`` batch holding the block at ``offset`` fails its
#: check; ``detail`` is ``(k, got)``: the entry's index and the CRC-32 computed
#: (``None`` when the batch failed before, ``-1`` when it is cut short by the end
#: of the file).
RUN_SUM = 5
#: ``prev`` value meaning "do not check the first block's previous link" (replay
#: from an id's first live block, whose ``previous`` may point at deleted blocks).
ANY_PREVIOUS = -1
#: The first read-ahead window of a replay (bytes), before block sizes are known.
MIN_WINDOW = 4096

_unpack = BLOCK_HEADER.unpack_from
_tuple_new = tuple.__new__

#: Result of a :func:`read_runs` call: (events, offset, prev, expected, want, status, detail).
RunResult = tuple[list[Event], int, int, int, int, int, Any]
ReadAt = Callable[[int, int], bytes]
#: ``status`` of the walker (never of :func:`read_runs`): it needs a window; the
#: walk's window slots say which (read ``walk[W_SIZE]`` bytes at ``walk[W_BASE]``
#: and call again with them: ``walk[W_FRESH]`` says what they must hold).
RUN_READ = 6

# The walk: a 104-byte ``bytearray`` the driver makes per chain walk and the
# walker reads and updates in place, so a window costs no argument conversions
# and no result tuples (replay calls the walker once per window, often several
# times per id).  Thirteen native-order int64 slots (``_WALK``), by index:
#: The block to decode next: its offset, ...
W_OFFSET = 0
#: ... the offset its ``previous`` link must name (:data:`ANY_PREVIOUS`: any), ...
W_PREV = 1
#: ... and its sequence number.
W_EXPECTED = 2
#: The next window's size (read-ahead, see :func:`walk_runs_py`).
W_WANT = 3
#: The ``data.crc`` batch ``[bs, be)`` last found checked (0, 0: none).
W_BS = 4
W_BE = 5
#: Fixed for the walk: the last sequence number wanted, ...
W_HI = 6
#: ... the committed length of the file (nothing at or past it is read), ...
W_LIMIT = 7
#: ... the largest window, ...
W_CAP = 8
#: ... and how many events the walk's list may hold before :data:`RUN_MORE`.
W_MAX = 9
#: The window slots.  In: the window ``buf`` is (its offset in the file, its
#: size as asked for, ``fresh``: what it must hold, see :func:`walk_runs_py`).
#: Out: the detail of the status (see :func:`run_detail`): for :data:`RUN_READ`
#: the next window ``(start, size, fresh)``.
W_BASE = 10
W_SIZE = 11
W_FRESH = 12
#: Slots in a walk.
WALK_SLOTS = 13
#: The walk's layout: 13 int64 in native byte order (the C twin copies it as
#: ``long long[13]``).
_WALK = struct.Struct("=13q")
assert _WALK.size == WALK_SLOTS * 8 == 104
#: Bytes in a walk.
WALK_SIZE = _WALK.size
#: ``(base, size)``: the window slots a :data:`RUN_READ` asks for, at byte ``W_BASE * 8``.
_WINDOW = struct.Struct("=2q")
assert _WINDOW.size == 16
#: Four consecutive slots of a walk: its state (``W_OFFSET`` .. ``W_WANT``, at
#: byte 0), which a driver returns, or its fixed slots (``W_HI`` .. ``W_MAX``,
#: at byte ``W_HI * 8``), which a stop keeps.
_FOUR_SLOTS = struct.Struct("=4q")
assert _FOUR_SLOTS.size == 32
_pack_walk = _WALK.pack
_window = _WINDOW.unpack_from
_AT_WINDOW = W_BASE * 8
#: ``walk[W_SIZE]`` after :data:`RUN_SUM` for a batch that failed before (the
#: detail's ``None``).
SUM_FAILED_BEFORE = -2

#: ``data.crc`` as the walker checks it: ``(ends, lasts, crcs, checked)``, the
#: arrays of :class:`engine.events.sumfiles.DataSums` (``array("q")``,
#: ``array("q")``, ``array("I")``, ``bytearray``: 0 unchecked, 1 good, 2 bad).
Sums = tuple[Any, Any, Any, bytearray]
Walker = Callable[[bytes, bytearray, list[Event], "Sums | None"], int]


def walk_slots(walk: bytearray) -> tuple[int, ...]:
    """The 13 slots of a walk (see the ``W_*`` indexes)."""
    return _WALK.unpack(walk)


def run_detail(status: int, walk: bytearray, buf: bytes) -> Any:
    """The detail of a walker's ``status`` (``buf``: the window it was given):
    ``(start, size, fresh)`` for :data:`RUN_READ`, the block's 24-byte header for
    :data:`RUN_BAD`, the bytes needed for :data:`RUN_LINK` / :data:`RUN_SHORT`,
    ``(k, got)`` for :data:`RUN_SUM` (``got``: the CRC-32 computed, ``-1`` for a
    batch cut short, ``None`` for one that failed before), else ``None``."""
    slots = _WALK.unpack(walk)
    if status == RUN_READ:
        return slots[W_BASE], slots[W_SIZE], slots[W_FRESH]
    if status == RUN_BAD:
        rel = slots[W_BASE]
        return buf[rel : rel + BLOCK_HEADER_SIZE]
    if status in (RUN_LINK, RUN_SHORT):
        return slots[W_BASE]
    if status == RUN_SUM:
        got = slots[W_SIZE]
        return slots[W_BASE], None if got == SUM_FAILED_BEFORE else got
    return None


def _batch_of(ends: Any, offset: int) -> int:
    """Index of the batch holding ``offset`` (``ends`` ascending, ``offset < ends[-1]``)."""
    return bisect_right(ends, offset)


def walk_runs_py(buf: bytes, walk: bytearray, events: list[Event], sums: Sums | None = None) -> int:
    """Walk one id's chain through the window ``buf`` (the file's bytes from
    ``walk[W_BASE]``) from the state in ``walk`` to sequence number ``walk[W_HI]``,
    appending the events to ``events``: a pure function of bytes (its outputs are
    the caller's ``walk``, ``events`` and ``sums``' ``checked``; no I/O).

    ``walk`` is a ``bytearray`` of :data:`WALK_SIZE` bytes: the ``W_*`` slots. The
    block at ``offset`` must have sequence number ``expected`` and (unless ``prev``
    is :data:`ANY_PREVIOUS`) link back to ``prev``; the walk follows ``next`` links.
    ``hi`` is at most the snapshot's highest, so the last block's link is never
    followed.  Every block must name its own offset, carry the expected sequence
    number and previous link, and have a size in ``[24, limit - offset]`` (``limit``
    is the committed length: nothing at or past it is asked for).  The window must
    lie in ``[0, limit)`` (``base >= 0``).

    When the next block is not all in the window, the walker stops with
    :data:`RUN_READ` and the window slots ``(start, size, fresh)``: the caller
    (:func:`read_runs`) reads that window and calls again with it, and ``fresh``
    says what the window must hold (``need`` bytes, or ``-1``: all of the
    unchecked batch at ``offset``); a shorter one stops the walk with
    :data:`RUN_SHORT` or :data:`RUN_SUM` ``(k, -1)``.  ``fresh`` 0: no such
    promise (the first call, with an empty window).

    Read-ahead (each window is ``want`` bytes, at least what the block needs,
    never past ``limit``): a batch's blocks are adjacent, another id's are not,
    so after a window served blocks, the next ``want`` is what it served (from
    its start to the end of the last block decoded) when the chain then jumps
    elsewhere -- runs tend to be alike -- and twice that when the chain runs on
    past the window; at most ``cap`` and at most what the remaining events can
    need at the last block's size.  (The caller starts with :data:`MIN_WINDOW`.)
    Reading only what a run needs matters: copying the window out of the page
    cache is a good part of replay's cost.

    Checksums: with ``sums`` (``data.crc``'s entries, see :data:`Sums`), the
    batch holding a block in ``[8, ends[-1])`` is checked before the block is
    decoded, unless ``checked`` says it was: a window opened at a block of an
    unchecked batch starts at the batch's start and reaches at least its end, so
    one read serves both.  The walker records a good batch in ``checked`` (the
    only thing it writes: 1) and stops with :data:`RUN_SUM` at a bad one (the
    caller records it: :meth:`engine.events.sumfiles.DataSums.failure`); other
    batches in the window are left alone (another id's damage does not stop
    this one's replay).  Committed bytes never change, so a batch is checked
    once per journal instance.

    Returns the status (one of the ``RUN_*`` constants; its detail is in the
    window slots: :func:`run_detail`) with the state to continue from in
    ``walk``; it has appended the events decoded (``events`` then holds at most
    ``max_events``, and at least one more before :data:`RUN_MORE`).  Never raises
    for bad data; ``ValueError`` / ``TypeError`` for bad arguments (then ``walk``
    is as it was).
    """
    if type(buf) is not bytes:
        raise TypeError("walk_runs: buf must be bytes")
    if type(walk) is not bytearray or len(walk) != WALK_SIZE:
        raise TypeError(f"walk_runs: walk must be a bytearray of {WALK_SIZE} bytes")
    if type(events) is not list:
        raise TypeError("walk_runs: events must be a list")
    offset, prev, expected, want, bs, be, hi, limit, cap, max_events, base, _size, fresh = _WALK.unpack(walk)
    blen = len(buf)
    if base < 0 or (blen and (blen > limit or base > limit - blen)):
        raise ValueError("walk_runs: the window is not inside [0, limit)")
    append = events.append
    served = 0  # end (in buf) of the last block decoded from this window, 0 if none
    last_size = 0  # size of the last block decoded
    if sums is not None:
        if type(sums) is not tuple or len(sums) != 4:
            raise ValueError("walk_runs: sums must be (ends, lasts, crcs, checked)")
        ends, lasts, crcs, checked = sums
        if not len(ends) == len(lasts) == len(crcs) == len(checked):
            raise ValueError("walk_runs: data.crc arrays of different lengths")
        covered = ends[-1] if ends else 0
    else:
        ends = lasts = crcs = None
        checked = bytearray()
        covered = 0
    if fresh < 0:  # the window asked for over the unchecked batch at ``offset``
        if not DATA_HEADER_SIZE <= offset < covered:
            raise ValueError("walk_runs: fresh -1 without a data.crc batch at offset")
        k = _batch_of(ends, offset)
        if base + blen < ends[k]:
            return _stop(walk, offset, prev, expected, want, bs, be, RUN_SUM, k, -1)
    elif fresh > 0 and blen < fresh:
        return _stop(walk, offset, prev, expected, want, bs, be, RUN_SHORT, fresh, 0)
    while True:
        need = 0
        if DATA_HEADER_SIZE <= offset < covered and not bs <= offset < be:
            k = _batch_of(ends, offset)
            if k >= len(ends):
                raise ValueError("walk_runs: data.crc entries do not cover their end")
            batch_state = checked[k]
            s = ends[k - 1] if k else DATA_HEADER_SIZE
            e = ends[k]
            # An entry's last-block offset is looked at (and checked) only when the
            # batch is checked: a batch checked before needs its extent alone.
            bad = not DATA_HEADER_SIZE <= s <= e - 24 or e > limit
            if not bad and batch_state == 0:
                if k >= min(len(lasts), len(crcs)):
                    raise ValueError("walk_runs: data.crc entries do not cover their end")
                bad = not s <= lasts[k] <= e - 24
            if bad:
                raise ValueError(f"walk_runs: data.crc entry {k} is not a batch inside [8, {limit})")
            if batch_state == 2:
                return _stop(walk, offset, prev, expected, want, bs, be, RUN_SUM, k, SUM_FAILED_BEFORE)
            if batch_state == 0:
                if s < base or e > base + blen:
                    need = -1  # a window over the batch
                else:
                    got = batch_crc(buf, s - base, lasts[k] - base, e - base)
                    if got != crcs[k]:
                        return _stop(walk, offset, prev, expected, want, bs, be, RUN_SUM, k, got)
                    checked[k] = 1
                    bs, be = s, e
            else:
                bs, be = s, e
        if need:
            pass
        elif offset < base or offset - base > blen - 24:
            need = 24
        else:
            rel = offset - base
            size, own, previous, nxt, seq = _unpack(buf, rel)
            if own != offset or seq != expected or (previous != prev and prev != ANY_PREVIOUS) \
                    or size < 24 or offset + size > limit:
                return _stop(walk, offset, prev, expected, want, bs, be, RUN_BAD, rel, 0)
            end = rel + size
            if end > blen:
                need = size
            else:
                append(_tuple_new(Event, (seq, buf[rel + 24 : end])))
                if seq >= hi:
                    return _stop(walk, offset, prev, expected, want, bs, be, RUN_DONE, 0, 0)
                served, last_size = end, size
                prev = offset
                offset = nxt
                expected = seq + 1
                if len(events) >= max_events:
                    return _stop(walk, offset, prev, expected, want, bs, be, RUN_MORE, 0, 0)
                continue
        # A new window at ``offset``, holding at least ``need`` bytes.
        if served:
            # The run went on past the window: read twice as much; it ended (the
            # link leads elsewhere): the next run is likely as long as this one.
            grow = 2 * served if offset == base + served else served
            want = min(grow, (hi - expected + 1) * last_size, cap)
            served = 0
        if need < 0:
            # The window starts at the unchecked batch holding ``offset`` (found
            # above: ``s``, ``e``) and reaches at least its end.
            start = s
            stop = limit if max(want, 24) > limit - offset else offset + max(want, 24)
            if stop < e:
                stop = e
        else:
            if offset < DATA_HEADER_SIZE or offset + need > limit:
                return _stop(walk, offset, prev, expected, want, bs, be, RUN_LINK, need, 0)
            start = offset
            stop = offset + min(max(want, need), limit - offset)
            if bs <= offset < be and stop < be:
                stop = be  # the rest of a checked batch: its blocks are likely this id's run
        return _stop(walk, offset, prev, expected, want, bs, be, RUN_READ, start, stop - start, need)


def _stop(walk: bytearray, offset: int, prev: int, expected: int, want: int, bs: int, be: int, status: int,
          d0: int, d1: int, d2: int = 0) -> int:
    """Store the walk's state and ``status``' detail (the window slots) in ``walk``; returns ``status``."""
    hi, limit, cap, max_events = _FOUR_SLOTS.unpack_from(walk, W_HI * 8)
    _WALK.pack_into(walk, 0, offset, prev, expected, want, bs, be, hi, limit, cap, max_events, d0, d1, d2)
    return status


def read_runs_with(walker: Walker, read_at: ReadAt, offset: int, prev: int, expected: int, hi: int, limit: int,
                   cap: int, want: int, max_events: int, sums: Sums | None = None) -> RunResult:
    """Walk one id's chain from the block at ``offset`` to ``hi`` with ``walker``
    (:func:`walk_runs_py` or its C twin), reading the windows it asks for through
    ``read_at`` (the journal's :class:`engine.fs.FileHandle` method: every read
    goes through the file-system seam, and its errors propagate as they are).

    Returns ``(events, offset, prev, expected, want, status, detail)``: at most
    ``max_events`` events and the state to call again from (``RUN_MORE``), or why
    the walk stopped (see :func:`walk_runs_py`).
    """
    # (Kept flat: one pass of this loop per window, i.e. per block a replay reads.)
    events: list[Event] = []
    if DATA_HEADER_SIZE <= offset <= limit - BLOCK_HEADER_SIZE:
        # The first window is the walker's own first request, made here: a
        # block's header at ``offset`` with ``want`` bytes of read-ahead.  (A
        # window that does not start an unchecked data.crc batch is answered
        # with the batch's window, as any other.)
        size = want if want > BLOCK_HEADER_SIZE else BLOCK_HEADER_SIZE
        if size > limit - offset:
            size = limit - offset
        walk = bytearray(_pack_walk(offset, prev, expected, want, 0, 0, hi, limit, cap, max_events,
                                    offset, size, BLOCK_HEADER_SIZE))
        buf = read_at(offset, size)
    else:  # a link out of the file: the walker says so
        walk = bytearray(_pack_walk(offset, prev, expected, want, 0, 0, hi, limit, cap, max_events, 0, 0, 0))
        buf = b""
    status = walker(buf, walk, events, sums)
    while status == RUN_READ:
        base, size = _window(walk, _AT_WINDOW)
        buf = read_at(base, size)
        status = walker(buf, walk, events, sums)
    offset, prev, expected, want = _FOUR_SLOTS.unpack_from(walk)
    return events, offset, prev, expected, want, status, None if status < RUN_BAD else run_detail(status, walk, buf)


def read_runs_py(read_at: ReadAt, offset: int, prev: int, expected: int, hi: int, limit: int,
                 cap: int, want: int, max_events: int, sums: Sums | None = None) -> RunResult:
    """:func:`read_runs_with` the pure walker, :func:`walk_runs_py`."""
    return read_runs_with(walk_runs_py, read_at, offset, prev, expected, hi, limit, cap, want, max_events, sums)


def run_error(status: int, detail: Any, offset: int, prev: int, expected: int, limit: int,
              path: str) -> CorruptFileError:
    """The typed error for a walker that stopped with ``status`` (not done/more)."""
    if status == RUN_BAD:
        size, own, previous, _nxt, seq = _unpack(detail, 0)
        want_prev = "any" if prev == ANY_PREVIOUS else str(prev)
        return CorruptFileError(
            path, offset,
            f"block {offset}: own offset {offset}, sequence number {expected}, previous {want_prev}, "
            f"size in [24, {limit - offset}]",
            f"own offset {own}, sequence number {seq}, previous {previous}, size {size}")
    if status == RUN_LINK:
        return CorruptFileError(path, offset, f"a block link inside [8, {limit})", str(offset))
    if status == RUN_SHORT:
        what = "a 24-byte block header" if detail == BLOCK_HEADER_SIZE else f"{detail} bytes of block"
        return CorruptFileError(path, offset, what, "end of file")
    raise ValueError(f"not an error status: {status}")


#: The C twin of :func:`walk_runs_py`, or ``None`` when it is not available.
walk_runs_native: Walker | None = kernel("events.walk_runs")


#: :func:`read_runs_py` with the C walker, or ``None`` when it is not available
#: (a ``partial``: no Python frame of its own, replay calls it once per id).
read_runs_native: Callable[..., RunResult] | None = (
    None if walk_runs_native is None else partial(read_runs_with, walk_runs_native))
#: The chain walk replay uses: the C walker when available, else the reference.
read_runs: Callable[..., RunResult] = read_runs_native if read_runs_native is not None else read_runs_py
