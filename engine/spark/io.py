"""Reading and writing engine files with Spark from paths as Python users hold them.

PySpark's own ``DataFrameReader.load`` and ``DataFrameWriter.save`` take ``str``
paths only (a :class:`pathlib.Path` fails inside py4j).  :func:`load` and
:func:`save` take ``str`` or any ``os.PathLike[str]`` (one path or a list), and
pass the options through as Spark's own sources name them::

    from pathlib import Path
    from engine.spark import load, register

    register(spark)
    df = load(spark, "engine-log", Path("data/log"), onCorrupt="skip")
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from engine.fs.paths import as_path

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

PathArg = str | os.PathLike[str]


def spark_paths(path: PathArg | Sequence[PathArg]) -> str | list[str]:
    """``path`` (or each of a list of paths) as the ``str`` PySpark's readers and
    writers need; a TypeError in the user's terms for anything else."""
    if isinstance(path, (str, os.PathLike)):
        return as_path(path, "path")
    if isinstance(path, Sequence) and not isinstance(path, (bytes, bytearray)):
        return [as_path(p, "path") for p in path]
    raise TypeError(f"path must be a str, an os.PathLike or a list of them, not {type(path).__name__}")


def load(spark: SparkSession, source: str, path: PathArg | Sequence[PathArg], **options: object) -> DataFrame:
    """``spark.read.format(source).options(**options).load(path)``, with ``path``
    a ``str``, an ``os.PathLike`` or a list of them.  Option values are passed as
    text, as Spark passes every option."""
    reader = spark.read.format(source)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(spark_paths(path))


def save(df: DataFrame, source: str, path: PathArg, *, mode: str = "append", **options: object) -> None:
    """``df.write.format(source).mode(mode).options(**options).save(path)`` (append by
    default: the engine sinks take append or overwrite), with
    ``path`` a ``str`` or an ``os.PathLike``."""
    writer = df.write.format(source).mode(mode)
    for key, value in options.items():
        writer = writer.option(key, str(value))
    writer.save(as_path(path, "path"))


__all__ = ["load", "save", "spark_paths"]
