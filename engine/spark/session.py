"""Creating a SparkSession for engine jobs, with the engine sources registered.

How the workers get to import ``engine`` is :mod:`engine.spark.shipping`'s job.
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING

from engine.spark import jvmbuild
from engine.spark.registry import register
from engine.spark.shipping import ensure_worker_path

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession


def build_session(master: str | None = None, app_name: str = "engine", *,
                  shuffle_partitions: int = 4, quiet: bool = True,
                  conf: dict[str, str] | None = None, ship: str | None = None) -> SparkSession:
    """A SparkSession for engine jobs, with the engine sources registered.

    ``master`` defaults to ``local[*]``; the UI is off and logs are quiet unless
    ``quiet`` is false; ``conf`` adds Spark settings; ``ship`` (auto / always /
    never) says whether to send the package to a cluster's executors
    (:mod:`engine.spark.shipping`).
    """
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    master = master or "local[*]"
    ensure_worker_path(master)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
    )
    settings = dict(conf or {})
    jar = connector_jar()
    if jar is not None:
        given = settings.get("spark.jars", "")
        settings["spark.jars"] = ",".join(p for p in (given, jar) if p)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    try:
        register(spark, ship)  # ships the package to the executors when they cannot import it
    except BaseException:
        spark.stop()
        raise
    return spark


def connector_jar() -> str | None:
    """The JVM connector's jar for the session (built when missing or stale).

    When it cannot be built (no JDK, :mod:`engine.spark.jvmbuild`), one line says
    what to install: an error once a format is served by the JVM connector
    (:data:`engine.spark.jvmbuild.REGISTERED`), a warning while every
    registered format is still a Python source."""
    try:
        return jvmbuild.connector_jar()
    except jvmbuild.ConnectorUnavailable as exc:
        if jvmbuild.REGISTERED:
            raise
        logging.getLogger("engine.spark").warning("%s", exc)
        return None
