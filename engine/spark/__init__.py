"""Apache Spark integration: PySpark data sources and a sink for every engine format.

``register(spark)`` adds the sources (``engine-log``, ``engine-queue``,
``engine-streams``, ``engine-events``, ``engine-pages``, as far as their stores are
installed) and switches on Python filter pushdown.  See ``docs/pipeline.md``.

Only this package imports pyspark; ``import engine`` does not.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

log = logging.getLogger("engine.spark")

#: (short name, module, class) of every source; a source whose store is not
#: installed in this build is skipped by register().
SOURCES = (
    ("engine-log", "engine.spark.logsource", "EngineLogDataSource"),
    ("engine-queue", "engine.spark.queuesource", "EngineQueueDataSource"),
    ("engine-streams", "engine.spark.streamsource", "EngineStreamsDataSource"),
    ("engine-events", "engine.spark.eventsource", "EngineEventsDataSource"),
    ("engine-pages", "engine.spark.pagesource", "EnginePagesDataSource"),
)


def available_sources() -> list[str]:
    """The short names of the sources this build can register."""
    names = []
    for name, module, cls in SOURCES:
        try:
            getattr(importlib.import_module(module), cls)
        except (ModuleNotFoundError, AttributeError) as exc:
            log.debug("source %s unavailable: %s", name, exc)
            continue
        names.append(name)
    return names


def register(spark: SparkSession) -> list[str]:
    """Register every available engine source with ``spark``; returns their names.

    Also sets ``spark.sql.python.filterPushdown.enabled`` so that the readers'
    ``pushFilters`` is called (index/time ranges, ids, reader names), and ships
    the engine package to the executors (``addPyFile``) when they could not import
    it otherwise (not installed, and not on a local worker's ``PYTHONPATH``).
    """
    from engine.spark.session import ship_package

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    ship_package(spark)
    names = []
    for name, module, cls in SOURCES:
        try:
            source = getattr(importlib.import_module(module), cls)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module.startswith(exc.name) or exc.name.startswith("engine.")):
                log.debug("source %s unavailable: %s", name, exc)
                continue
            raise
        spark.dataSource.register(source)
        names.append(name)
    return names


__all__ = ["SOURCES", "available_sources", "register"]
