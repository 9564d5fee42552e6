"""The Spark schemas of the engine sources (documented in ``docs/pipeline.md``).

Times are Spark timestamps (microseconds, UTC); where the files keep nanoseconds,
a ``*_ns`` long column carries the exact value.  Payloads are binary.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


def _schema(*fields: tuple[str, object, bool]) -> StructType:
    return StructType([StructField(name, typ, nullable) for name, typ, nullable in fields])  # type: ignore[arg-type]


#: engine-log: one row per append-log record.
LOG_SCHEMA = _schema(
    ("log", StringType(), False),  # the log's directory name (or the sink shard's)
    ("segment", LongType(), False),  # first index of the segment holding the record
    ("index", LongType(), False),  # the record's index (dense, increasing)
    ("time", TimestampType(), False),  # record time (microseconds)
    ("time_ns", LongType(), False),  # record time, exact nanoseconds
    ("flags", LongType(), False),  # the record's u32 flags
    ("data", BinaryType(), False),
)

#: engine-queue: one row per pending (unconfirmed) item per reader.
QUEUE_SCHEMA = _schema(
    ("queue", StringType(), False),
    ("reader", StringType(), False),  # "" is the default reader
    ("id", LongType(), False),
    ("add_time", TimestampType(), False),
    ("expire_time", TimestampType(), True),  # null: never expires
    ("error_count", IntegerType(), False),
    ("data", BinaryType(), False),
)

#: engine-streams: one row per stream in a journald file.
STREAMS_SCHEMA = _schema(
    ("journal", StringType(), False),  # the journal file's name
    ("stream", LongType(), False),  # stream number in the file
    ("ident", StringType(), False),  # the stream's identifier (UTF-8, undecodable bytes replaced)
    ("start_offset", LongType(), False),  # offset of the stream's first byte (wrapped files)
    ("status", StringType(), False),  # complete / aborted / open
    ("bytes", LongType(), False),
    ("data", BinaryType(), False),
)

#: engine-events: one row per event.
EVENTS_SCHEMA = _schema(
    ("journal", StringType(), False),  # the journal directory's name
    ("persistence_id", StringType(), False),
    ("sequence_nr", LongType(), False),
    ("payload", BinaryType(), False),
)

#: engine-pages: one row per page of a page store.
PAGES_SCHEMA = _schema(
    ("store", StringType(), False),  # the store file's name
    ("page", LongType(), False),  # page id
    ("offset", LongType(), False),  # byte offset of the page in the store file
    ("free", BooleanType(), False),  # on the free list
    ("data", BinaryType(), False),
)
