"""The per-record fast path of :meth:`AppendLog.append`, and its native twin.

:class:`Appender` is the pure-Python reference of ``engine.applog._native.Appender``
(``engine/applog/_native.c``): both must give the same results, bytes and errors
on every call (``tests/applog/test_applog_native.py`` checks that with hypothesis).

What it does: while *armed*, ``append(data[, flags[, time_ns]])`` with a ``bytes``
payload, an int flags and a None or in-range time, for a record that fits the
active segment and a buffer that is not full, encodes the record into its own
pending buffers (log bytes, ``.crc`` entries, index entries; layouts in
:mod:`engine.applog.codec`) and returns the record's index, calling ``flush`` first
when the pending bytes reach ``flush_at`` (the writer's buffer is full).  Every other call
goes, unchanged, to ``slow`` (the writer's own ``AppendLog.append``), which
validates, rolls segments, flushes and raises the reference errors.  So the fast
path never raises a validation error of its own and never has side effects on a
call it hands over.

How the writer uses it (see :mod:`engine.applog.log`): only the *native* type is
installed as ``log.append`` (sync ``"never"`` or a period), because it runs without
the writer's lock: the C code calls no Python code and never releases the GIL, so
one call is atomic with respect to other threads.  Before any of its own code
reads or changes the log's state (every flush, read, sync, roll, close), the
writer disarms the appender and :meth:`take` s its pending records into its
buffers; only the writer's slow ``append``, holding its lock, arms it again with
the current state.  This Python class is not atomic that way (a thread switch can
happen between any two bytecodes), so with pure Python the writer keeps its
locked ``append`` and this class serves as the executable specification.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

from engine.applog.codec import CRC_SIZE, ENTRY_SIZE, INDEX_ENTRY, MAX_FLAGS, MAX_RECORD_SIZE, RECORD_HEADER

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_CRC = struct.Struct("<I")  # one .crc entry: u32 CRC-32, 4 bytes
assert _CRC.size == CRC_SIZE


class Appender:
    """Pure-Python reference of the native appender (see the module docstring)."""

    def __init__(self, slow: Callable[..., int], flush: Callable[[], object]) -> None:
        if not callable(slow) or not callable(flush):
            raise TypeError("slow and flush must be callable")
        self.slow = slow
        self.flush = flush
        self.armed = False
        self.next_index = 0  # index of the next record
        self.log_size = 0  # active log's size including pending records
        self.seg_count = 0  # records in the active segment including pending ones
        self.last_time = INT64_MIN  # newest record's time (INT64_MIN: none)
        self.segment_bytes = 0
        self.flush_at = 0  # pending log bytes at which calls go to the slow path
        self.pending = 0  # records buffered since the last take()
        self._first_time = 0
        self._log = bytearray()
        self._crc = bytearray()
        self._idx = bytearray()

    def append(self, *args: Any, **kwargs: Any) -> int:
        """``append(data, flags=0, time_ns=None)``: the record's index (see above)."""
        if not self.armed or kwargs or not 1 <= len(args) <= 3 or type(args[0]) is not bytes:
            return self.slow(*args, **kwargs)
        data: bytes = args[0]
        flags = 0
        if len(args) >= 2:
            flags = args[1]
            if type(flags) is not int or not 0 <= flags <= MAX_FLAGS:
                return self.slow(*args)
        size = len(data)
        if size > MAX_RECORD_SIZE:
            return self.slow(*args)
        if len(args) < 3 or args[2] is None:
            t = time.time_ns()
            if t < self.last_time:  # the clock stepped back: times never do
                t = self.last_time
        else:
            t = args[2]
            if type(t) is not int or not INT64_MIN <= t <= INT64_MAX or t < self.last_time:
                return self.slow(*args)
        offset = self.log_size
        end = offset + RECORD_HEADER.size + size
        if end > INT64_MAX or (end > self.segment_bytes and self.seg_count) or len(self._log) >= self.flush_at:
            return self.slow(*args)
        index = self.next_index
        if not 0 <= index < INT64_MAX:
            return self.slow(*args)
        self._put(data, flags, t)
        if len(self._log) >= self.flush_at:
            # The buffer is full: the writer flushes now, as its own append would
            # (a failure is raised by this call, the record stays appended).
            self.flush()
        return index

    def extend(self, items: list[bytes], flags: int, time_ns: int, start: int) -> int:
        """Buffer ``items[start:]`` (all with ``flags`` and ``time_ns``) while they fit
        the active segment; return the position of the first one not buffered (a
        new segment is needed for it).  An empty segment takes one record of any
        size.  For ``AppendLog.append_many``, which checked the arguments already:
        wrong ones raise TypeError/ValueError and buffer nothing; armed or not."""
        if type(items) is not list:
            raise TypeError("extend: items must be a list")
        if type(flags) is not int or type(time_ns) is not int or type(start) is not int:
            raise TypeError("extend: flags, time_ns and start must be ints")
        n = len(items)
        if (
            not 0 <= flags <= MAX_FLAGS
            or not max(INT64_MIN, self.last_time) <= time_ns <= INT64_MAX
            or not 0 <= start <= n
        ):
            raise ValueError("extend: flags, time_ns or start out of range")
        for i in range(start, n):
            item = items[i]
            if type(item) is not bytes or len(item) > MAX_RECORD_SIZE:
                raise ValueError(f"extend: item {i} is not bytes of at most {MAX_RECORD_SIZE}")
        i = start
        while i < n:
            item = items[i]
            rec = RECORD_HEADER.size + len(item)
            if self.log_size + rec > INT64_MAX or not 0 <= self.next_index < INT64_MAX:
                raise ValueError("extend: log offset or index out of range")
            if self.log_size + rec > self.segment_bytes and self.seg_count:
                break  # the caller starts a new segment
            self._put(item, flags, time_ns)
            i += 1
        return i

    def _put(self, data: bytes, flags: int, t: int) -> None:
        """Buffer one checked record."""
        head = RECORD_HEADER.pack(len(data), flags, t)
        self._log += head
        self._log += data
        self._crc += _CRC.pack(zlib.crc32(data, zlib.crc32(head)))
        self._idx += INDEX_ENTRY.pack(t, self.next_index, self.log_size)
        if not self.pending:
            self._first_time = t
        self.pending += 1
        self.seg_count += 1
        self.next_index += 1
        self.log_size += RECORD_HEADER.size + len(data)
        self.last_time = t

    def take(self) -> tuple[int, int | None, bytes, bytes, bytes]:
        """``(count, first_time, log, crc, idx)`` of the pending records (``first_time``
        None when there are none), and forget them."""
        out = (
            self.pending,
            self._first_time if self.pending else None,
            bytes(self._log),
            bytes(self._crc),
            bytes(self._idx),
        )
        self.pending = 0
        self._log.clear()
        self._crc.clear()
        self._idx.clear()
        return out


assert INDEX_ENTRY.size == ENTRY_SIZE
