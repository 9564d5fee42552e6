"""``engine-events``: event journals as a Spark batch source.

::

    spark.read.format("engine-events").load("/data/events/orders")
    ... .where("persistence_id = 'order-17' and sequence_nr between 10 and 20")

Reads through :meth:`EventJournal.open_read_only` (no lock, a snapshot of what is
committed).  Partitions: the journal's persistence ids in groups of
``idsPerPartition`` (default 64); each id is replayed by following its own
linked list, so a partition never reads other ids' blocks.  Filters on
``persistence_id`` (= / IN) and ``sequence_nr`` (ranges) are pushed down and
applied exactly: only the matching ids are replayed, only over the range.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from engine.errors import ConfigError
from engine.events import EventJournal
from engine.spark.batches import record_batch, repeat_string
from engine.spark.filters import Pushdown, push
from engine.spark.schemas import EVENTS_SCHEMA

BATCH_EVENTS = 8192


class EventsPartition(InputPartition):
    """Some persistence ids of one journal, with the pushed sequence range."""

    def __init__(self, directory: str, ids: list[str], lo: int | None, hi: int | None) -> None:
        super().__init__((directory, len(ids)))
        self.directory = directory
        self.ids = ids
        self.lo = lo
        self.hi = hi  # exclusive


def journal_name(directory: str) -> str:
    return directory.rstrip("/").rsplit("/", 1)[-1]


def events_to_batch(schema: StructType, journal: str, pid: str, seqs: list[int],
                    payloads: list[bytes]) -> pa.RecordBatch:
    """One id's replayed events -> an Arrow batch of the engine-events schema."""
    n = len(seqs)
    cols = {
        "journal": repeat_string(journal, n),
        "persistence_id": repeat_string(pid, n),
        "sequence_nr": np.asarray(seqs, dtype=np.int64),
        "payload": pa.array(payloads, type=pa.binary()),
    }
    return record_batch(schema, cols, n)


def read_events(schema: StructType, part: EventsPartition) -> Iterator[pa.RecordBatch]:
    """Replay each id of the partition into Arrow batches."""
    name = journal_name(part.directory)
    from_seq = 1 if part.lo is None else max(1, part.lo)
    to_seq = None if part.hi is None else part.hi - 1
    with EventJournal.open_read_only(part.directory) as journal:
        for pid in part.ids:
            seqs: list[int] = []
            payloads: list[bytes] = []
            for ev in journal.replay(pid, from_seq, to_seq):
                seqs.append(ev.sequence_nr)
                payloads.append(ev.payload)
                if len(seqs) >= BATCH_EVENTS:
                    yield events_to_batch(schema, name, pid, seqs, payloads)
                    seqs, payloads = [], []
            if seqs:
                yield events_to_batch(schema, name, pid, seqs, payloads)


class EventsReader(DataSourceReader):
    """Batch reader: ids grouped into partitions, each replayed by its own links."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        path = options.get("path")
        if not path:
            raise ConfigError("engine-events needs the journal directory: .load(DIR)")
        self.directory = path
        self.schema = schema
        raw = options.get("idsPerPartition", options.get("idsperpartition", "64"))
        try:
            self.per_partition = max(1, int(raw))
        except ValueError as exc:
            raise ConfigError(f"idsPerPartition={raw!r} is not an integer") from exc
        self.pushdown = Pushdown()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        return push(filters, self.pushdown, {"sequence_nr": "sequence_nr"}, {},
                    {"persistence_id": "persistence_id"})

    def partitions(self) -> Sequence[InputPartition]:
        if self.pushdown.empty:
            return []
        names = self.pushdown.names.get("persistence_id")
        seq = self.pushdown.ranges.get("sequence_nr")
        with EventJournal.open_read_only(self.directory) as journal:
            ids = [i.persistence_id for i in journal.ids() if i.live > 0
                   and (names is None or names.allows(i.persistence_id))
                   and (seq is None or ((seq.lo is None or seq.lo <= i.highest)
                        and (seq.hi is None or seq.hi > i.lowest)))]
        lo = seq.lo if seq else None
        hi = seq.hi if seq else None
        return [EventsPartition(self.directory, ids[k:k + self.per_partition], lo, hi)
                for k in range(0, len(ids), self.per_partition)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, EventsPartition):
            return  # an empty plan is read as one InputPartition(None)
        yield from read_events(self.schema, partition)


class EngineEventsDataSource(DataSource):
    """``engine-events``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "engine-events"

    def schema(self) -> StructType:
        return EVENTS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return EventsReader(dict(self.options), schema)
