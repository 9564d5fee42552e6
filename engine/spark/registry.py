"""The engine data sources of a SparkSession.

Every format is the JVM connector's (``engine-log``, ``engine-events``,
``engine-queue``, ``engine-pages``, ``engine-kv``, ``engine-streams``:
:data:`engine.spark.jvmbuild.REGISTERED_NAMES`), registered by the jar's
``META-INF/services`` once the jar is on the session's class path
(:func:`engine.spark.session.build_session` puts it there; ``spark-submit
--jars`` for a session built elsewhere).  No Python Data Source is left: the
Python readers stay as the parity tests' references and the crash suite's
read paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.spark.jvmbuild import REGISTERED_NAMES
from engine.spark.shipping import ship_package

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession


def available_sources() -> list[str]:
    """The short names of every engine source (the JVM connector's)."""
    return list(REGISTERED_NAMES)


def register(spark: SparkSession, ship: str | None = None) -> list[str]:
    """Make ``spark`` ready for the engine sources; returns their names.

    The sources themselves come with the connector jar on the session's class
    path.  What this adds is the package on the executors, for the Python side
    of a job (the pipeline's steps, users' UDFs over engine types), when they
    cannot import it (:func:`ship_package`; ``ship`` is auto/always/never,
    default the ``spark.engine.shipPackage`` setting or auto).
    """
    ship_package(spark, ship or spark.conf.get("spark.engine.shipPackage", "auto") or "auto")
    return list(REGISTERED_NAMES)
