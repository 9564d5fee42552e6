"""Reading runs of one id's linked data blocks: replay's hot loop.

Split off so that it has a C twin (``engine/events/_native.c``, bound through
``engine.native.kernel("events.read_runs")``): the pure-Python :func:`read_runs_py` below is the
reference, and :data:`read_runs` is the native version when it is built and
allowed, else the reference.  Both take the same arguments, make the same
``read_at`` calls and return equal results on every input
(tests/events/test_events_native.py runs both on random valid and corrupted
files).

The walker also checks each batch it decodes blocks of against ``data.crc``
(the ``sums`` it is given: see :func:`read_runs_py`), once per journal instance:
that check is on the first replay's every window, so it lives in the walker
(and its C twin) rather than in a Python wrapper around each read.

The walker reads through the ``read_at`` callable it is given (the journal's
:class:`engine.fs.FileHandle` method, so every read still goes through the file
system seam) and never raises for bad data: it returns the events decoded so far
and *why* it stopped, and the caller (``EventJournal._runs``) hands the events
out and then raises the typed error from :func:`run_error` -- so a consumer sees
every good event before the bad block, as with a block-at-a-time loop.  Errors
raised by ``read_at`` itself (a closed handle, an OSError) propagate as they are.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
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

#: Result of a walker call: (events, offset, prev, expected, want, status, detail).
RunResult = tuple[list[Event], int, int, int, int, int, Any]
ReadAt = Callable[[int, int], bytes]
#: ``data.crc`` as the walker checks it: ``(ends, lasts, crcs, checked)``, the
#: arrays of :class:`engine.events.sumfiles.DataSums` (``array("q")``,
#: ``array("q")``, ``array("I")``, ``bytearray``: 0 unchecked, 1 good, 2 bad).
Sums = tuple[Any, Any, Any, bytearray]


def _batch_of(ends: Any, offset: int) -> int:
    """Index of the batch holding ``offset`` (``ends`` ascending, ``offset < ends[-1]``)."""
    return bisect_right(ends, offset)


def read_runs_py(read_at: ReadAt, offset: int, prev: int, expected: int, hi: int, limit: int,
                 cap: int, want: int, max_events: int, sums: Sums | None = None) -> RunResult:
    """Walk one id's chain from the block at ``offset`` to sequence number ``hi``.

    The block at ``offset`` must have sequence number ``expected`` and (unless
    ``prev`` is :data:`ANY_PREVIOUS`) link back to ``prev``; the walk follows
    ``next`` links.  ``hi`` is at most the snapshot's highest, so the last
    block's link is never followed.  Every block must name its own offset, carry
    the expected sequence number and previous link, and have a size in
    ``[24, limit - offset]`` (``limit`` is the committed length: nothing at or
    past it is read).

    Read-ahead: each read is ``want`` bytes (at least what the block needs,
    never past ``limit``).  A batch's blocks are adjacent, another id's are not,
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

    Returns ``(events, offset, prev, expected, want, status, detail)``: the
    events decoded (at most ``max_events``), the state to continue from, and
    ``status`` (one of the ``RUN_*`` constants) with its ``detail``.
    """
    events: list[Event] = []
    append = events.append
    buf = b""
    base = blen = 0
    served = 0  # end (in buf) of the last block decoded from this window, 0 if none
    last_size = 0  # size of the last block decoded
    if sums is not None:
        if type(sums) is not tuple or len(sums) != 4:
            raise ValueError("read_runs: sums must be (ends, lasts, crcs, checked)")
        ends, lasts, crcs, checked = sums
        if not len(ends) == len(lasts) == len(crcs) == len(checked):
            raise ValueError("read_runs: data.crc arrays of different lengths")
        covered = ends[-1] if ends else 0
    else:
        ends = lasts = crcs = None
        checked = bytearray()
        covered = 0
    bs = be = 0  # the batch last checked or found checked: [bs, be)
    while True:
        rel = offset - base
        need = 0
        if DATA_HEADER_SIZE <= offset < covered and not bs <= offset < be:
            k = _batch_of(ends, offset)
            if k >= len(ends):
                raise ValueError("read_runs: data.crc entries do not cover their end")
            state = checked[k]
            s = ends[k - 1] if k else DATA_HEADER_SIZE
            e = ends[k]
            # An entry's last-block offset is looked at (and checked) only when the
            # batch is checked: a batch checked before needs its extent alone.
            bad = not DATA_HEADER_SIZE <= s <= e - 24 or e > limit
            if not bad and state == 0:
                if k >= min(len(lasts), len(crcs)):
                    raise ValueError("read_runs: data.crc entries do not cover their end")
                bad = not s <= lasts[k] <= e - 24
            if bad:
                raise ValueError(f"read_runs: data.crc entry {k} is not a batch inside [8, {limit})")
            if state == 2:
                return events, offset, prev, expected, want, RUN_SUM, (k, None)
            if state == 0:
                if s < base or e > base + blen:
                    need = -1  # a window over the batch
                else:
                    got = batch_crc(buf, s - base, lasts[k] - base, e - base)
                    if got != crcs[k]:
                        return events, offset, prev, expected, want, RUN_SUM, (k, got)
                    checked[k] = 1
                    bs, be = s, e
            else:
                bs, be = s, e
        if need:
            pass
        elif rel < 0 or rel + 24 > blen:
            need = 24
        else:
            size, own, previous, nxt, seq = _unpack(buf, rel)
            if own != offset or seq != expected or (previous != prev and prev != ANY_PREVIOUS) \
                    or size < 24 or offset + size > limit:
                return events, offset, prev, expected, want, RUN_BAD, buf[rel : rel + 24]
            end = rel + size
            if end > blen:
                need = size
            else:
                append(_tuple_new(Event, (seq, buf[rel + 24 : end])))
                if seq >= hi:
                    return events, offset, prev, expected, want, RUN_DONE, None
                served, last_size = end, size
                prev = offset
                offset = nxt
                expected = seq + 1
                if len(events) >= max_events:
                    return events, offset, prev, expected, want, RUN_MORE, None
                continue
        # A new window at ``offset``, holding at least ``need`` bytes.
        if served:
            # The run went on past the window: read twice as much; it ended (the
            # link leads elsewhere): the next run is likely as long as this one.
            grow = 2 * served if offset == base + served else served
            want = min(grow, (hi - expected + 1) * last_size, cap)
            served = 0
        over_batch = need < 0
        if over_batch:
            # The window starts at the unchecked batch holding ``offset`` (found
            # above: ``s``, ``e``, ``k``) and reaches at least its end.
            need = 24
            start = s
            stop = limit if max(want, need) > limit - offset else offset + max(want, need)
            if stop < e:
                stop = e
        else:
            if offset < DATA_HEADER_SIZE or offset + need > limit:
                return events, offset, prev, expected, want, RUN_LINK, need
            start = offset
            stop = offset + min(max(want, need), limit - offset)
            if bs <= offset < be and stop < be:
                stop = be  # the rest of a checked batch: its blocks are likely this id's run
        buf = read_at(start, stop - start)
        if type(buf) is not bytes:
            raise TypeError(f"read_at must return bytes, not {type(buf).__name__}")
        base, blen = start, len(buf)
        if over_batch and blen < e - start:
            return events, offset, prev, expected, want, RUN_SUM, (k, -1)
        if not over_batch and blen < need:
            return events, offset, prev, expected, want, RUN_SHORT, need


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


#: The C twin of :func:`read_runs_py`, or ``None`` when it is not available.
read_runs_native: Callable[..., RunResult] | None = kernel("events.read_runs")
#: The walker replay uses: the C twin when available, else the reference.
read_runs: Callable[..., RunResult] = read_runs_native if read_runs_native is not None else read_runs_py
