"""``engine-queue``: persistent queues as a Spark batch source and a streaming source.

Batch: one row per item still pending for a reader (the backlog), read from the
journal and the reader checkpoint files alone — no lock taken, nothing changed::

    spark.read.format("engine-queue").load("/data/queues")          # every queue
    spark.read.format("engine-queue").option("queue", "jobs").load(dir)
    ... .where("reader = 'billing'")     # pushed down: only that reader's file is read

One partition per (queue, reader).  Filters on ``queue`` and ``reader`` are pushed.

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
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    Filter,
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.types import StructType

from engine.errors import ConfigError
from engine.fs import FileSystem, resolve
from engine.queue import checkpoint, codec, naming
from engine.queue.cursor import JournalCursor, PollingSource
from engine.queue.diagnose import queue_names
from engine.queue.state import ReaderState
from engine.spark.batches import ns_to_timestamp, record_batch, repeat_string
from engine.spark.filters import Pushdown, push
from engine.spark.schemas import QUEUE_SCHEMA

log = logging.getLogger("engine.spark")

BATCH_ITEMS = 8192


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


def _path(options: dict[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise ConfigError("engine-queue needs the queue directory: .load(DIR)")
    return path


class QueueReader(DataSourceReader):
    """Batch reader of queue backlogs."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.directory = _path(options)
        self.queue = options.get("queue")
        self.schema = schema
        self.pushdown = Pushdown()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        return push(filters, self.pushdown, {}, {}, {"queue": "queue", "reader": "reader"})

    def partitions(self) -> Sequence[InputPartition]:
        fs = resolve(None)
        queues = [self.queue] if self.queue else queue_names(fs, self.directory)
        qset = self.pushdown.names.get("queue")
        rset = self.pushdown.names.get("reader")
        parts: list[InputPartition] = []
        for q in queues:
            if qset is not None and not qset.allows(q):
                continue
            for r in reader_names(fs, self.directory, q):
                if rset is None or rset.allows(r):
                    parts.append(QueuePartition(self.directory, q, r))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, QueuePartition):
            return  # an empty plan is read as one InputPartition(None)
        fs = resolve(None)
        buf: list[codec.Put] = []
        for put in pending_puts(fs, partition.directory, partition.queue, partition.reader):
            buf.append(put)
            if len(buf) >= BATCH_ITEMS:
                yield puts_to_batch(self.schema, partition.queue, partition.reader, buf)
                buf = []
        if buf:
            yield puts_to_batch(self.schema, partition.queue, partition.reader, buf)


def _row(queue: str, reader: str, put: Any) -> tuple[Any, ...]:
    import datetime as dt

    utc = dt.UTC
    add = dt.datetime.fromtimestamp(put.add_time / 1000, utc)
    exp = None if put.expire_time is None else dt.datetime.fromtimestamp(put.expire_time / 1000, utc)
    return (queue, reader, put.id if hasattr(put, "id") else put.xid, add, exp, put.error_count, put.data)


class QueueStreamReader(SimpleDataSourceStreamReader):
    """A queue reader as a streaming source; see the module docstring.

    The offset is ``{"id": highest item id delivered}``: a reader that never
    aborts gets items in id order, so everything up to the offset has been
    handed to Spark.  ``read`` runs in Spark's long-lived driver-side Python
    process, which holds the reader (one process per reader name).
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.directory = _path(options)
        queue = options.get("queue")
        if not queue:
            raise ConfigError("engine-queue streaming needs option('queue', NAME)")
        self.queue: str = queue
        self.reader_name = options.get("reader", "")
        raw = options.get("maxRecordsPerTrigger", options.get("maxrecordspertrigger", "1000"))
        try:
            self.max_items = int(raw)
        except ValueError as exc:
            raise ConfigError(f"maxRecordsPerTrigger={raw!r} is not an integer") from exc
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
            yield _row(self.queue, self.reader_name, put)

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
        return QUEUE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return QueueReader(dict(self.options), schema)

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return QueueStreamReader(dict(self.options))
