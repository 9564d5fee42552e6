"""Planning and reading ``engine-log`` partitions (no Spark session needed).

Which records a read covers is decided by the read's *options* only, never by
Spark's filter pushdown: PySpark (4.x) caches the plan a pushdown produced on
the DataFrame's relation and reuses it for the next query on that DataFrame,
so a ``df.count()`` after ``df.where("index = 142")`` would count one row
(docs/pipeline.md, "Why no filter pushdown").  Options are part of the
DataFrame's definition, so a pruned read can never leak into another query.

Positions, as in Spark's Kafka source (indexes are the offsets; a log's name
is its ``log`` column value)::

    startingOffsets   "earliest" (default) | "latest" | {"clicks": 1200, ...}  (-2 earliest, -1 latest)
    endingOffsets     "latest" (default) | {"clicks": 5000, ...}  (exclusive; -1 latest)
    startingTimestamp / endingTimestamp                    ms since the epoch, every log
    startingOffsetsByTimestamp / endingOffsetsByTimestamp  {"clicks": ms, ...}

A timestamp selects the first record whose time is at or after it (so an
ending timestamp is exclusive).  ``failOnDataLoss`` (default true) makes a
starting offset below a log's first live index (records TTL expiry removed) an
error instead of a silent skip.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from engine.errors import ConfigError, CorruptFileError
from engine.fs import FileSystem, resolve
from engine.spark import logfiles
from engine.spark.batches import CORRUPT_COLUMN, guarded, ns_to_timestamp, record_batch, repeat_string
from engine.spark.logcodec import DecodedRun
from engine.spark.options import DROPMALFORMED, FAILFAST, bool_option, json_positions

log = logging.getLogger("engine.spark")

EARLIEST = -2
LATEST = -1


class LogPartition(InputPartition):
    """Positions ``[start, stop)`` of one segment of one log."""

    log_name: str
    segment: logfiles.Segment
    start: int
    stop: int

    def __init__(self, log_name: str, segment: logfiles.Segment, start: int, stop: int) -> None:
        super().__init__((log_name, segment.first_index, start, stop))
        self.log_name = log_name
        self.segment = segment
        self.start = start
        self.stop = stop


@dataclass(frozen=True)
class LogSpan:
    """One log's visible records: its segments, first live index and next index."""

    log: logfiles.LogDir
    segments: tuple[logfiles.Segment, ...]

    @property
    def first(self) -> int:
        segs = [s for s in self.segments if s.visible]
        return segs[0].first_index + segs[0].min_pos if segs else self.next

    @property
    def next(self) -> int:
        return self.segments[-1].stop_index if self.segments else 0

    def index_at_time(self, fs: FileSystem, t_ns: int) -> int:
        """The first index whose record time is >= ``t_ns`` (``next`` if none)."""
        for seg in self.segments:
            if not seg.visible or seg.last_time_ns is None or seg.last_time_ns < t_ns:
                continue
            a, _b = logfiles.positions_for(fs, seg, None, None, t_ns, None)
            return seg.first_index + a
        return self.next


def spans(logs: Iterable[logfiles.LogDir], fs: FileSystem | None = None) -> list[LogSpan]:
    fs = resolve(fs)
    return [LogSpan(ld, tuple(logfiles.list_segments(ld.path, fs))) for ld in logs]


def _per_log(source: str, key: str, raw: str | None, names: set[str]) -> dict[str, int] | None:
    if raw is None:
        return None
    positions = json_positions(source, key, raw)
    unknown = sorted(set(positions) - names)
    if unknown:
        raise ConfigError(f"{source}: option {key} names {unknown}, which are not logs of this read; "
                          f"its logs: {sorted(names)}")
    return positions


def start_positions(source: str, opts: Mapping[str, str], found: list[LogSpan],
                    fs: FileSystem | None = None) -> dict[str, int]:
    """The first index to read per log, from the starting options."""
    fs = resolve(fs)
    names = {s.log.name for s in found}
    by_ts = _per_log(source, "startingOffsetsByTimestamp", opts.get("startingoffsetsbytimestamp"), names)
    ts = opts.get("startingtimestamp")
    raw = opts.get("startingoffsets", "earliest").strip()
    keyword = raw.lower() if raw.lower() in ("earliest", "latest") else None
    by_index = None if keyword else _per_log(source, "startingOffsets", raw, names)
    fail = bool_option(opts, "failOnDataLoss", True)
    out = {}
    for s in found:
        name = s.log.name
        at_time = _by_time(fs, source, s, by_ts, ts, "startingTimestamp")
        if at_time is not None:
            pos = at_time
        elif by_index is not None and name in by_index:
            pos = by_index[name]
            if pos == EARLIEST:
                pos = s.first
            elif pos == LATEST:
                pos = s.next
            elif pos < 0:
                raise ConfigError(f"{source}: startingOffsets for {name!r} is {pos}; use an index, -2 or -1")
            elif pos < s.first and fail:
                raise ConfigError(
                    f"{source}: startingOffsets {pos} for {name!r} is below its first live index {s.first} "
                    "(records removed by TTL expiry or truncation); set failOnDataLoss=false to start there")
        else:
            pos = s.next if keyword == "latest" else s.first
        out[name] = max(pos, s.first)
    return out


def end_positions(source: str, opts: Mapping[str, str], found: list[LogSpan],
                  fs: FileSystem | None = None) -> dict[str, int]:
    """The index to stop before per log, from the ending options."""
    fs = resolve(fs)
    names = {s.log.name for s in found}
    by_ts = _per_log(source, "endingOffsetsByTimestamp", opts.get("endingoffsetsbytimestamp"), names)
    ts = opts.get("endingtimestamp")
    raw = opts.get("endingoffsets", "latest").strip()
    if raw.lower() == "earliest":
        raise ConfigError(f"{source}: endingOffsets cannot be 'earliest'")
    by_index = None if raw.lower() == "latest" else _per_log(source, "endingOffsets", raw, names)
    out = {}
    for s in found:
        name = s.log.name
        at_time = _by_time(fs, source, s, by_ts, ts, "endingTimestamp")
        if at_time is not None:
            pos = at_time
        elif by_index is not None and name in by_index and by_index[name] != LATEST:
            pos = by_index[name]
            if pos < 0:
                raise ConfigError(f"{source}: endingOffsets for {name!r} is {pos}; use an index or -1")
        else:
            pos = s.next
        out[name] = min(pos, s.next)
    return out


def _by_time(fs: FileSystem, source: str, span: LogSpan, by_ts: dict[str, int] | None, ts: str | None,
             key: str) -> int | None:
    """The index a timestamp option gives ``span``: its entry in the per-log map
    (``...OffsetsByTimestamp``) first, else the one for every log (``key``), else None."""
    if by_ts is not None and span.log.name in by_ts:
        return span.index_at_time(fs, by_ts[span.log.name] * 1_000_000)
    if ts is not None:
        return span.index_at_time(fs, _ms(source, key, ts) * 1_000_000)
    return None


def _ms(source: str, key: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{source}: option {key}={raw!r} is not milliseconds since the epoch") from exc


def plan(found: Iterable[LogSpan], per_partition: int, bounds: Mapping[str, tuple[int, int]] | None = None,
         min_partitions: int = 1) -> list[LogPartition]:
    """Partitions covering each log's records in ``bounds[name] = [a, b)`` (every
    visible record of a log ``bounds`` does not name, if ``bounds`` is None).

    Partitions follow the segments; a segment with more than ``per_partition``
    records is split, and all are split further until there are at least
    ``min_partitions``.
    """
    found = list(found)
    ranges: list[tuple[str, logfiles.Segment, int, int]] = []
    for s in found:
        if bounds is not None and s.log.name not in bounds:
            continue
        lo, hi = bounds[s.log.name] if bounds is not None else (None, None)
        for seg in s.segments:
            if seg.visible == 0:
                continue
            a, b = seg.min_pos, seg.count
            if lo is not None:
                a = max(a, lo - seg.first_index)
            if hi is not None:
                b = min(b, hi - seg.first_index)
            if a < b:
                ranges.append((s.log.name, seg, a, b))
    total = sum(b - a for _n, _s, a, b in ranges)
    if min_partitions > 1 and total:
        per_partition = max(1, min(per_partition, math.ceil(total / min_partitions)))
    out: list[LogPartition] = []
    for name, seg, a, b in ranges:
        while a < b:
            end = min(b, a + per_partition)
            out.append(LogPartition(name, seg, a, end))
            a = end
    return out


#: The engine-log columns the IDX files alone hold (with the log's and the
#: segment's names): a read asking only for these never reads the LOG.
INDEX_COLUMNS = frozenset({"log", "segment", "index", "time", "time_ns"})


def _columns(schema: StructType, log_name: str, seg: logfiles.Segment, index: np.ndarray, time_ns: np.ndarray,
             flags: np.ndarray | None = None, data: pa.Array | None = None) -> dict[str, object]:
    """The columns ``schema`` asks for (only those are built)."""
    n = len(index)
    makers = {
        "log": lambda: repeat_string(log_name, n),
        "segment": lambda: np.full(n, seg.first_index, dtype=np.int64),
        "index": lambda: index,
        "time": lambda: ns_to_timestamp(time_ns),
        "time_ns": lambda: time_ns,
        "flags": lambda: flags,
        "data": lambda: data,
    }
    return {name: makers[name]() for name in schema.fieldNames() if name in makers}


def run_to_batch(schema: StructType, log_name: str, seg: logfiles.Segment, run: DecodedRun,
                 mode: str) -> pa.RecordBatch:
    """Columns of a decoded run -> one Arrow batch of ``schema`` (the engine-log
    schema or some of its columns), with ``mode`` applied to records failing
    their checksum."""
    n = len(run.index)
    bad = run.bad if run.bad is not None else np.empty(0, dtype=np.int64)
    cols = _columns(schema, log_name, seg, run.index, run.time_ns, run.flags, run.data)
    if bad.size == 0:
        return record_batch(schema, cols, n)
    offsets = run.offsets if run.offsets is not None else np.zeros(n, dtype=np.int64)
    first = int(bad[0])
    problem = CorruptFileError(seg.log_path, int(offsets[first]),
                               f"record {int(run.index[first])} matching its checksum ({logfiles.crc_path(seg)})",
                               "a record that does not")
    if mode == FAILFAST:
        raise problem
    if mode == DROPMALFORMED:
        log.warning("%s: %d record(s) failing their checksum left out (first: %s)", seg.log_path, bad.size, problem)
        keep = np.ones(n, dtype=bool)
        keep[bad] = False
        return record_batch(schema, cols, n).filter(pa.array(keep))
    notes: list[str | None] = [None] * n
    for i in bad.tolist():
        notes[i] = str(CorruptFileError(seg.log_path, int(offsets[i]),
                                        f"record {int(run.index[i])} matching its checksum", "a record that does not"))
    cols[CORRUPT_COLUMN] = pa.array(notes, type=pa.string())
    return record_batch(schema, cols, n)


def read_partition(schema: StructType, part: LogPartition, batch_records: int,
                   mode: str = FAILFAST) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of one partition (called on the executors), with only
    the columns of ``schema``: one of only :data:`INDEX_COLUMNS` is answered
    from the IDX file without reading the LOG (see
    :func:`engine.spark.logfiles.read_index_range` for what is checked then);
    one without ``data`` does not build the payload column."""
    fs = resolve(None)
    names = set(schema.fieldNames()) - {CORRUPT_COLUMN}
    seg = part.segment

    def batches() -> Iterator[pa.RecordBatch]:
        if names <= INDEX_COLUMNS:
            for idx_run in logfiles.read_index_range(fs, seg, part.start, part.stop, batch_records):
                cols = _columns(schema, part.log_name, seg, idx_run.index, idx_run.time_ns)
                yield record_batch(schema, cols, len(idx_run.index))
            return
        for run in logfiles.read_range(fs, seg, part.start, part.stop, batch_records, payload="data" in names):
            yield run_to_batch(schema, part.log_name, seg, run, mode)

    yield from guarded(schema, mode, batches(), {"log": part.log_name, "segment": part.segment.first_index},
                       part.segment.log_path)
