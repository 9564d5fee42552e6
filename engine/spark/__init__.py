"""Apache Spark integration: PySpark data sources and a sink for every engine format.

``register(spark)`` adds the sources (``engine-log``, ``engine-queue``,
``engine-streams``, ``engine-events``, ``engine-pages``, ``engine-kv``); ``load`` and
``save`` read and write them from ``str`` or ``pathlib.Path`` paths (PySpark's own
``.load()`` takes text only).  See ``docs/pipeline.md``.

Only this package imports pyspark; ``import engine`` does not.
"""

from __future__ import annotations

from engine.spark.io import load, save
from engine.spark.registry import SOURCES, available_sources, register

__all__ = ["SOURCES", "available_sources", "load", "register", "save"]
