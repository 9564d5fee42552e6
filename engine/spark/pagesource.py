"""The Python reference reader of ``engine-pages`` batch reads, without Spark.

Spark's ``engine-pages`` is the JVM connector (``engine.spark.PagesSource``,
``engine/spark/java``); this module is no Spark data source any more.
:class:`PagesReader` is the reference the connector's parity tests compare it
with (page for page, error for error: ``tests/spark/test_spark_jvm_pages_parity.py``,
``test_spark_jvm_pages.py``), driven directly, and what ``stress/readpaths``
reads damaged stores through::

    reader = PagesReader({"path": "/data/pages/store.db"}, PAGES_SCHEMA)
    for part in reader.partitions():
        for batch in reader.read(part):   # pyarrow RecordBatches
            ...

One row per page (id, byte offset, whether it is on the free list, its bytes;
a free page's bytes are not data — the store keeps its free-list link there — so
its ``data`` is empty).
Reads go through ``PageStore.open_reader(path)``, which takes the store's
shared lock while reading, so a row never shows a half-applied transaction.
Partitions are page-id ranges of ``pagesPerPartition`` (default 4096) pages.
Every check the store's reads make (page sums) applies, and the free pages'
sums too (:func:`check_free_pages`); ``mode`` says what damage does.  Several
paths and globs are accepted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from engine.fs import OpenMode
from engine.pages import PageReader, PageStore, sums
from engine.spark.batches import guarded, record_batch, repeat_string
from engine.spark.options import (
    check_options,
    input_paths,
    int_option,
    lower,
    mode_option,
    read_schema,
    user_schema,
)
from engine.spark.schemas import PAGES_SCHEMA

SOURCE = "engine-pages"
OPTIONS = ("pagesPerPartition", "mode")
MAGIC = b"ENGPAGES"
BATCH_PAGES = 1024


class PagesPartition(InputPartition):
    """Page ids ``[lo, hi)`` of one store."""

    def __init__(self, path: str, lo: int, hi: int, free: bool | None) -> None:
        super().__init__((path, lo, hi))
        self.path = path
        self.lo = lo
        self.hi = hi
        self.free = free


def check_free_pages(store: PageReader) -> list[int]:
    """The store's free pages, each checked against its page sum; CorruptFileError
    naming the store file and offset if one does not match (or the sums file is
    present but unusable), as ``PageReader.verify`` says.

    The reader's ``read`` checks the live pages it returns, but which pages are
    live comes from the free list, whose links are kept in the free pages: a
    damaged free page (a zeroed link) cuts the list short and turns the free
    pages after it into "live" rows.  Checking every free page's sum (the list
    is short next to the store, and its links were just read anyway) proves the
    list whole.  Holds the store's shared lock, so the pages checked are the
    ones the list names.
    """
    path, fs, size = store.path, store.fs, store.page_size
    with store.snapshot():
        free = store.free_pages
        loaded = sums.load_present(fs, path, size)  # raises if there but unusable
        if loaded is None:
            return free  # no sums (yet): the store's own reads check nothing either
        values, page_sum = loaded
        with fs.open(path, OpenMode.READ) as handle:
            for page in free:
                # The store's readers' check (a damaged free page: its link cannot be trusted).
                sums.check_read(path, page, handle.read_at(page * size, size), size, values, page_sum)
    return free


def read_pages(schema: StructType, part: PagesPartition) -> Iterator[pa.RecordBatch]:
    """The pages of one partition, read through the store's read-only handle
    (live pages checked by its ``read``, the free list by :func:`check_free_pages`)."""
    name = part.path.rstrip("/").rsplit("/", 1)[-1]
    with PageStore.open_reader(part.path) as store:
        free = set(check_free_pages(store))
        size = store.page_size
        hi = min(part.hi, store.page_count + 1)
        ids = [p for p in range(part.lo, hi) if part.free is None or (p in free) == part.free]
        for k in range(0, len(ids), BATCH_PAGES):
            chunk = ids[k:k + BATCH_PAGES]
            n = len(chunk)
            pages = np.asarray(chunk, dtype=np.int64)
            # Every live page is read (and so checked against its sum) whatever the
            # schema asks for; the data column is built only when it names it.
            data = [b"" if p in free else store.read(p) for p in chunk]
            cols = {
                "store": repeat_string(name, n),
                "page": pages,
                "offset": pages * size,
                "free": pa.array([p in free for p in chunk], type=pa.bool_()),
                "data": lambda data=data: pa.array(data, type=pa.binary()),
            }
            yield record_batch(schema, cols, n)


class PagesReader(DataSourceReader):
    """Batch reader: page-id ranges of each store."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        opts = lower(options)
        check_options(SOURCE, opts, OPTIONS)
        self.schema = user_schema(SOURCE, read_schema(PAGES_SCHEMA, opts), schema, opts)
        self.paths = input_paths(SOURCE, opts)
        self.per_partition = int_option(opts, "pagesPerPartition", 4096) or 1
        self.mode = mode_option(opts)

    def partitions(self) -> Sequence[InputPartition]:
        parts: list[InputPartition] = []
        for path in self.paths:
            # The header's count: a damaged free list is each partition's to report, as
            # mode says (as PagesSource plans, from the header).
            with PageStore.open_reader(path) as store:
                count = store.page_count
            parts.extend(PagesPartition(path, a, min(count + 1, a + self.per_partition), None)
                         for a in range(1, count + 1, self.per_partition))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, PagesPartition):
            return  # an empty plan is read as one InputPartition(None)
        yield from guarded(self.schema, self.mode, read_pages(self.schema, partition),
                           {"store": partition.path.rstrip("/").rsplit("/", 1)[-1]}, partition.path)

