"""Apache Spark integration: data sources for every engine format, the engine-log and engine-queue sinks.

Every format (``engine-log`` reads and the sink, ``engine-queue`` reads and the sink,
``engine-events``, ``engine-pages``, ``engine-kv``, ``engine-streams``) is the JVM
connector's (``engine/spark/java``, built into ``engine/spark/jars/engine-spark.jar``
by :mod:`engine.spark.jvmbuild`, which :func:`engine.spark.session.build_session`
puts on the session's class path); ``load`` and
``save`` read and write them from ``str`` or ``pathlib.Path`` paths (PySpark's own
``.load()`` takes text only).  See ``docs/pipeline.md``.

Only this package imports pyspark; ``import engine`` does not.
"""

from __future__ import annotations

from engine.spark.io import load, save
from engine.spark.registry import available_sources, register

__all__ = ["available_sources", "load", "register", "save"]
