"""Apache Spark integration: data sources for every engine format and the engine-log sink.

``engine-log`` (reads and the sink), ``engine-events`` and ``engine-streams`` are
the JVM connector (``engine/spark/java``, built into
``engine/spark/jars/engine-spark.jar`` by :mod:`engine.spark.jvmbuild`, which
:func:`engine.spark.session.build_session` puts on the session's class path);
``register(spark)`` adds the Python sources (``engine-queue``, ``engine-pages``,
``engine-kv``); ``load`` and
``save`` read and write them from ``str`` or ``pathlib.Path`` paths (PySpark's own
``.load()`` takes text only).  See ``docs/pipeline.md``.

Only this package imports pyspark; ``import engine`` does not.
"""

from __future__ import annotations

from engine.spark.io import load, save
from engine.spark.registry import SOURCES, available_sources, register

__all__ = ["SOURCES", "available_sources", "load", "register", "save"]
