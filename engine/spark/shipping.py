"""Making ``engine`` importable by Spark's Python workers.

Spark starts separate Python worker processes, which import the data source
classes by module name.  When engine is pip-installed that just works.  When it
is used from a source tree (tests, ``python -m engine``), the workers need the
directory *holding the package* on their ``PYTHONPATH``; it is computed from
``engine.__file__``, never from the current directory.  On a cluster
(``--master`` other than ``local``), the package is also shipped to the
executors as a zip with ``addPyFile``.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import zipfile
from typing import TYPE_CHECKING

import engine

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

log = logging.getLogger("engine.spark")


def package_root() -> str:
    """The directory that holds the ``engine`` package."""
    return os.path.dirname(os.path.dirname(os.path.abspath(engine.__file__)))


def ensure_worker_path() -> None:
    """Put the package's parent directory on PYTHONPATH for local Python workers."""
    root = package_root()
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *parts])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def zip_package(dest_dir: str) -> str:
    """A zip of the engine package (for ``addPyFile`` on a cluster)."""
    root = package_root()
    path = os.path.join(dest_dir, "engine.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, "engine")):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in filenames:
                if name.endswith((".py", ".typed")):
                    full = os.path.join(dirpath, name)
                    zf.write(full, os.path.relpath(full, root))
    return path


def workers_can_import(master: str) -> bool:
    """Whether Spark's Python workers will find ``engine`` without shipping it.

    True when it is installed (under a site-packages directory) or, for a local
    master, when its parent directory is on ``PYTHONPATH``.
    """
    import site

    root = package_root()
    sites = [*site.getsitepackages(), site.getusersitepackages()]
    if any(os.path.abspath(root).startswith(os.path.abspath(s)) for s in sites):
        return True
    parts = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return master.startswith("local") and root in parts


def ship_package(spark: SparkSession) -> None:
    """Send the engine package to the executors (``addPyFile``) if they cannot import it."""
    master = spark.sparkContext.master or "local"
    if not workers_can_import(master):
        log.info("shipping the engine package to the executors (%s)", master)
        spark.sparkContext.addPyFile(zip_package(tempfile.mkdtemp(prefix="engine-spark-")))
