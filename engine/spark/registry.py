"""Registering the engine data sources with a SparkSession.

Two kinds: the formats the JVM connector serves (``engine-log``, ``engine-events``,
``engine-streams``:
:data:`engine.spark.jvmbuild.REGISTERED_NAMES`, registered by the jar's
``META-INF/services`` once the jar is on the session's class path) and the
Python Data Sources registered here.  Every source is part of engine: one whose
module fails to import is an error naming it, never a source silently missing
from ``spark.read.format(...)``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from engine.spark.jvmbuild import REGISTERED_NAMES
from engine.spark.shipping import ship_package

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

#: (short name, module, class) of every Python source (engine-log, engine-events and engine-streams are
#: the JVM connector's).
SOURCES = (
    ("engine-queue", "engine.spark.queuesource", "EngineQueueDataSource"),
    ("engine-pages", "engine.spark.pagesource", "EnginePagesDataSource"),
    ("engine-kv", "engine.spark.kvsource", "EngineKVDataSource"),
)


def _source(module: str, cls: str) -> type:
    try:
        found: type = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"the Spark source {module}.{cls} failed to import ({type(exc).__name__}: {exc})",
                          name=module) from exc
    return found


def available_sources() -> list[str]:
    """The short names of every engine source, the JVM connector's first (each
    Python one is checked to import)."""
    for _name, module, cls in SOURCES:
        _source(module, cls)
    return [*REGISTERED_NAMES, *(name for name, _module, _cls in SOURCES)]


def register(spark: SparkSession, ship: str | None = None) -> list[str]:
    """Register every engine source with ``spark``; returns their names.

    The sources implement no filter pushdown (PySpark caches a pushed-down plan
    across the queries of one DataFrame, which would answer them wrongly: see
    :mod:`engine.spark.logplan`), so they work whatever
    ``spark.sql.python.filterPushdown.enabled`` says.  The package is shipped to
    the executors when they cannot import it (:func:`ship_package`; ``ship`` is
    auto/always/never, default the ``spark.engine.shipPackage`` setting or auto).
    """
    ship_package(spark, ship or spark.conf.get("spark.engine.shipPackage", "auto") or "auto")
    names = list(REGISTERED_NAMES)  # served by the connector jar on the session's class path
    for name, module, cls in SOURCES:
        spark.dataSource.register(_source(module, cls))
        names.append(name)
    return names
