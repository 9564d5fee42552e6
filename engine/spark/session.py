"""Creating a SparkSession for engine jobs, with the engine sources registered.

How the workers get to import ``engine`` is :mod:`engine.spark.shipping`'s job.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

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
    for key, value in (conf or {}).items():
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
