"""The Python reference reader of ``engine-log`` batch reads, without Spark.

Spark's ``engine-log`` (batch and streaming reads, and the sink) is the JVM
connector (``engine.spark.LogSource``, ``engine/spark/java``); this module is no
Spark data source any more.  :class:`LogReader` is the reference the
connector's parity tests compare it with (record for record, error for error:
``tests/spark/test_spark_jvm_parity.py``, ``test_spark_jvm_source.py``), driven
directly, and what ``stress/readpaths`` reads damaged logs through::

    reader = LogReader({"path": "/data/logs/clicks", "mode": "FAILFAST"}, LOG_SCHEMA)
    for part in reader.partitions():
        for batch in reader.read(part):   # pyarrow RecordBatches
            ...

It takes the connector's read options (a log directory, a sink dataset, a
directory holding logs, globs, ``paths``; Kafka-style positions, timestamps,
``recordsPerPartition``, ``minPartitions``, ``batchRecords``, ``mode``; the
streaming options are accepted and ignored).  Partitions follow the data: one
per segment, split by index ranges (:mod:`engine.spark.logplan`).  Every record
read is checked against its ``.crc`` checksum; ``mode`` says what a damaged one
does.  A schema of only ``log, segment, index, time, time_ns`` is answered from
the IDX files without reading the LOG.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from engine.spark import logfiles
from engine.spark.logplan import (
    LogPartition,
    end_positions,
    plan,
    read_partition,
    spans,
    start_positions,
)
from engine.spark.options import (
    check_options,
    input_paths,
    int_option,
    lower,
    mode_option,
    read_schema,
    user_schema,
)
from engine.spark.schemas import LOG_SCHEMA

log = logging.getLogger("engine.spark")

SOURCE = "engine-log"
#: Records per partition, and partitions at least (options ``recordsPerPartition``
#: and ``minPartitions``).  Each partition is a Spark task, and a Python source's
#: task has a fixed cost (tens of milliseconds of Python worker round trips,
#: measured with an empty source), so a plan has few, large partitions: up to 4
#: M records each (memory stays bounded by ``batchRecords``), and at least two,
#: so that even a small log is read by two cores (docs/pipeline.md).
DEFAULT_RECORDS_PER_PARTITION = 4_000_000
DEFAULT_MIN_PARTITIONS = 2
DEFAULT_BATCH_RECORDS = 65_536

#: Options of a batch read.
BATCH_OPTIONS = (
    "recordsPerPartition", "batchRecords", "minPartitions", "mode", "failOnDataLoss",
    "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
)
#: Options of a streaming read.
STREAM_OPTIONS = (
    "recordsPerPartition", "batchRecords", "mode", "failOnDataLoss", "maxRecordsPerTrigger",
    "maxBytesPerTrigger", "startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
)
__all__ = ["LogPartition", "LogReader", "plan"]


def _logs(opts: dict[str, str]) -> list[logfiles.LogDir]:
    return logfiles.logs_of(input_paths(SOURCE, opts))


class LogReader(DataSourceReader):
    """Batch reader: plan partitions from the segments and the options, decode to Arrow.

    Everything is decided here, from the options: the reader has no
    ``pushFilters``, so Spark filters rows itself and a plan never depends on a
    query's filters.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        opts = lower(options)
        # The streaming-only options (maxRecordsPerTrigger, ...) are accepted and
        # have no effect, as in Spark's Kafka source, so one set of options serves both.
        check_options(SOURCE, opts, set(BATCH_OPTIONS) | set(STREAM_OPTIONS))
        self.options = opts
        self.schema = user_schema(SOURCE, read_schema(LOG_SCHEMA, opts), schema, opts)
        self.logs = _logs(opts)
        self.per_partition = int_option(opts, "recordsPerPartition", DEFAULT_RECORDS_PER_PARTITION) or 1
        self.batch_records = int_option(opts, "batchRecords", DEFAULT_BATCH_RECORDS) or 1
        self.min_partitions = int_option(opts, "minPartitions", DEFAULT_MIN_PARTITIONS) or 1
        self.mode = mode_option(opts)

    def partitions(self) -> Sequence[InputPartition]:
        found = spans(self.logs)
        starts = start_positions(SOURCE, self.options, found)
        ends = end_positions(SOURCE, self.options, found)
        bounds = {name: (a, ends[name]) for name, a in starts.items()}
        return plan(found, self.per_partition, bounds, self.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, LogPartition):
            return  # an empty plan is read as one InputPartition(None)
        yield from read_partition(self.schema, partition, self.batch_records, self.mode)
