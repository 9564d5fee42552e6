"""``engine-log``: append logs as a Spark batch source, streaming source and sink.

Batch::

    spark.read.format("engine-log").load("/data/logs/clicks")
    spark.read.format("engine-log").option("recordsPerPartition", 500000).load(path)

Streaming (offsets are the next index per log; ``maxRecordsPerTrigger`` bounds a
micro-batch; Trigger.AvailableNow stops at what existed when the query started)::

    spark.readStream.format("engine-log").option("maxRecordsPerTrigger", 10000).load(path)

Sink (each task writes its own shard, the driver publishes them atomically)::

    df.write.format("engine-log").mode("append").save("/data/out")

Partitions follow the data: one per segment, and segments with more than
``recordsPerPartition`` records are split by index ranges.  Filters on ``index``,
``time``/``time_ns`` and ``log`` are answered from the IDX files (binary search)
and applied exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    Filter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from engine.errors import ConfigError
from engine.fs import resolve
from engine.spark import logfiles, sink
from engine.spark.batches import ns_to_timestamp, record_batch, repeat_string
from engine.spark.filters import Pushdown, push
from engine.spark.logcodec import DecodedRun
from engine.spark.schemas import LOG_SCHEMA

log = logging.getLogger("engine.spark")

DEFAULT_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_BATCH_RECORDS = 65_536


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


def _int_option(options: dict[str, str], key: str, default: int) -> int:
    raw = options.get(key, options.get(key.lower()))
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"option {key}={raw!r} is not an integer") from exc
    if value <= 0:
        raise ConfigError(f"option {key} must be positive, not {value}")
    return value


def _path(options: dict[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise ConfigError("engine-log needs a path: .load(PATH) or .option('path', PATH)")
    return path


def run_to_batch(schema: StructType, log_name: str, seg_first: int, run: DecodedRun) -> pa.RecordBatch:
    """Columns of a decoded run -> one Arrow batch of the engine-log schema."""
    n = len(run.index)
    cols = {
        "log": repeat_string(log_name, n),
        "segment": np.full(n, seg_first, dtype=np.int64),
        "index": run.index,
        "time": ns_to_timestamp(run.time_ns),
        "time_ns": run.time_ns,
        "flags": run.flags,
        "data": run.data,
    }
    return record_batch(schema, cols, n)


def plan(
    logs: Iterable[logfiles.LogDir],
    per_partition: int,
    pushdown: Pushdown | None = None,
    index_bounds: dict[str, tuple[int, int]] | None = None,
) -> list[LogPartition]:
    """Partitions covering the visible records, restricted by pushed filters.

    ``index_bounds`` (streaming) restricts each log to an index range ``[a, b)``.
    """
    pd = pushdown or Pushdown()
    names = pd.names.get("log")
    idx = pd.ranges.get("index")
    tr = pd.ranges.get("time_ns")
    out: list[LogPartition] = []
    for ld in logs:
        if names is not None and not names.allows(ld.name):
            continue
        lo = idx.lo if idx else None
        hi = idx.hi if idx else None
        if index_bounds is not None:
            if ld.name not in index_bounds:
                continue
            a, b = index_bounds[ld.name]
            lo = a if lo is None else max(lo, a)
            hi = b if hi is None else min(hi, b)
        for seg in logfiles.list_segments(ld.path):
            if seg.visible == 0:
                continue
            start, stop = logfiles.positions_for(
                resolve(None), seg, lo, hi, tr.lo if tr else None, tr.hi if tr else None)
            while start < stop:
                end = min(stop, start + per_partition)
                out.append(LogPartition(ld.name, seg, start, end))
                start = end
    return out


def read_partition(schema: StructType, part: LogPartition, batch_records: int) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of one partition (called on the executors)."""
    fs = resolve(None)
    for run in logfiles.read_range(fs, part.segment, part.start, part.stop, batch_records):
        yield run_to_batch(schema, part.log_name, part.segment.first_index, run)


class LogReader(DataSourceReader):
    """Batch reader: plan partitions from the segments, decode them to Arrow."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.path = _path(options)
        self.schema = schema
        self.per_partition = _int_option(options, "recordsPerPartition", DEFAULT_RECORDS_PER_PARTITION)
        self.batch_records = _int_option(options, "batchRecords", DEFAULT_BATCH_RECORDS)
        self.pushdown = Pushdown()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        return push(filters, self.pushdown, {"index": "index", "time_ns": "time_ns"},
                    {"time": "time_ns"}, {"log": "log"})

    def partitions(self) -> Sequence[InputPartition]:
        if self.pushdown.empty:
            return []
        return plan(logfiles.dataset_logs(self.path), self.per_partition, self.pushdown)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, LogPartition):
            return  # an empty plan is read as one InputPartition(None)
        yield from read_partition(self.schema, partition, self.batch_records)


def _visible_ends(path: str) -> dict[str, tuple[int, int]]:
    """Per log: (first visible index, next index)."""
    out = {}
    for ld in logfiles.dataset_logs(path):
        segs = [s for s in logfiles.list_segments(ld.path) if s.visible]
        if segs:
            out[ld.name] = (segs[0].first_index + segs[0].min_pos, segs[-1].stop_index)
        else:
            out[ld.name] = (0, 0)
    return out


class LogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Structured Streaming over append logs.

    The offset is ``{log name: {"index": next index}}``; indexes are global across
    a log's segments, so the index names the segment too (the one whose first index
    is the largest <= it) and survives rotation and expiry (docs/pipeline.md).
    Records are immutable once visible, so
    replaying any offset range gives the same rows: with a checkpoint and an
    idempotent or transactional sink, a restart neither loses nor duplicates rows.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.path = _path(options)
        self.schema = schema
        self.per_partition = _int_option(options, "recordsPerPartition", DEFAULT_RECORDS_PER_PARTITION)
        self.batch_records = _int_option(options, "batchRecords", DEFAULT_BATCH_RECORDS)
        raw_max = options.get("maxRecordsPerTrigger", options.get("maxrecordspertrigger"))
        self.max_records = None if raw_max is None else _int_option(options, "maxRecordsPerTrigger", 1)
        self.starting = str(options.get("startingOffsets", options.get("startingoffsets", "earliest")))
        if self.starting not in ("earliest", "latest"):
            raise ConfigError("startingOffsets must be 'earliest' or 'latest'")
        self.target: dict[str, int] | None = None

    def initialOffset(self) -> dict[str, Any]:
        ends = _visible_ends(self.path)
        which = 0 if self.starting == "earliest" else 1
        return {name: {"index": v[which]} for name, v in sorted(ends.items())}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_records is None else ReadMaxRows(self.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {n: v[1] for n, v in _visible_ends(self.path).items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # type: ignore[override]
        ends = _visible_ends(self.path)
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        out: dict[str, Any] = {}
        for name in sorted(set(ends) | set(start)):
            first, nxt = ends.get(name, (0, 0))
            if self.target is not None:
                nxt = min(nxt, self.target.get(name, 0))
            begin = int(start.get(name, {"index": first})["index"])
            new_end = max(begin, nxt)
            if budget is not None:
                # Records below the first visible index were deleted (TTL expiry or
                # truncate_before) before this query reached them; they do not count.
                avail_from = max(begin, first)
                take = min(max(0, new_end - avail_from), budget)
                new_end = avail_from + take if take else begin
                budget -= take
            out[name] = {"index": new_end}
        return out

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return {n: {"index": v[1]} for n, v in sorted(_visible_ends(self.path).items())}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        bounds = {}
        for name, e in end.items():
            s = int(start.get(name, {"index": 0})["index"]) if start else 0
            if int(e["index"]) > s:
                bounds[name] = (s, int(e["index"]))
        if not bounds:
            return []
        logs = [ld for ld in logfiles.dataset_logs(self.path) if ld.name in bounds]
        parts = plan(logs, self.per_partition, None, bounds)
        covered: dict[str, int] = {}
        for p in parts:
            covered[p.log_name] = covered.get(p.log_name, 0) + p.stop - p.start
        for name, (a, b) in bounds.items():
            if covered.get(name, 0) < b - a:
                log.warning("engine-log stream %s/%s: records %d..%d were deleted (expiry or "
                            "truncation) before they were read; %d skipped",
                            self.path, name, a, b, b - a - covered.get(name, 0))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, LogPartition):
            return  # an empty plan is read as one InputPartition(None)
        yield from read_partition(self.schema, partition, self.batch_records)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: log records stay until the writer's TTL expiry."""


@dataclass
class ShardMessage(WriterCommitMessage):
    commit: sink.ShardCommit


class LogWriter(DataSourceArrowWriter):
    """The sink: one shard per task, published atomically by the driver's commit."""

    def __init__(self, options: dict[str, str], overwrite: bool) -> None:
        self.path = _path(options)
        self.overwrite = overwrite
        self.job_id = sink.new_job_id()
        self.segment_bytes = _int_option(options, "segmentBytes", sink.DEFAULT_SEGMENT_BYTES)
        ttl = options.get("ttlSeconds", options.get("ttlseconds"))
        try:
            self.ttl_ns = 0 if ttl is None else int(float(ttl) * 1e9)
        except ValueError as exc:
            raise ConfigError(f"ttlSeconds={ttl!r} is not a number") from exc

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)
        writer = sink.ShardWriter(self.path, self.job_id, sink.shard_name(self.job_id, part, attempt),
                                  segment_bytes=self.segment_bytes, ttl_ns=self.ttl_ns)
        try:
            for batch in iterator:
                sink.write_batch(writer, batch)
            return ShardMessage(writer.finish())
        except BaseException:
            writer.abort()
            raise

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        commits = [m.commit for m in messages if isinstance(m, ShardMessage)]
        sink.commit_job(self.path, commits, overwrite=self.overwrite)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        sink.abort_job(self.path, self.job_id)


class LogStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink: each micro-batch's tasks write shards; the driver publishes
    them with the batch id in the manifest, so a re-run batch is published once.

    One streaming query per (dataset, ``streamName``); the name (default
    ``"default"``) keys the last published batch id in the manifest.
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.path = _path(options)
        self.stream = options.get("streamName", options.get("streamname", "default"))
        self.job_id = "stream-" + sink.new_job_id()
        self.segment_bytes = _int_option(options, "segmentBytes", sink.DEFAULT_SEGMENT_BYTES)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        import uuid

        from pyspark import TaskContext

        ctx = TaskContext.get()
        part, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)
        # A new shard per task per micro-batch (the batch id is not known here).
        name = f"shard-{uuid.uuid4().hex[:12]}-{part:05d}-{attempt}"
        writer = sink.ShardWriter(self.path, self.job_id, name, segment_bytes=self.segment_bytes)
        try:
            for batch in iterator:
                sink.write_batch(writer, batch)
            return ShardMessage(writer.finish())
        except BaseException:
            writer.abort()
            raise

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        commits = [m.commit for m in messages if isinstance(m, ShardMessage)]
        sink.commit_stream_batch(self.path, commits, stream=self.stream, batch_id=batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        sink.abort_shards(self.path, [m.commit for m in messages if isinstance(m, ShardMessage)])


class EngineLogDataSource(DataSource):
    """``engine-log``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "engine-log"

    def schema(self) -> StructType:
        return LOG_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LogStreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return LogWriter(dict(self.options), overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return LogStreamWriter(dict(self.options))
