"""Building Arrow record batches that match a source's declared Spark schema exactly.

Spark checks that a Python data source's batches have *exactly* the Arrow schema
it derives from the declared schema (``to_arrow_schema(schema, timezone="UTC")``:
timestamps as ``timestamp[us, tz=UTC]``, nullability included), so every source
builds its batches through :func:`record_batch`.  The helpers build columns from
numpy arrays and constants without a Python loop per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import StructType

from engine.errors import ConfigError, EngineError

#: The PERMISSIVE mode's column (see :mod:`engine.spark.options`).
CORRUPT_COLUMN = "_corrupt_record"
TIMESTAMP = pa.timestamp("us", tz="UTC")


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def repeat_string(value: str, n: int) -> pa.Array:
    """A string column holding ``value`` ``n`` times, built from two buffers."""
    raw = value.encode("utf-8")
    offsets = (np.arange(n + 1, dtype=np.int64) * len(raw)).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def ns_to_timestamp(ns: np.ndarray) -> pa.Array:
    """Nanoseconds since the epoch -> Spark timestamps (microseconds, floor)."""
    us = np.floor_divide(np.asarray(ns, dtype=np.int64), 1000)
    return pa.Array.from_buffers(TIMESTAMP, len(us), [None, pa.py_buffer(np.ascontiguousarray(us))])


def record_batch(schema: StructType, columns: Mapping[str, Any], n: int) -> pa.RecordBatch:
    """A batch of ``n`` rows with exactly the columns of ``schema``, in its order.

    ``columns`` maps names to Arrow arrays, numpy arrays or Python lists, or to
    functions of no argument that build one, called only when ``schema`` names
    the column (a schema given with ``.schema(...)`` may ask for a few: the
    others are never built); each is cast to the declared Arrow type.  A column
    the schema names but ``columns`` lacks is a :class:`ConfigError`.
    """
    target = arrow_schema(schema)
    arrays = []
    for field in target:
        if field.name == CORRUPT_COLUMN and field.name not in columns:
            arrays.append(pa.nulls(n, pa.string()))
            continue
        if field.name not in columns:
            raise ConfigError(f"the source has no column {field.name!r}; available: {sorted(columns)}")
        value = columns[field.name]
        if callable(value):
            value = value()
        if isinstance(value, np.ndarray):
            arr = pa.array(value)
        elif isinstance(value, (pa.Array, pa.ChunkedArray)):
            arr = value
        else:
            arr = pa.array(value, type=field.type)
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if arr.type != field.type:
            arr = arr.cast(field.type)
        if len(arr) != n:
            raise ConfigError(f"column {field.name!r} has {len(arr)} values, expected {n}")
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def damage_text(exc: BaseException) -> str:
    """What a ``_corrupt_record`` value says: the error with its file and offset."""
    return f"{type(exc).__name__}: {exc}"


def corrupt_batch(schema: StructType, known: Mapping[str, Any], exc: BaseException) -> pa.RecordBatch:
    """One PERMISSIVE row for damage the store's reader reported: the columns in
    ``known`` (which store, which file) set, the others null, ``_corrupt_record``
    saying what is wrong and where."""
    target = arrow_schema(schema)
    arrays = []
    for field in target:
        if field.name == CORRUPT_COLUMN:
            arrays.append(pa.array([damage_text(exc)], type=pa.string()))
        elif field.name in known:
            arrays.append(pa.array([known[field.name]], type=field.type))
        else:
            arrays.append(pa.nulls(1, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def guarded(schema: StructType, mode: str, batches: Iterator[pa.RecordBatch], known: Mapping[str, Any],
            what: str) -> Iterator[pa.RecordBatch]:
    """Batches of one partition read through a store's own reader, with ``mode``
    applied to the damage that reader reports (an :class:`EngineError`).

    FAILFAST lets the error fail the query.  The stores' readers stop at the
    first damage (what follows cannot be trusted), so DROPMALFORMED ends the
    partition there with a warning, and PERMISSIVE adds one row whose
    ``_corrupt_record`` names the file and the offset.
    """
    import logging

    try:
        yield from batches
    except EngineError as exc:
        if mode == "FAILFAST":
            raise
        if mode == "DROPMALFORMED":
            logging.getLogger("engine.spark").warning("%s: damaged, the rest is left out: %s", what, exc)
            return
        yield corrupt_batch(schema, known, exc)
