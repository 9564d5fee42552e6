"""The Python reference reader of ``engine-queue`` batch reads, without Spark.

Spark's ``engine-queue`` (batch and streaming reads) is the JVM connector
(``engine.spark.QueueSource``, ``engine/spark/java``; its streaming reader takes
items through :mod:`engine.spark.queuebridge`); this module is no Spark data
source any more.  :class:`QueueReader` is the reference the connector's parity
tests compare it with (row for row, error for error:
``tests/spark/test_spark_jvm_queue_parity.py``), driven directly::

    reader = QueueReader({"path": "/data/queues", "reader": "billing"}, QUEUE_SCHEMA)
    for part in reader.partitions():
        for batch in reader.read(part):   # pyarrow RecordBatches
            ...

One row per item still pending for a reader (the backlog), read from the
journal and the reader checkpoint files alone: no lock taken, nothing changed.
Partitions per (queue, reader): id ranges of about ``bytesPerPartition``
journal bytes (default 256 MiB), at least ``minPartitions`` (default 2), ending
at journal files' edges where they can (:func:`split_points`).  ``queue`` and
``reader`` (comma-separated names) choose what is read; by default every queue
in the directories and every reader with a checkpoint file (the default reader
``""`` when none has one).  Items are read through the queue's own journal
cursor in its columnar form (:class:`engine.queue.cursor.ColumnCursor`), so
every check the queue's readers make applies; ``mode`` says what damage does.
:func:`pending_puts` lists a reader's pending items one by one (what tests and
the pipeline check a queue with).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from engine.errors import EngineError
from engine.fs import FileSystem, resolve
from engine.queue import checkpoint, codec, naming
from engine.queue.cursor import ColumnCursor, PollingSource
from engine.queue.diagnose import queue_names
from engine.queue.segments import Segment, list_segments
from engine.queue.state import ReaderState
from engine.spark.batches import TIMESTAMP, guarded, ns_to_timestamp, record_batch, repeat_string
from engine.spark.options import (
    check_options,
    input_paths,
    int_option,
    lower,
    mode_option,
    read_schema,
    user_schema,
)
from engine.spark.schemas import QUEUE_SCHEMA

SOURCE = "engine-queue"
BATCH_OPTIONS = ("queue", "reader", "mode", "bytesPerPartition", "minPartitions")
#: The connector's streaming options: accepted and without effect in a batch read (as the connector does).
STREAM_OPTIONS = ("maxRecordsPerTrigger", "maxBytesPerTrigger", "failOnDataLoss")

log = logging.getLogger("engine.spark")

#: Journal bytes per partition of a batch read, and partitions at least per
#: (queue, reader) (options ``bytesPerPartition`` and ``minPartitions``).  Each
#: partition is a Spark task, and a Python source's task has a fixed cost (about
#: 45 ms of Python worker round trips, measured with an empty source), so a plan
#: has few, large partitions: up to 256 MiB of journal each (memory stays bounded
#: by a run of 65,536 items and an 8 MiB read), and at least two, so that even a
#: small backlog is read by two cores (docs/pipeline.md).
DEFAULT_BYTES_PER_PARTITION = 256 << 20
DEFAULT_MIN_PARTITIONS = 2


def reader_names(fs: FileSystem, directory: str, queue: str) -> list[str]:
    """The queue's readers with a checkpoint file; [""] (the default) if none has one."""
    names = sorted(r for f in fs.listdir(directory) if (r := naming.parse_reader(queue, f)) is not None)
    return names or [""]


class PendingRun(NamedTuple):
    """A run of journal records' PUTs as columns (:class:`engine.queue.codec.PutColumns`)
    and which of them are pending: those in ``[first, stop)`` and, when ``keep``
    is not None, where ``keep[k - first]`` is true (the others were confirmed out
    of order)."""

    columns: codec.PutColumns
    first: int
    stop: int
    keep: np.ndarray | None


def pending_runs(fs: FileSystem, directory: str, queue: str, reader: str, after_id: int | None = None,
                 upto_id: int | None = None, known: Sequence[Segment] = ()) -> Iterator[PendingRun]:
    """Items not yet confirmed by ``reader``, oldest first, from the files alone,
    as runs of columns (up to about 65,536 items each; no Python object per item).

    ``after_id``/``upto_id`` restrict to ids in ``(after_id, upto_id]``.  The
    queue's journal cursor reads them (:class:`engine.queue.cursor.ColumnCursor`:
    every check its readers make applies, files are read 8 MiB at a time and
    decoded by :func:`engine.queue.codec.decode_columns`); the ids the reader's
    checkpoint confirmed out of order are masked out in one vectorised pass.
    ``known``: writer files listed already, with their first ids (the plan's),
    whose first records are not read again.
    """
    path = naming.join(directory, naming.reader_name(queue, reader))
    head, done = checkpoint.load_reader_file(fs, path) if fs.exists(path) else (0, ())
    state = ReaderState(head, done)
    start = head if after_id is None else max(head, after_id)
    cursor = ColumnCursor(PollingSource(fs, directory, queue, 0.001, known), start)
    done_ids = np.fromiter(state.done, np.int64, len(state.done)) if state.done else None
    try:
        while (got := cursor.next_columns()) is not None:
            cols, first = got
            ids = np.frombuffer(cols.ids, np.int64)
            stop = cols.items
            if upto_id is not None and ids[-1] > upto_id:
                stop = int(np.searchsorted(ids, upto_id, "right"))  # ascending: the cursor checked
            keep = None
            burnt = _burnt(cols, first, stop) if stop > first else None
            if stop > first and (done_ids is not None or state.gaps or burnt is not None):
                chosen = ids[first:stop]
                keep = np.ones(len(chosen), bool) if done_ids is None else ~np.isin(chosen, done_ids)
                for low, high in state.gaps:
                    keep &= (chosen < low) | (chosen > high)
                if burnt is not None:
                    keep &= ~burnt  # ids a crash took out of the journal: not items
                keep = None if keep.all() else keep
            if stop > first:
                yield PendingRun(cols, first, stop, keep)
            if upto_id is not None and cursor.last_id >= upto_id:
                return  # ids increase: nothing further is in range
    finally:
        cursor.close()


def _burnt(cols: codec.PutColumns, first: int, stop: int) -> np.ndarray | None:
    """Which of the run's PUTs ``first:stop`` are BURNT records
    (:func:`engine.queue.codec.is_burnt`: added and expiring at the epoch, no
    data); None when none is (the common case: one comparison per item)."""
    adds = np.frombuffer(cols.add_times, np.int64)[first:stop]
    zero = adds == 0
    if not zero.any():
        return None
    expires = np.frombuffer(cols.expire_times, np.int64)[first:stop]
    has = np.frombuffer(cols.has_expiry, np.uint8)[first:stop].astype(bool)
    offsets = np.frombuffer(cols.offsets, np.int64)
    empty = offsets[first + 1 : stop + 1] == offsets[first:stop]
    return zero & has & (expires == 0) & empty


def pending_puts(fs: FileSystem, directory: str, queue: str, reader: str,
                 after_id: int | None = None, upto_id: int | None = None) -> Iterator[codec.Put]:
    """:func:`pending_runs` one item at a time."""
    for run in pending_runs(fs, directory, queue, reader, after_id, upto_id):
        c = run.columns
        ids, adds = memoryview(c.ids).cast("q"), memoryview(c.add_times).cast("q")
        expires, errors = memoryview(c.expire_times).cast("q"), memoryview(c.error_counts).cast("i")
        offsets, data = memoryview(c.offsets).cast("q"), c.data
        for k in range(run.first, run.stop):
            if run.keep is None or run.keep[k - run.first]:
                expire = expires[k] if c.has_expiry[k] else None
                yield codec.Put(ids[k], data[offsets[k]:offsets[k + 1]], adds[k], expire, errors[k])


# The columns of PutColumns are little-endian: wrapped as they are (the C kernels
# and this engine run on little-endian machines only).
_INT32_MAX = (1 << 31) - 1


def run_to_batch(schema: StructType, queue: str, reader: str, run: PendingRun) -> pa.RecordBatch:
    """A run's pending items -> one Arrow batch with the columns of ``schema``
    (only those are built, each from the decoder's buffers without a copy but
    for the timestamps' unit and the data's int32 offsets)."""
    c = run.columns
    n = c.items

    def fixed(kind: pa.DataType, raw: bytes) -> pa.Array:
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(raw)])

    makers: dict[str, Callable[[], Any]] = {
        "queue": lambda: repeat_string(queue, n),
        "reader": lambda: repeat_string(reader, n),
        "id": lambda: fixed(pa.int64(), c.ids),
        "add_time": lambda: ns_to_timestamp(np.frombuffer(c.add_times, np.int64) * 1_000_000),
        "expire_time": lambda: _expire_column(c),
        "error_count": lambda: fixed(pa.int32(), c.error_counts),
        "data": lambda: _data_column(c),
    }
    batch = record_batch(schema, {name: makers[name] for name in schema.fieldNames() if name in makers}, n)
    if run.first or run.stop < n:
        batch = batch.slice(run.first, run.stop - run.first)
    if run.keep is not None:
        batch = batch.filter(pa.array(run.keep))
    return batch


def _expire_column(c: codec.PutColumns) -> pa.Array:
    """Expiry times (ms; ``has_expiry`` 0: never, null) as Spark timestamps."""
    has = np.frombuffer(c.has_expiry, np.uint8).view(bool)
    if not has.any():
        return pa.nulls(c.items, TIMESTAMP)
    us = np.frombuffer(c.expire_times, np.int64) * 1000
    valid = None if has.all() else pa.py_buffer(np.packbits(has, bitorder="little"))
    return pa.Array.from_buffers(TIMESTAMP, c.items, [valid, pa.py_buffer(us)])


def _data_column(c: codec.PutColumns) -> pa.Array:
    """The items' data as a binary column: the packed data and its offsets."""
    offsets = np.frombuffer(c.offsets, np.int64)
    if offsets[-1] <= _INT32_MAX:
        return pa.Array.from_buffers(pa.binary(), c.items, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                            pa.py_buffer(c.data)])
    # More than 2 GiB in one run: Arrow's large_binary (record_batch casts it, and says
    # so if it does not fit Spark's binary).
    return pa.Array.from_buffers(pa.large_binary(), c.items, [None, pa.py_buffer(offsets), pa.py_buffer(c.data)])


class QueuePartition(InputPartition):
    """The pending items of one reader of one queue, those with ids in
    ``(after_id, upto_id]`` (None: unbounded)."""

    def __init__(self, directory: str, queue: str, reader: str, after_id: int | None = None,
                 upto_id: int | None = None, known: Sequence[Segment] = ()) -> None:
        super().__init__((queue, reader, after_id, upto_id))
        self.directory = directory
        self.queue = queue
        self.reader = reader
        self.after_id = after_id
        self.upto_id = upto_id
        #: The writer files the plan listed with their first ids (not read again by the task).
        self.known = tuple(known)


def split_points(fs: FileSystem, directory: str, queue: str, per_partition: int,
                 segments: Sequence[Segment] | None = None, min_partitions: int = 1) -> list[int]:
    """Item ids at which a reader's backlog is split into ``ceil(journal bytes /
    per_partition)`` ranges (at least ``min_partitions`` when there are that many
    items) of about equal journal bytes (a point ``p`` ends a range at id ``p``).

    From the writer files' sizes and first ids (read at planning: one small read
    per file; damage there is left for the partitions' reads to report): a range
    ending inside a file no bigger than a range ends at the nearer of that file's
    edges instead (a task starts its read at the beginning of the file holding
    its first id, so a range that starts there reads nothing twice); one ending
    inside a bigger file ends at the id that far into it (the file's ids spread
    evenly over its bytes; the newest file's count estimated from the bytes per
    item of the finished ones, and never its end).  Only a split, never a
    bound: the last range reads to the end of the journal.  Fewer, larger
    ranges are cheaper (each is a Spark task, with a fixed cost).
    ``segments``: the queue's writer files, listed already (read here if None)."""
    listed = list_segments(fs, directory, queue, strict=False) if segments is None else segments
    segs = [s for s in listed if s.first_id is not None]
    files: list[tuple[int, int, int]] = []  # (first id, ids, bytes)
    for seg, nxt in zip(segs, [*segs[1:], None]):
        assert seg.first_id is not None
        size = fs.file_size(seg.path)
        if nxt is not None:
            assert nxt.first_id is not None
            files.append((seg.first_id, nxt.first_id - seg.first_id, size))
        else:
            done_ids, done_bytes = sum(f[1] for f in files), sum(f[2] for f in files)
            files.append((seg.first_id, size * done_ids // done_bytes if done_bytes else 0, size))
    total = sum(f[2] for f in files)
    per_partition = max(1, per_partition)
    if min_partitions > 1 and total:
        per_partition = max(1, min(per_partition, -(-total // min_partitions)))
    pieces = -(-total // per_partition)
    points: list[int] = []
    for k in range(1, pieces):
        target = total * k // pieces  # the byte where range k ends
        at = 0
        for index, (first, ids, size) in enumerate(files):
            if at + size > target:
                newest = index == len(files) - 1
                if size > per_partition:
                    if ids:  # (the newest file, with no finished file to estimate its count from: not cut)
                        points.append(first - 1 + ids * (target - at) // size)
                elif index and (newest or target - at <= at + size - target):
                    points.append(first - 1)  # the file's start
                elif not newest:
                    points.append(first + ids - 1)  # its end: the next file's start
                break
            at += size
    return sorted(set(p for p in points if p >= files[0][0]))  # (a point before the first id splits nothing)


def _names(raw: str | None) -> set[str] | None:
    return None if raw is None else {n.strip() for n in raw.split(",")}


class QueueReader(DataSourceReader):
    """Batch reader of queue backlogs (no filter pushdown: see engine.spark.logplan)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        opts = lower(options)
        check_options(SOURCE, opts, set(BATCH_OPTIONS) | set(STREAM_OPTIONS))
        self.schema = user_schema(SOURCE, read_schema(QUEUE_SCHEMA, opts), schema, opts)
        self.directories = input_paths(SOURCE, opts)
        self.queues = _names(opts.get("queue"))
        self.readers = _names(opts.get("reader"))
        self.mode = mode_option(opts)
        self.per_partition = int_option(opts, "bytesPerPartition", DEFAULT_BYTES_PER_PARTITION) or 1
        self.min_partitions = int_option(opts, "minPartitions", DEFAULT_MIN_PARTITIONS) or 1

    def partitions(self) -> Sequence[InputPartition]:
        fs = resolve(None)
        parts: list[InputPartition] = []
        for directory in self.directories:
            queues = queue_names(fs, directory)
            if self.queues is not None:
                queues = [q for q in queues if q in self.queues] if queues else sorted(self.queues)
            for q in queues:
                readers = [r for r in reader_names(fs, directory, q) if self.readers is None or r in self.readers]
                if not readers:
                    continue
                try:
                    segs = list_segments(fs, directory, q, strict=False)
                    points = split_points(fs, directory, q, self.per_partition, segs, self.min_partitions)
                except (EngineError, FileNotFoundError):
                    # A damaged or vanishing file: no split (the reads report damage, per ``mode``).
                    segs, points = [], []
                # Files whose first id the listing read (damaged ones are read again, strictly, by the task).
                known = [seg for seg in segs if seg.first_id is not None]
                bounds: list[int | None] = [None, *points, None]
                for r in readers:
                    parts.extend(QueuePartition(directory, q, r, a, b, known) for a, b in pairwise(bounds))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, QueuePartition):
            return  # an empty plan is read as one InputPartition(None)
        where = f"{partition.directory}: queue {partition.queue!r}, reader {partition.reader!r}"
        yield from guarded(self.schema, self.mode, self._batches(partition),
                           {"queue": partition.queue, "reader": partition.reader}, where)

    def _batches(self, part: QueuePartition) -> Iterator[pa.RecordBatch]:
        for run in pending_runs(resolve(None), part.directory, part.queue, part.reader, part.after_id,
                                part.upto_id, part.known):
            batch = run_to_batch(self.schema, part.queue, part.reader, run)
            if batch.num_rows:
                yield batch
