"""Stress adapter for the append log (``engine.applog``, LOG/IDX format).

Workload: single appends, bursts of single appends and batches (``append_many``)
of self-describing payloads with random flags, and ``truncate_before`` at random
points.  1 KiB segments, so that segments roll and are deleted often.  Sessions
alternate between ``sync="always"`` and a period with an explicit ``sync()``
before each operation is acknowledged (records buffered across appends).

Oracle (issue 9: "indexes dense, times non-decreasing, data identical"):

* the records read back have dense indexes from ``first_index`` to ``next_index``,
  and times that never go down;
* every record at an index that was acknowledged (and not truncated away by an
  acknowledged ``truncate_before``) is there with exactly its data and flags;
* a record at an index that was never acknowledged can only come from the append
  in flight, with its data;
* ``first_index`` is at least the last acknowledged truncation point and moves only
  by truncation;
* ``verify()`` passes; reader processes beside the writer see only whole payloads,
  dense indexes and non-decreasing times.
"""

from __future__ import annotations

import itertools
import random
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.applog import AppendLog
from engine.errors import EngineError
from engine.fs import FileSystem, OsFileSystem, make_dirs
from stress.core import MIN_PAYLOAD, Op, Session, Step, StoreAdapter, Violation, count_read, payload, payload_ok

OPTIONS: dict[str, Any] = {"segment_bytes": 1024, "sync": "always"}
#: About every other session writes with a period instead and syncs
#: explicitly before acknowledging each operation, so that records buffered
#: across appends (flushed only when the buffer fills) meet crashes, kills and
#: readers too.
PERIODIC_OPTIONS: dict[str, Any] = {"segment_bytes": 1024, "sync": 3600, "buffer_bytes": 600}
_SESSIONS = itertools.count()


class AppLogSession(Session):
    def __init__(self, fs: FileSystem, root: str) -> None:
        # Alternate within a process; the root's name varies the first choice
        # (a killed child process opens one session only).
        self.periodic = (next(_SESSIONS) + zlib.crc32(root.encode())) % 2 == 1
        self.log = AppendLog.open(root, fs=fs, **(PERIODIC_OPTIONS if self.periodic else OPTIONS))

    def run(self, op: Op) -> Any:
        result = self._run(op)
        if self.periodic and op[0] != "truncate":
            self.log.sync()  # acknowledged means durable, as under "always"
        return result

    def _run(self, op: Op) -> Any:
        kind = op[0]
        if kind == "append":
            return ("append", self.log.append(payload(0, op[1], op[2]), flags=op[3]))
        if kind == "append_many":
            got = self.log.append_many([(payload(0, tag, size), flags) for tag, size, flags in op[1]])
            return ("append_many", got.start, got.stop)
        if kind == "burst":
            # Single appends back to back (buffered under a period), acknowledged
            # as one batch.
            first = self.log.append(*_burst_args(op[1][0]))
            for item in op[1][1:]:
                self.log.append(*_burst_args(item))
            return ("append_many", first, first + len(op[1]))
        first, nxt = self.log.first_index, self.log.next_index
        point = first + int(op[1] * (nxt - first))
        self.log.truncate_before(point)
        return ("truncate", point)

    def close(self) -> None:
        self.log.close()


@dataclass
class AppLogModel:
    """A recovered log: index -> (data, flags), and its first and next index."""

    records: dict[int, tuple[bytes, int]] = field(default_factory=dict)
    first: int = 0
    next: int = 0


def read_log(fs: FileSystem, root: str) -> tuple[int, int, list[tuple[int, int, int, bytes]]]:
    """Open the writer (recovery), verify, and read every record."""
    log = AppendLog.open(root, fs=fs, **OPTIONS)
    try:
        log.verify()
        first, nxt = log.first_index, log.next_index
        records = [(r.index, r.time_ns, r.flags, r.data) for r in log.scan(first)]
    finally:
        log.close()
    return first, nxt, records


def _burst_args(item: tuple[int, int, int]) -> tuple[bytes, int]:
    tag, size, flags = item
    return payload(0, tag, size), flags


def _expected_batch(op: Op) -> list[tuple[bytes, int]]:
    if op[0] == "append":
        return [(payload(0, op[1], op[2]), op[3])]
    if op[0] in ("append_many", "burst"):
        return [(payload(0, tag, size), flags) for tag, size, flags in op[1]]
    return []


class AppLogAdapter(StoreAdapter):
    name = "applog"
    module = "engine.applog"
    concurrent_readers = True

    def workload(self, rng: random.Random, n: int) -> list[Op]:
        ops: list[Op] = []
        for _ in range(n):
            r = rng.random()
            if r < 0.55:
                ops.append(("append", rng.randrange(2**40), rng.randint(MIN_PAYLOAD, 250), rng.randrange(256)))
            elif r < 0.65:
                burst = tuple(
                    (rng.randrange(2**40), rng.randint(MIN_PAYLOAD, 120), rng.randrange(256))
                    for _ in range(rng.randint(1, 12))
                )
                ops.append(("burst", burst))
            elif r < 0.9:
                batch = tuple(
                    (rng.randrange(2**40), rng.randint(MIN_PAYLOAD, 200), rng.randrange(256))
                    for _ in range(rng.randint(1, 6))
                )
                ops.append(("append_many", batch))
            else:
                ops.append(("truncate", rng.random()))
        return ops

    def prepare(self, fs: FileSystem, root: str) -> None:
        make_dirs(fs, root)

    def session(self, fs: FileSystem, root: str) -> Session:
        return AppLogSession(fs, root)

    def empty_model(self) -> Any:
        return AppLogModel()

    def check(self, fs: FileSystem, root: str, base: Any, acked: list[Step], inflight: Op | None) -> Any:
        first, nxt, records = read_log(fs, root)
        known: dict[int, tuple[bytes, int]] = dict(base.records)
        acked_next = base.next
        cut = base.first  # lowest first_index allowed
        for step in acked:
            kind = step.result[0]
            if kind == "append":
                index = step.result[1]
                if index != acked_next:
                    raise Violation(f"append returned index {index}, expected {acked_next} (indexes must be dense)")
                known[index] = _expected_batch(step.op)[0]
                acked_next = index + 1
            elif kind == "append_many":
                start, stop = step.result[1], step.result[2]
                batch = _expected_batch(step.op)
                if start != acked_next or stop - start != len(batch):
                    raise Violation(f"append_many returned range({start}, {stop}) for {len(batch)} records "
                                    f"at next index {acked_next}")
                for offset, rec in enumerate(batch):
                    known[start + offset] = rec
                acked_next = stop
            elif kind == "truncate":
                cut = max(cut, step.result[1])
        pending = _expected_batch(inflight) if inflight is not None else []
        may_cut = inflight is not None and inflight[0] == "truncate"
        indexes = [r[0] for r in records]
        if indexes != list(range(first, nxt)):
            raise Violation(f"indexes are not dense from first_index {first} to next_index {nxt}: {indexes[:20]}...")
        times = [r[1] for r in records]
        if any(b < a for a, b in itertools.pairwise(times)):
            raise Violation("record times go backwards")
        if first < cut:
            raise Violation(f"first_index {first} is below the acknowledged truncation point {cut}")
        if first > cut and not may_cut:
            raise Violation(f"first_index {first} is above the last truncation point {cut}: records were lost")
        if nxt < acked_next:
            raise Violation(f"next_index {nxt} is below the acknowledged end {acked_next}: appends were lost")
        if nxt > acked_next + len(pending):
            raise Violation(f"next_index {nxt} is beyond what was appended ({acked_next} + {len(pending)} in flight)")
        for index, _t, flags, data in records:
            expected = known.get(index)
            if expected is None:
                offset = index - acked_next
                if not 0 <= offset < len(pending):
                    raise Violation(f"record {index} was never appended")
                expected = pending[offset]
            if (data, flags) != expected:
                raise Violation(f"record {index} reads back different data/flags than appended "
                                f"({len(data)} bytes, whole payload: {payload_ok(data)})")
        if not may_cut:
            lost = [i for i in range(max(cut, base.first), acked_next) if i not in range(first, nxt)]
            if lost:
                raise Violation(f"acknowledged records are gone: {lost[:20]}")
        return AppLogModel({r[0]: (r[3], r[2]) for r in records}, first, nxt)

    def snapshot(self, fs: FileSystem, root: str) -> Any:
        return read_log(fs, root)

    def damage_is_truncation(self, clean: Any, damaged: Any) -> bool:
        c_first, _c_next, c_records = clean
        d_first, _d_next, d_records = damaged
        return d_first == c_first and d_records == c_records[: len(d_records)]

    def reader_loop(self, root: str, stop: Callable[[], bool]) -> str | None:
        fs = OsFileSystem()
        reader = None
        last_seen = -1
        while not stop():
            try:
                if reader is None:
                    reader = AppendLog.open_reader(root, fs=fs)
                reader.refresh()
                first = reader.first_index
                prev_index, prev_time = None, None
                for rec in reader.scan(first):
                    if prev_index is not None and rec.index != prev_index + 1:
                        # A gap is only allowed if truncate_before removed those
                        # records meanwhile: then first_index is now past the gap.
                        reader.refresh()
                        if reader.first_index < rec.index:
                            return (f"reader saw index {rec.index} after {prev_index} although first_index "
                                    f"is {reader.first_index} (records skipped, not truncated)")
                    if prev_time is not None and rec.time_ns < prev_time:
                        return f"reader saw time going back at index {rec.index}"
                    if not payload_ok(rec.data):
                        return f"reader saw record {rec.index} whose data is not a whole payload"
                    prev_index, prev_time = rec.index, rec.time_ns
                if prev_index is not None:
                    last_seen = max(last_seen, prev_index)
                count_read()
            except FileNotFoundError:
                pass  # a segment was deleted (truncation) between listing and reading
            except EngineError as exc:
                # The writer may be mid-recovery after a kill; only a repeated
                # complaint would matter, so look again shortly.
                if reader is not None:
                    reader.close()
                reader = None
                del exc
            time.sleep(0.005)
        if reader is not None:
            reader.close()
        return None


ADAPTER = AppLogAdapter()
