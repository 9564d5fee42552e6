"""The Python reference reader of ``engine-streams`` batch reads, without Spark.

Spark's ``engine-streams`` is the JVM connector (``engine.spark.StreamSource``,
``engine/spark/java``); this module is no Spark data source any more.
:class:`StreamsReader` is the reference the connector's tests compare it with
(stream for stream, error for error: ``tests/spark/test_spark_jvm_streams.py``),
driven directly, and what ``stress/readpaths`` reads damaged journals through::

    reader = StreamsReader({"path": "/data/streams"}, STREAMS_SCHEMA)
    for part in reader.partitions():
        for batch in reader.read(part):   # pyarrow RecordBatches
            ...

One row per stream (ident, start offset, status complete / aborted / open, the
data), one partition per journal file.  Reading goes through
:meth:`engine.streams.StreamJournal.open_reader`, which checks every check code
(CRC-64) and stops cleanly at a torn transaction; ``mode`` says what damage
does: the streams read before it are kept, then FAILFAST raises, DROPMALFORMED
ends the journal there and PERMISSIVE adds one row naming the file and offset.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from engine.errors import ConfigError, CorruptFileError, EngineError
from engine.fs import resolve
from engine.spark.batches import guarded, record_batch, repeat_string
from engine.spark.options import check_options, input_paths, lower, mode_option, read_schema, user_schema
from engine.spark.schemas import STREAMS_SCHEMA
from engine.streams.journal import StreamJournal

SOURCE = "engine-streams"
OPTIONS = ("mode",)
JOURNAL_MAGIC = b"journald"
BATCH_STREAMS = 1024


def is_stream_journal(path: str) -> bool:
    """Whether ``path`` is a file starting with the journald magic."""
    fs = resolve(None)
    if not fs.exists(path) or fs.isdir(path):
        return False
    with fs.open(path) as h:
        return h.read_at(0, len(JOURNAL_MAGIC)) == JOURNAL_MAGIC


def journal_files(path: str) -> list[str]:
    """The journal at ``path``, or every journal file directly inside a directory."""
    fs = resolve(None)
    if fs.isdir(path):
        return sorted(p for n in fs.listdir(path) if is_stream_journal(p := path.rstrip("/") + "/" + n))
    if is_stream_journal(path):
        return [path]
    raise ConfigError(f"{path}: not a stream journal (no 'journald' magic) or a directory of them")


class StreamsPartition(InputPartition):
    """One journal file."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def read_journal(schema: StructType, path: str, statuses: set[str] | None) -> Iterator[pa.RecordBatch]:
    """Whole streams of one journal file as Arrow batches (optionally only some statuses)."""
    name = path.rsplit("/", 1)[-1]
    rows: list[tuple[int, str, int, str, bytes]] = []

    def flush() -> pa.RecordBatch:
        n = len(rows)
        cols = {  # built only when the schema names them
            "journal": lambda: repeat_string(name, n),
            "stream": lambda: np.fromiter((r[0] for r in rows), dtype=np.int64, count=n),
            "ident": lambda: pa.array([r[1] for r in rows], type=pa.string()),
            "start_offset": lambda: np.fromiter((r[2] for r in rows), dtype=np.int64, count=n),
            "status": lambda: pa.array([r[3] for r in rows], type=pa.string()),
            "bytes": lambda: np.fromiter((len(r[4]) for r in rows), dtype=np.int64, count=n),
            "data": lambda: pa.array([r[4] for r in rows], type=pa.binary()),
        }
        return record_batch(schema, cols, n)

    try:
        with StreamJournal.open_reader(path) as reader:
            scan = reader.events()
            for s in scan.streams():
                if statuses is not None and s.status not in statuses:
                    continue
                rows.append((s.number, s.ident.decode("utf-8", "replace"), s.start_offset, s.status, s.data))
                if len(rows) >= BATCH_STREAMS:
                    yield flush()
                    rows = []
    except EngineError:
        # The streams read whole before damage are rows (each was checked), however
        # many there are: the rows do not depend on where a batch ends.
        if rows:
            yield flush()
        raise
    if rows:
        yield flush()
    if scan.anomalies:
        # What the store's own verify rejects (a torn transaction at the end is
        # not damage: the scan stops before it, as the store's readers do).
        raise CorruptFileError(path, 0, "records consistent with their streams", found="; ".join(scan.anomalies))


class StreamsReader(DataSourceReader):
    """Batch reader: one partition per journal file."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        opts = lower(options)
        check_options(SOURCE, opts, OPTIONS)
        self.schema = user_schema(SOURCE, read_schema(STREAMS_SCHEMA, opts), schema, opts)
        self.paths = input_paths(SOURCE, opts)
        self.mode = mode_option(opts)

    def partitions(self) -> Sequence[InputPartition]:
        files = [f for p in self.paths for f in journal_files(p)]
        return [StreamsPartition(p) for p in dict.fromkeys(files)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, StreamsPartition):
            return  # an empty plan is read as one InputPartition(None)
        yield from guarded(self.schema, self.mode, read_journal(self.schema, partition.path, None),
                           {"journal": partition.path.rsplit("/", 1)[-1]}, partition.path)
