"""``engine-pages``: page stores as a Spark batch source.

::

    spark.read.format("engine-pages").load("/data/pages/store.db")
    ... .where("page between 100 and 199")      # pushed down: only those pages are read

One row per page (id, byte offset, whether it is on the free list, its bytes;
a free page's bytes are not data — the store keeps its free-list link there — so
its ``data`` is empty).
Reads go through ``PageStore.open(path, readonly=True)``, which takes the store's
shared lock while reading, so a row never shows a half-applied transaction.
Partitions are page-id ranges of ``pagesPerPartition`` (default 4096) pages; a
filter on ``page`` (ranges) and on ``free`` is pushed down.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo, Filter, InputPartition
from pyspark.sql.types import StructType

from engine.errors import ConfigError
from engine.pages import PageStore
from engine.spark.batches import record_batch, repeat_string
from engine.spark.filters import Pushdown, push
from engine.spark.schemas import PAGES_SCHEMA

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


def read_pages(schema: StructType, part: PagesPartition) -> Iterator[pa.RecordBatch]:
    """The pages of one partition, read through the store's read-only handle."""
    name = part.path.rstrip("/").rsplit("/", 1)[-1]
    with PageStore.open(part.path, readonly=True) as store:
        free = set(store.free_pages)
        size = store.page_size
        hi = min(part.hi, store.page_count + 1)
        ids = [p for p in range(part.lo, hi) if part.free is None or (p in free) == part.free]
        for k in range(0, len(ids), BATCH_PAGES):
            chunk = ids[k:k + BATCH_PAGES]
            n = len(chunk)
            pages = np.asarray(chunk, dtype=np.int64)
            cols = {
                "store": repeat_string(name, n),
                "page": pages,
                "offset": pages * size,
                "free": pa.array([p in free for p in chunk], type=pa.bool_()),
                "data": pa.array([b"" if p in free else store.read(p) for p in chunk], type=pa.binary()),
            }
            yield record_batch(schema, cols, n)


class PagesReader(DataSourceReader):
    """Batch reader: page-id ranges; ``page`` ranges and ``free`` pushed down."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        path = options.get("path")
        if not path:
            raise ConfigError("engine-pages needs a page store file: .load(PATH)")
        self.path = path
        self.schema = schema
        raw = options.get("pagesPerPartition", options.get("pagesperpartition", "4096"))
        try:
            self.per_partition = max(1, int(raw))
        except ValueError as exc:
            raise ConfigError(f"pagesPerPartition={raw!r} is not an integer") from exc
        self.pushdown = Pushdown()
        self.free: bool | None = None

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        rest = []
        for f in filters:
            if isinstance(f, EqualTo) and f.attribute == ("free",) and isinstance(f.value, bool):
                if self.free is not None and self.free != f.value:
                    self.pushdown.range("page").restrict(0, 0)
                self.free = f.value
            else:
                rest.append(f)
        return push(rest, self.pushdown, {"page": "page"}, {}, {})

    def partitions(self) -> Sequence[InputPartition]:
        if self.pushdown.empty:
            return []
        with PageStore.open(self.path, readonly=True) as store:
            count = store.page_count
        lo, hi = self.pushdown.range("page").clip(1, count + 1)
        return [PagesPartition(self.path, a, min(hi, a + self.per_partition), self.free)
                for a in range(lo, hi, self.per_partition)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, PagesPartition):
            return  # an empty plan is read as one InputPartition(None)
        yield from read_pages(self.schema, partition)


class EnginePagesDataSource(DataSource):
    """``engine-pages``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "engine-pages"

    def schema(self) -> StructType:
        return PAGES_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return PagesReader(dict(self.options), schema)
