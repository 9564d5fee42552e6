"""The Python reference reader of ``engine-events`` batch reads, without Spark.

Spark's ``engine-events`` is the JVM connector (``engine.spark.EventsSource``,
``engine/spark/java``); this module is no Spark data source any more.
:class:`EventsReader` is the reference the connector's parity tests compare it
with (event for event, error for error: ``tests/spark/test_spark_jvm_events_parity.py``,
``test_spark_jvm_events.py``), driven directly, and what ``stress/readpaths``
reads damaged journals through::

    reader = EventsReader({"path": "/data/events/orders"}, EVENTS_SCHEMA)
    for part in reader.partitions():
        for batch in reader.read(part):   # pyarrow RecordBatches
            ...

Reads through :meth:`EventJournal.open_reader` (no lock, a snapshot of what is
committed), so every check the journal's own replay makes applies; ``mode``
says what damage does.  Partitions: runs of the journal's persistence ids (in
meta order) holding about ``1 / minPartitions`` (default 2) of the selected
events, at most ``eventsPerPartition`` (default 4,000,000), or
``idsPerPartition`` ids each when that is given; each id is replayed by
following its own linked list, so a partition never reads other ids' blocks.  ``persistenceIds``
(comma-separated) and ``fromSequenceNr``/``toSequenceNr`` (inclusive) choose
what is replayed.  Several journals can be read at once (``paths``, globs).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from engine.events import EventJournal
from engine.events.layout import IdInfo
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
from engine.spark.schemas import EVENTS_SCHEMA

SOURCE = "engine-events"
OPTIONS = ("idsPerPartition", "eventsPerPartition", "minPartitions", "persistenceIds", "fromSequenceNr",
           "toSequenceNr", "mode")
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
    cols = {  # built only when the schema names them
        "journal": lambda: repeat_string(journal, n),
        "persistence_id": lambda: repeat_string(pid, n),
        "sequence_nr": lambda: np.asarray(seqs, dtype=np.int64),
        "payload": lambda: pa.array(payloads, type=pa.binary()),
    }
    return record_batch(schema, cols, n)


def read_events(schema: StructType, part: EventsPartition) -> Iterator[pa.RecordBatch]:
    """Replay each id of the partition into Arrow batches."""
    name = journal_name(part.directory)
    from_seq = 1 if part.lo is None else max(1, part.lo)
    to_seq = None if part.hi is None else part.hi - 1
    with EventJournal.open_reader(part.directory) as journal:
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
        opts = lower(options)
        check_options(SOURCE, opts, OPTIONS)
        self.schema = user_schema(SOURCE, read_schema(EVENTS_SCHEMA, opts), schema, opts)
        self.directories = input_paths(SOURCE, opts)
        self.per_partition = int_option(opts, "idsPerPartition", None)
        self.events_per_partition = int_option(opts, "eventsPerPartition", 4_000_000) or 1
        self.min_partitions = int_option(opts, "minPartitions", 2) or 1
        raw_ids = opts.get("persistenceids")
        self.ids = None if raw_ids is None else {i.strip() for i in raw_ids.split(",")}
        self.lo = int_option(opts, "fromSequenceNr", None, minimum=0)
        to = int_option(opts, "toSequenceNr", None, minimum=0)
        self.hi = None if to is None else to + 1
        self.mode = mode_option(opts)

    def partitions(self) -> Sequence[InputPartition]:
        parts: list[InputPartition] = []
        for directory in self.directories:
            with EventJournal.open_reader(directory) as journal:
                infos = [i for i in journal.ids() if i.live > 0
                         and (self.ids is None or i.persistence_id in self.ids)
                         and (self.lo is None or self.lo <= i.highest)
                         and (self.hi is None or self.hi > i.lowest)]
            parts.extend(EventsPartition(directory, ids, self.lo, self.hi) for ids in self._groups(infos))
        return parts

    def _groups(self, infos: list[IdInfo]) -> Iterator[list[str]]:
        """The ids of each partition, in meta order: ``idsPerPartition`` each when
        given, else runs of ids holding about ``total / minPartitions`` of the
        selected events (at most ``eventsPerPartition``), so a few large
        partitions carry a journal of many small ids."""
        if self.per_partition is not None:
            names = [i.persistence_id for i in infos]
            yield from (names[k:k + self.per_partition] for k in range(0, len(names), self.per_partition))
            return
        lo = 1 if self.lo is None else max(1, self.lo)
        counts = [max(0, (i.highest if self.hi is None else min(i.highest, self.hi - 1)) - max(i.lowest, lo) + 1)
                  for i in infos]
        target = min(self.events_per_partition, max(1, -(-sum(counts) // self.min_partitions)))
        group: list[str] = []
        held = 0
        for info, count in zip(infos, counts, strict=True):
            group.append(info.persistence_id)
            held += count
            if held >= target:
                yield group
                group, held = [], 0
        if group:
            yield group

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, EventsPartition):
            return  # an empty plan is read as one InputPartition(None)
        yield from guarded(self.schema, self.mode, read_events(self.schema, partition),
                           {"journal": journal_name(partition.directory)}, partition.directory)
