"""``engine-queue``: persistent queues as a Spark batch source and a streaming source.

Batch: one row per item still pending for a reader (the backlog), read from the
journal and the reader checkpoint files alone — no lock taken, nothing changed::

    spark.read.format("engine-queue").load("/data/queues")          # every queue
    spark.read.format("engine-queue").option("queue", "jobs").load(dir)
    spark.read.format("engine-queue").option("reader", "billing").load(dir)  # only that reader's items

One partition per (queue, reader).  ``queue`` and ``reader`` (comma-separated
names) choose what is read; by default every queue in the directories and
every reader with a checkpoint file (the default reader ``""`` when none has
one).  Items are read through the queue's own journal cursor, so every check
the queue's readers make applies; ``mode`` says what damage does.

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
from collections.abc import Iterator, Sequence
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
from engine.errors import ConfigError
from engine.fs import FileSystem, resolve
from engine.queue import checkpoint, codec, naming
from engine.queue.cursor import JournalCursor, PollingSource
from engine.queue.diagnose import queue_names
from engine.queue.state import ReaderState
from engine.spark.batches import guarded, ns_to_timestamp, record_batch, repeat_string
from engine.spark.options import check_options, input_paths, int_option, lower, mode_option, read_schema
from engine.spark.schemas import QUEUE_SCHEMA

SOURCE = "engine-queue"
BATCH_OPTIONS = ("queue", "reader", "mode")
STREAM_OPTIONS = ("queue", "reader", "maxRecordsPerTrigger")

log = logging.getLogger("engine.spark")

BATCH_ITEMS = 8192
#: Items per micro-batch of the streaming source unless maxRecordsPerTrigger says otherwise.
DEFAULT_STREAM_ITEMS = 1000


def reader_names(fs: FileSystem, directory: str, queue: str) -> list[str]:
    """The queue's readers with a checkpoint file; [""] (the default) if none has one."""
    names = sorted(r for f in fs.listdir(directory) if (r := naming.parse_reader(queue, f)) is not None)
    return names or [""]


def pending_puts(fs: FileSystem, directory: str, queue: str, reader: str,
                 after_id: int | None = None, upto_id: int | None = None) -> Iterator[codec.Put]:
    """Items not yet confirmed by ``reader``, oldest first, from the files alone.

    ``after_id``/``upto_id`` restrict to ids in ``(after_id, upto_id]``.
    """
    path = naming.join(directory, naming.reader_name(queue, reader))
    head, done = checkpoint.load_reader_file(fs, path) if fs.exists(path) else (0, ())
    state = ReaderState(head, done)
    start = head if after_id is None else max(head, after_id)
    cursor = JournalCursor(PollingSource(fs, directory, queue, codec.DEFAULT_MAX_ITEM_SIZE, 0.001), start)
    try:
        while (put := cursor.next()) is not None:
            if upto_id is not None and put.xid > upto_id:
                return
            if not state.is_done(put.xid):
                yield put
    finally:
        cursor.close()


def puts_to_batch(schema: StructType, queue: str, reader: str, puts: list[codec.Put]) -> pa.RecordBatch:
    """Items -> one Arrow batch (columns built as arrays, not row tuples)."""
    n = len(puts)
    ids = np.fromiter((p.xid for p in puts), dtype=np.int64, count=n)
    add_ms = np.fromiter((p.add_time for p in puts), dtype=np.int64, count=n)
    exp = [p.expire_time for p in puts]
    expire = pa.array([None if e is None else e * 1000 for e in exp], type=pa.int64()).cast(
        pa.timestamp("us", tz="UTC"))
    cols = {
        "queue": repeat_string(queue, n),
        "reader": repeat_string(reader, n),
        "id": ids,
        "add_time": ns_to_timestamp(add_ms * 1_000_000),
        "expire_time": expire,
        "error_count": np.fromiter((p.error_count for p in puts), dtype=np.int32, count=n),
        "data": pa.array([p.data for p in puts], type=pa.binary()),
    }
    return record_batch(schema, cols, n)


class QueuePartition(InputPartition):
    """All pending items of one reader of one queue."""

    def __init__(self, directory: str, queue: str, reader: str) -> None:
        super().__init__((queue, reader))
        self.directory = directory
        self.queue = queue
        self.reader = reader


def _names(raw: str | None) -> set[str] | None:
    return None if raw is None else {n.strip() for n in raw.split(",")}


class QueueReader(DataSourceReader):
    """Batch reader of queue backlogs (no filter pushdown: see engine.spark.logplan)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        opts = lower(options)
        check_options(SOURCE, opts, BATCH_OPTIONS)
        self.directories = input_paths(SOURCE, opts)
        self.queues = _names(opts.get("queue"))
        self.readers = _names(opts.get("reader"))
        self.mode = mode_option(opts)
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        fs = resolve(None)
        parts: list[InputPartition] = []
        for directory in self.directories:
            queues = queue_names(fs, directory)
            if self.queues is not None:
                queues = [q for q in queues if q in self.queues] if queues else sorted(self.queues)
            for q in queues:
                for r in reader_names(fs, directory, q):
                    if self.readers is None or r in self.readers:
                        parts.append(QueuePartition(directory, q, r))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, QueuePartition):
            return  # an empty plan is read as one InputPartition(None)
        where = f"{partition.directory}: queue {partition.queue!r}, reader {partition.reader!r}"
        yield from guarded(self.schema, self.mode, self._batches(partition),
                           {"queue": partition.queue, "reader": partition.reader}, where)

    def _batches(self, partition: QueuePartition) -> Iterator[pa.RecordBatch]:
        fs = resolve(None)
        buf: list[codec.Put] = []
        for put in pending_puts(fs, partition.directory, partition.queue, partition.reader):
            buf.append(put)
            if len(buf) >= BATCH_ITEMS:
                yield puts_to_batch(self.schema, partition.queue, partition.reader, buf)
                buf = []
        if buf:
            yield puts_to_batch(self.schema, partition.queue, partition.reader, buf)


def _row(queue: str, reader: str, item: Any) -> tuple[Any, ...]:
    """One row from a reader's item (``engine.queue.Item``)."""
    return (queue, reader, item.id, item.added_at, item.expires_at, item.error_count, item.data)


def _put_row(queue: str, reader: str, put: Any) -> tuple[Any, ...]:
    """One row from a journal's PUT record (``engine.queue.codec.Put``: times in ms)."""
    add = datetime_from_ms(put.add_time)
    exp = None if put.expire_time is None else datetime_from_ms(put.expire_time)
    return (queue, reader, put.xid, add, exp, put.error_count, put.data)


class QueueStreamReader(SimpleDataSourceStreamReader):
    """A queue reader as a streaming source; see the module docstring.

    The offset is ``{"id": highest item id delivered}``: a reader that never
    aborts gets items in id order, so everything up to the offset has been
    handed to Spark.  ``read`` runs in Spark's long-lived driver-side Python
    process, which holds the reader (one process per reader name).
    """

    def __init__(self, options: dict[str, str]) -> None:
        opts = lower(options)
        check_options(SOURCE, opts, STREAM_OPTIONS)
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
            rows.append(_row(self.queue, self.reader_name, item))
        return iter(rows), {"id": last}

    def readBetweenOffsets(self, start: dict[str, int], end: dict[str, int]) -> Iterator[tuple[Any, ...]]:
        """Replay a planned batch after a restart: read ids in (start, end] from the files."""
        fs = resolve(None)
        for put in pending_puts(fs, self.directory, self.queue, self.reader_name,
                                int(start.get("id", 0)), int(end.get("id", 0))):
            yield _put_row(self.queue, self.reader_name, put)

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
        input_paths(SOURCE, opts)
        return read_schema(QUEUE_SCHEMA, opts)

    def reader(self, schema: StructType) -> DataSourceReader:
        return QueueReader(dict(self.options), schema)

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return QueueStreamReader(dict(self.options))
