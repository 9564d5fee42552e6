"""``engine-queue``: persistent queues as a Spark batch source and a streaming source.

Batch: one row per item still pending for a reader (the backlog), read from the
journal and the reader checkpoint files alone — no lock taken, nothing changed::

    spark.read.format("engine-queue").load("/data/queues")          # every queue
    spark.read.format("engine-queue").option("queue", "jobs").load(dir)
    spark.read.format("engine-queue").option("reader", "billing").load(dir)  # only that reader's items

Partitions per (queue, reader): id ranges of about ``bytesPerPartition``
journal bytes (default 16 MiB; :func:`split_points`).  ``queue`` and ``reader``
(comma-separated names) choose what is read; by default every queue in the
directories and every reader with a checkpoint file (the default reader ``""``
when none has one).  Items are read through the queue's own journal cursor, so
every check the queue's readers make applies; ``mode`` says what damage does.
A schema given with ``.schema(...)`` (some of the columns) builds only those.

Streaming: a queue *reader* as a source whose items are confirmed once Spark has
committed the micro-batch that carried them::

    spark.readStream.format("engine-queue").option("queue", "jobs")
         .option("reader", "spark").load(dir)

Spark calls ``commit(end)`` for batch N only when it plans batch N+1 (one
micro-batch late), so when a query stops or crashes, the items of its last
committed batch are still unconfirmed in the queue: delivery is **at least
once**.  With the same checkpoint location, a restarted query skips (and then
confirms) the items its offsets say were processed, so it does not duplicate
them; a consumer *without* that checkpoint (another reader process, or a new
query) gets them again.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import islice, pairwise
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.types import StructType

from engine.conventions import datetime_from_ms
from engine.errors import ConfigError, EngineError
from engine.fs import FileSystem, resolve
from engine.queue import checkpoint, codec, naming
from engine.queue.cursor import JournalCursor, PollingSource
from engine.queue.diagnose import queue_names
from engine.queue.segments import list_segments
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
BATCH_OPTIONS = ("queue", "reader", "mode", "bytesPerPartition")
STREAM_OPTIONS = ("queue", "reader", "maxRecordsPerTrigger")

log = logging.getLogger("engine.spark")

BATCH_ITEMS = 8192
#: Journal bytes per partition of a batch read (option ``bytesPerPartition``).
DEFAULT_BYTES_PER_PARTITION = 16 << 20
#: Items per micro-batch of the streaming source unless maxRecordsPerTrigger says otherwise.
DEFAULT_STREAM_ITEMS = 1000


def reader_names(fs: FileSystem, directory: str, queue: str) -> list[str]:
    """The queue's readers with a checkpoint file; [""] (the default) if none has one."""
    names = sorted(r for f in fs.listdir(directory) if (r := naming.parse_reader(queue, f)) is not None)
    return names or [""]


def pending_batches(fs: FileSystem, directory: str, queue: str, reader: str, after_id: int | None = None,
                    upto_id: int | None = None, size: int = BATCH_ITEMS) -> Iterator[list[codec.Put]]:
    """Items not yet confirmed by ``reader``, oldest first, from the files alone,
    in lists of up to ``size``.

    ``after_id``/``upto_id`` restrict to ids in ``(after_id, upto_id]``.  The
    queue's journal cursor reads them (every check its readers make applies);
    when the reader's checkpoint has no out-of-order confirmation and no gap,
    every id above its head is pending, so no item is looked up one by one.
    """
    path = naming.join(directory, naming.reader_name(queue, reader))
    head, done = checkpoint.load_reader_file(fs, path) if fs.exists(path) else (0, ())
    state = ReaderState(head, done)
    start = head if after_id is None else max(head, after_id)
    cursor = JournalCursor(PollingSource(fs, directory, queue, codec.DEFAULT_MAX_ITEM_SIZE, 0.001), start)
    every = not state.members and not state.gaps
    try:
        items = iter(cursor.next, None)
        while batch := list(islice(items, size)):
            if upto_id is not None and batch[-1].xid > upto_id:
                batch = batch[:bisect_right([p.xid for p in batch], upto_id)]
                if batch:
                    yield batch if every else [p for p in batch if not state.is_done(p.xid)]
                return
            yield batch if every else [p for p in batch if not state.is_done(p.xid)]
    finally:
        cursor.close()


def pending_puts(fs: FileSystem, directory: str, queue: str, reader: str,
                 after_id: int | None = None, upto_id: int | None = None) -> Iterator[codec.Put]:
    """:func:`pending_batches` one item at a time."""
    for batch in pending_batches(fs, directory, queue, reader, after_id, upto_id):
        yield from batch


#: Where each field sits in a :class:`engine.queue.codec.Put`.
_PUT = {name: k for k, name in enumerate(codec.Put._fields)}


def puts_to_batch(schema: StructType, queue: str, reader: str, puts: list[codec.Put]) -> pa.RecordBatch:
    """Items -> one Arrow batch with the columns of ``schema`` (only those are
    built, each in one pass over the items, not from row tuples)."""
    n = len(puts)

    def field(name: str) -> Iterator[Any]:
        return map(itemgetter(_PUT[name]), puts)

    makers: dict[str, Callable[[], Any]] = {
        "queue": lambda: repeat_string(queue, n),
        "reader": lambda: repeat_string(reader, n),
        "id": lambda: np.fromiter(field("xid"), np.int64, n),
        "add_time": lambda: ns_to_timestamp(np.fromiter(field("add_time"), np.int64, n) * 1_000_000),
        "expire_time": lambda: _expire_column(list(field("expire_time"))),
        "error_count": lambda: np.fromiter(field("error_count"), np.int32, n),
        "data": lambda: pa.array(list(field("data")), type=pa.binary()),
    }
    return record_batch(schema, {c: makers[c]() for c in schema.fieldNames() if c in makers}, n)


def _expire_column(expires: Sequence[int | None]) -> pa.Array:
    """Expiry times (ms, None: never) as Spark timestamps."""
    if expires.count(None) == len(expires):
        return pa.nulls(len(expires), TIMESTAMP)
    return pa.array([None if e is None else e * 1000 for e in expires], type=pa.int64()).cast(TIMESTAMP)


class QueuePartition(InputPartition):
    """The pending items of one reader of one queue, those with ids in
    ``(after_id, upto_id]`` (None: unbounded)."""

    def __init__(self, directory: str, queue: str, reader: str, after_id: int | None = None,
                 upto_id: int | None = None) -> None:
        super().__init__((queue, reader, after_id, upto_id))
        self.directory = directory
        self.queue = queue
        self.reader = reader
        self.after_id = after_id
        self.upto_id = upto_id


def split_points(fs: FileSystem, directory: str, queue: str, per_partition: int) -> list[int]:
    """Item ids at which a reader's backlog is split into ``ceil(journal bytes /
    per_partition)`` ranges of about equal journal bytes (a point ``p`` ends a
    range at id ``p``).

    From the writer files' sizes and first ids (read at planning: one small read
    per file; damage there is left for the partitions' reads to report): a
    finished file's ids are spread evenly over its bytes, and the newest file's
    count is estimated from the bytes per item of the finished ones (none
    finished: it is not split).  Only a split, never a bound: the last range
    reads to the end of the journal.  Fewer, larger ranges are cheaper (each
    is a Spark task and starts its read at the beginning of a journal file)."""
    segs = [s for s in list_segments(fs, directory, queue, strict=False) if s.first_id is not None]
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
    pieces = -(-total // max(1, per_partition))
    points: list[int] = []
    for k in range(1, pieces):
        target = total * k // pieces  # the byte where range k ends
        at = 0
        for first, ids, size in files:
            if at + size > target:
                points.append(first - 1 + ids * (target - at) // size)
                break
            at += size
    return sorted(set(points))


def _names(raw: str | None) -> set[str] | None:
    return None if raw is None else {n.strip() for n in raw.split(",")}


class QueueReader(DataSourceReader):
    """Batch reader of queue backlogs (no filter pushdown: see engine.spark.logplan)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        opts = lower(options)
        check_options(SOURCE, opts, BATCH_OPTIONS)
        self.schema = user_schema(SOURCE, read_schema(QUEUE_SCHEMA, opts), schema, opts)
        self.directories = input_paths(SOURCE, opts)
        self.queues = _names(opts.get("queue"))
        self.readers = _names(opts.get("reader"))
        self.mode = mode_option(opts)
        self.per_partition = int_option(opts, "bytesPerPartition", DEFAULT_BYTES_PER_PARTITION) or 1

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
                    points = split_points(fs, directory, q, self.per_partition)
                except (EngineError, FileNotFoundError):
                    # A damaged or vanishing file: no split (the reads report damage, per ``mode``).
                    points = []
                bounds: list[int | None] = [None, *points, None]
                for r in readers:
                    parts.extend(QueuePartition(directory, q, r, a, b) for a, b in pairwise(bounds))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, QueuePartition):
            return  # an empty plan is read as one InputPartition(None)
        where = f"{partition.directory}: queue {partition.queue!r}, reader {partition.reader!r}"
        yield from guarded(self.schema, self.mode, self._batches(partition),
                           {"queue": partition.queue, "reader": partition.reader}, where)

    def _batches(self, part: QueuePartition) -> Iterator[pa.RecordBatch]:
        for puts in pending_batches(resolve(None), part.directory, part.queue, part.reader, part.after_id,
                                    part.upto_id):
            if puts:
                yield puts_to_batch(self.schema, part.queue, part.reader, puts)


def _row(queue: str, reader: str, item: Any) -> tuple[Any, ...]:
    """One row from a reader's item (``engine.queue.Item``)."""
    return (queue, reader, item.id, item.added_at, item.expires_at, item.error_count, item.data)


def _put_row(queue: str, reader: str, put: Any) -> tuple[Any, ...]:
    """One row from a journal's PUT record (``engine.queue.codec.Put``: times in ms)."""
    add = datetime_from_ms(put.add_time)
    exp = None if put.expire_time is None else datetime_from_ms(put.expire_time)
    return (queue, reader, put.xid, add, exp, put.error_count, put.data)


def _projection(schema: StructType | None) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """Full rows (the engine-queue schema's order) -> rows of ``schema``."""
    if schema is None or schema.fieldNames() == QUEUE_SCHEMA.fieldNames():
        return lambda row: row
    at = [QUEUE_SCHEMA.fieldNames().index(name) for name in schema.fieldNames()]
    return lambda row: tuple(row[k] for k in at)


class QueueStreamReader(SimpleDataSourceStreamReader):
    """A queue reader as a streaming source; see the module docstring.

    The offset is ``{"id": highest item id delivered}``: a reader that never
    aborts gets items in id order, so everything up to the offset has been
    handed to Spark.  ``read`` runs in Spark's long-lived driver-side Python
    process, which holds the reader (one process per reader name).
    """

    def __init__(self, options: dict[str, str], schema: StructType | None = None) -> None:
        opts = lower(options)
        check_options(SOURCE, opts, STREAM_OPTIONS)
        self._project = _projection(None if schema is None else user_schema(SOURCE, QUEUE_SCHEMA, schema, opts))
        directories = input_paths(SOURCE, opts)
        if len(directories) != 1:
            raise ConfigError(f"{SOURCE} streaming reads one queue directory, not {len(directories)}")
        self.directory = directories[0]
        queue = opts.get("queue")
        if not queue or "," in queue:
            raise ConfigError(f"{SOURCE} streaming needs option('queue', NAME) naming one queue")
        self.queue: str = queue
        self.reader_name = opts.get("reader", "")
        self.max_items = int_option(opts, "maxRecordsPerTrigger", DEFAULT_STREAM_ITEMS) or 1
        self._reader: Any = None
        self._delivered: dict[int, Any] = {}  # id -> item, not yet confirmed
        self._lookahead: list[Any] = []
        self._committed = 0  # highest id Spark committed

    def _open(self) -> Any:
        if self._reader is None:
            from engine.queue import Queue

            self._reader = Queue.open_reader(self.directory, self.queue, self.reader_name)
        return self._reader

    def initialOffset(self) -> dict[str, int]:
        return {"id": 0}

    def _next(self) -> Any:
        if self._lookahead:
            return self._lookahead.pop(0)
        return self._open().get(timeout=0)

    def _skip_processed(self, upto: int) -> None:
        """Confirm items a previous run of this query already processed (ids <= upto)."""
        reader = self._open()
        while True:
            item = self._next()
            if item is None:
                return
            if item.id > upto:
                self._lookahead.insert(0, item)
                return
            reader.confirm([item.id])

    def read(self, start: dict[str, int]) -> tuple[Iterator[tuple[Any, ...]], dict[str, int]]:
        begin = int(start.get("id", 0))
        self._skip_processed(begin)
        rows: list[tuple[Any, ...]] = []
        last = begin
        while len(rows) < self.max_items:
            item = self._next()
            if item is None:
                break
            self._delivered[item.id] = item
            last = max(last, item.id)
            rows.append(self._project(_row(self.queue, self.reader_name, item)))
        return iter(rows), {"id": last}

    def readBetweenOffsets(self, start: dict[str, int], end: dict[str, int]) -> Iterator[tuple[Any, ...]]:
        """Replay a planned batch after a restart: read ids in (start, end] from the files."""
        fs = resolve(None)
        for put in pending_puts(fs, self.directory, self.queue, self.reader_name,
                                int(start.get("id", 0)), int(end.get("id", 0))):
            yield self._project(_put_row(self.queue, self.reader_name, put))

    def commit(self, end: dict[str, int]) -> None:
        upto = int(end.get("id", 0))
        self._committed = max(self._committed, upto)
        ids = [i for i in self._delivered if i <= upto]
        if self._reader is None:
            return
        if ids:
            self._reader.confirm(ids)
            for i in ids:
                del self._delivered[i]
        self._skip_processed(upto)
        self._reader.checkpoint()

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class EngineQueueDataSource(DataSource):
    """``engine-queue``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "engine-queue"

    def schema(self) -> StructType:
        """The engine-queue schema; checks the read options when the DataFrame is defined."""
        opts = lower(self.options)
        check_options(SOURCE, opts, set(BATCH_OPTIONS) | set(STREAM_OPTIONS))
        int_option(opts, "maxRecordsPerTrigger", None)
        int_option(opts, "bytesPerPartition", None)
        input_paths(SOURCE, opts)
        return read_schema(QUEUE_SCHEMA, opts)

    def reader(self, schema: StructType) -> DataSourceReader:
        return QueueReader(dict(self.options), schema)

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return QueueStreamReader(dict(self.options), schema)
