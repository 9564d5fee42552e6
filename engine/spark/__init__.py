"""Apache Spark integration: PySpark data sources and a sink for every engine format.

``register(spark)`` adds the sources (``engine-log``, ``engine-queue``,
``engine-streams``, ``engine-events``, ``engine-pages``).  See ``docs/pipeline.md``.

Only this package imports pyspark; ``import engine`` does not.
"""

from __future__ import annotations

from engine.spark.registry import SOURCES, available_sources, register

__all__ = ["SOURCES", "available_sources", "register"]
