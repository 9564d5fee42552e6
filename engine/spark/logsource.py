"""The Python reference reader of ``engine-log`` (batch and streaming), without Spark.

Spark's ``engine-log`` (reads and the sink) is the JVM connector
(``engine.spark.LogSource``, ``engine/spark/java``); this module is no Spark
data source any more.  Its readers are the reference the connector's byte-level
parity tests compare it with (record for record, error for error), driven
directly as below, and what ``stress/readpaths`` reads through.

Batch (a log directory, a sink dataset, a directory holding logs, globs, or
several paths; the ``log`` column says which log a row is from)::

    spark.read.format("engine-log").load("/data/logs/clicks")
    spark.read.format("engine-log").load(["/data/logs/clicks", "/data/logs/views"])
    spark.read.format("engine-log").option("startingOffsets", '{"clicks": 1200}').load("/data/logs")

Streaming (offsets are the next index per log; ``maxRecordsPerTrigger`` /
``maxBytesPerTrigger`` bound a micro-batch; Trigger.AvailableNow stops at what
existed when the query started)::

    spark.readStream.format("engine-log").option("maxRecordsPerTrigger", 10000).load(path)

Partitions follow the data: one per segment, and segments with more than
``recordsPerPartition`` records are split by index ranges (``minPartitions``
splits further).  Which records are read is chosen by options (Kafka-style
positions, :mod:`engine.spark.logplan`), never by filter pushdown, which
PySpark caches across queries of one DataFrame.  Every record read is checked
against its ``.crc`` checksum; ``mode`` says what a damaged one does.

Which columns are decoded is chosen by a schema given with ``.schema(...)``
(PySpark has no column pruning for Python sources): only the columns it names
are built, and one of only ``log, segment, index, time, time_ns`` is answered
from the IDX files without reading the LOG::

    spark.read.format("engine-log").schema("index long, time timestamp").load(path).count()
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from engine.applog.codec import RECORD_HEADER_SIZE
from engine.errors import ConfigError
from engine.fs import resolve
from engine.spark import logfiles
from engine.spark.logplan import (
    LogPartition,
    LogSpan,
    end_positions,
    plan,
    read_partition,
    spans,
    start_positions,
)
from engine.spark.options import (
    bool_option,
    check_options,
    input_paths,
    int_option,
    lower,
    mode_option,
    read_schema,
    user_schema,
)
from engine.spark.schemas import LOG_SCHEMA

log = logging.getLogger("engine.spark")

SOURCE = "engine-log"
#: Records per partition, and partitions at least (options ``recordsPerPartition``
#: and ``minPartitions``).  Each partition is a Spark task, and a Python source's
#: task has a fixed cost (tens of milliseconds of Python worker round trips,
#: measured with an empty source), so a plan has few, large partitions: up to 4
#: M records each (memory stays bounded by ``batchRecords``), and at least two,
#: so that even a small log is read by two cores (docs/pipeline.md).
DEFAULT_RECORDS_PER_PARTITION = 4_000_000
DEFAULT_MIN_PARTITIONS = 2
DEFAULT_BATCH_RECORDS = 65_536

#: Options of a batch read.
BATCH_OPTIONS = (
    "recordsPerPartition", "batchRecords", "minPartitions", "mode", "failOnDataLoss",
    "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
)
#: Options of a streaming read.
STREAM_OPTIONS = (
    "recordsPerPartition", "batchRecords", "mode", "failOnDataLoss", "maxRecordsPerTrigger",
    "maxBytesPerTrigger", "startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
)
__all__ = ["LogPartition", "LogReader", "LogStreamReader", "plan"]


def _logs(opts: dict[str, str]) -> list[logfiles.LogDir]:
    return logfiles.logs_of(input_paths(SOURCE, opts))


class LogReader(DataSourceReader):
    """Batch reader: plan partitions from the segments and the options, decode to Arrow.

    Everything is decided here, from the options: the reader has no
    ``pushFilters``, so Spark filters rows itself and a plan never depends on a
    query's filters.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        opts = lower(options)
        # The streaming-only options (maxRecordsPerTrigger, ...) are accepted and
        # have no effect, as in Spark's Kafka source, so one set of options serves both.
        check_options(SOURCE, opts, set(BATCH_OPTIONS) | set(STREAM_OPTIONS))
        self.options = opts
        self.schema = user_schema(SOURCE, read_schema(LOG_SCHEMA, opts), schema, opts)
        self.logs = _logs(opts)
        self.per_partition = int_option(opts, "recordsPerPartition", DEFAULT_RECORDS_PER_PARTITION) or 1
        self.batch_records = int_option(opts, "batchRecords", DEFAULT_BATCH_RECORDS) or 1
        self.min_partitions = int_option(opts, "minPartitions", DEFAULT_MIN_PARTITIONS) or 1
        self.mode = mode_option(opts)

    def partitions(self) -> Sequence[InputPartition]:
        found = spans(self.logs)
        starts = start_positions(SOURCE, self.options, found)
        ends = end_positions(SOURCE, self.options, found)
        bounds = {name: (a, ends[name]) for name, a in starts.items()}
        return plan(found, self.per_partition, bounds, self.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, LogPartition):
            return  # an empty plan is read as one InputPartition(None)
        yield from read_partition(self.schema, partition, self.batch_records, self.mode)


def _bytes_upto(span: LogSpan, begin: int, budget: int) -> int:
    """The index past the records from ``begin`` whose log bytes fit in ``budget``
    (at least one record, so a stream always moves)."""
    fs = resolve(None)
    for seg in span.segments:
        if not seg.visible or seg.stop_index <= begin:
            continue
        pos = max(begin - seg.first_index, seg.min_pos)
        # Every record takes at least its 16-byte header: no more entries can fit.
        stop = min(seg.count, pos + budget // RECORD_HEADER_SIZE + 2)
        offsets = logfiles.entry_offsets(fs, seg, pos, stop)
        # offsets[k] is where record pos+k starts; the last entry's end is the next
        # entry's offset, or the segment's end.
        ends = [*offsets[1:], seg.end_offset if stop == seg.count else offsets[-1]]
        base = offsets[0]
        fit = sum(1 for e in ends if e - base <= budget)
        return seg.first_index + pos + max(1, fit)
    return begin


class LogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Structured Streaming over append logs.

    The offset is ``{log name: {"index": next index}}``; indexes are global across
    a log's segments, so the index names the segment too (the one whose first index
    is the largest <= it) and survives rotation and expiry (docs/pipeline.md).
    Records are immutable once visible, so replaying any offset range gives the
    same rows: with a checkpoint and an idempotent or transactional sink, a
    restart neither loses nor duplicates rows.  Records TTL expiry removed
    before the query read them fail the query unless ``failOnDataLoss=false``.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        opts = lower(options)
        check_options(SOURCE, opts, STREAM_OPTIONS)
        self.options = opts
        self.schema = user_schema(SOURCE, read_schema(LOG_SCHEMA, opts), schema, opts)
        self.paths = input_paths(SOURCE, opts)
        self.per_partition = int_option(opts, "recordsPerPartition", DEFAULT_RECORDS_PER_PARTITION) or 1
        self.batch_records = int_option(opts, "batchRecords", DEFAULT_BATCH_RECORDS) or 1
        self.max_records = int_option(opts, "maxRecordsPerTrigger", None)
        self.max_bytes = int_option(opts, "maxBytesPerTrigger", None)
        self.fail_on_data_loss = bool_option(opts, "failOnDataLoss", True)
        self.mode = mode_option(opts)
        raw = opts.get("startingoffsets", "earliest").strip()
        if raw.lower() == "latest" and (opts.get("startingtimestamp") or opts.get("startingoffsetsbytimestamp")):
            raise ConfigError(f"{SOURCE}: give startingOffsets or a starting timestamp, not both")
        self.target: dict[str, int] | None = None
        # Check the positions now, so that a bad one fails the query's definition.
        start_positions(SOURCE, opts, self._spans())

    def _spans(self) -> list[LogSpan]:
        return spans(logfiles.logs_of(self.paths))

    def _ends(self) -> dict[str, tuple[int, int]]:
        """Per log: (first visible index, next index)."""
        return {s.log.name: (s.first, s.next) for s in self._spans()}

    def initialOffset(self) -> dict[str, Any]:
        starts = start_positions(SOURCE, self.options, self._spans())
        return {name: {"index": v} for name, v in sorted(starts.items())}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_records is None else ReadMaxRows(self.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {n: v[1] for n, v in self._ends().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # type: ignore[override]
        found = {s.log.name: s for s in self._spans()}
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        byte_budget = self.max_bytes
        out: dict[str, Any] = {}
        for name in sorted(set(found) | set(start)):
            span = found.get(name)
            first, nxt = (span.first, span.next) if span is not None else (0, 0)
            if self.target is not None:
                nxt = min(nxt, self.target.get(name, 0))
            begin = int(start.get(name, {"index": first})["index"])
            new_end = max(begin, nxt)
            avail_from = max(begin, first)
            if byte_budget is not None and span is not None and new_end > avail_from:
                if byte_budget <= 0:
                    new_end = begin
                else:
                    cut = min(new_end, _bytes_upto(span, avail_from, byte_budget))
                    byte_budget -= _span_bytes(span, avail_from, cut)
                    new_end = cut
            if budget is not None:
                # Records below the first visible index were deleted (TTL expiry or
                # truncate_before) before this query reached them; they do not count.
                take = min(max(0, new_end - avail_from), budget)
                new_end = avail_from + take if take else begin
                budget -= take
            out[name] = {"index": new_end}
        return out

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return {n: {"index": v[1]} for n, v in sorted(self._ends().items())}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        bounds = {}
        for name, e in end.items():
            s = int(start.get(name, {"index": 0})["index"]) if start else 0
            if int(e["index"]) > s:
                bounds[name] = (s, int(e["index"]))
        if not bounds:
            return []
        found = [s for s in self._spans() if s.log.name in bounds]
        parts = plan(found, self.per_partition, bounds)
        covered: dict[str, int] = {}
        for p in parts:
            covered[p.log_name] = covered.get(p.log_name, 0) + p.stop - p.start
        for name, (a, b) in bounds.items():
            lost = b - a - covered.get(name, 0)
            if lost <= 0:
                continue
            what = (f"{SOURCE} stream over {', '.join(self.paths)}: records {a}..{b} of {name!r} were deleted "
                    f"(TTL expiry or truncation) before they were read; {lost} lost")
            if self.fail_on_data_loss:
                raise ConfigError(what + " (set failOnDataLoss=false to skip them with a warning)")
            log.warning("%s", what)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, LogPartition):
            return  # an empty plan is read as one InputPartition(None)
        yield from read_partition(self.schema, partition, self.batch_records, self.mode)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: log records stay until the writer's TTL expiry."""


def _span_bytes(span: LogSpan, a: int, b: int) -> int:
    """Log bytes of records ``[a, b)`` of a log (from the index entries)."""
    fs = resolve(None)
    total = 0
    for seg in span.segments:
        lo, hi = max(a, seg.first_index + seg.min_pos), min(b, seg.stop_index)
        if lo >= hi:
            continue
        offs = logfiles.entry_offsets(fs, seg, lo - seg.first_index, hi - seg.first_index)
        end = logfiles.entry_offsets(fs, seg, hi - seg.first_index, hi - seg.first_index + 1)
        total += (end[0] if end else seg.end_offset) - offs[0]
    return total
