"""Making ``engine`` importable by Spark's Python workers.

Spark starts separate Python worker processes, which import the data source
classes by module name.

* **Local masters** (``local``, ``local[N]``, ``local-cluster[...]``): the
  workers are children of this machine's Spark, so the directory *holding the
  package* (computed from ``engine.__file__``, never from the current
  directory) is put on their ``PYTHONPATH``, and they run this interpreter
  (``PYSPARK_PYTHON``, unless already set).
* **Clusters**: what counts is what the *executors* can import, which the driver
  cannot see from its own installation.  ``ship`` decides:

  - ``auto`` (the default): one tiny job asks every executor whether it can
    import ``engine``.  If all can, nothing is shipped, so an installed copy
    (with its C extensions) is used, never shadowed by a zip.  If none can, the
    package is shipped as a zip of its Python sources (``addPyFile``; the C
    extensions are then off, the pure-Python code runs).  If only some can, it
    is an error: the executors would run different code.
  - ``always``: ship the zip without asking; for workers known not to have
    engine (where it is installed, Spark puts the zip first on the path, and
    the installed copy's C extensions would be unused).
  - ``never``: ship nothing; when executors cannot import engine the session
    fails at once, saying so and how to fix it (not after four task attempts).

  The executors' Python is the cluster's business (``PYSPARK_PYTHON`` on the
  workers, or ``spark.pyspark.python``); it is never forced to the driver's.

The zip goes to a private temporary directory that is removed when the driver
process exits (Spark serves the file from there while the session lives).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import engine
from engine.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

log = logging.getLogger("engine.spark")

SHIP_CHOICES = ("auto", "always", "never")
FIX = ("install engine (pip install 'engine[spark]') into the executors' Python on every worker "
       "(PYSPARK_PYTHON / spark.pyspark.python names it), or pass --ship-package always "
       "(spark.engine.shipPackage=always) to send the pure-Python package with the job")


def is_local(master: str | None) -> bool:
    """Whether ``master`` runs the executors as local processes of this machine's Spark."""
    return master is None or master.startswith("local")


def package_root() -> str:
    """The directory that holds the ``engine`` package."""
    return os.path.dirname(os.path.dirname(os.path.abspath(engine.__file__)))


def ensure_worker_path(master: str | None = None) -> None:
    """For a local master: the package's parent directory on ``PYTHONPATH`` and this
    interpreter as the workers' Python (unless ``PYSPARK_PYTHON`` is set).  Nothing
    for a cluster, whose workers have their own Python and paths."""
    if not is_local(master):
        return
    root = package_root()
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *parts])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def zip_package(dest_dir: str) -> str:
    """A zip of the engine package's Python sources (for ``addPyFile`` on a cluster)."""
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


def _probe() -> Callable[[Any], tuple[str, str, str | None]]:
    """A function for executors: (host, python, where engine imports from or None).

    Defined inside a function so that cloudpickle ships it by value: the
    executors need not import this module (which is what is being asked)."""

    def probe(_item: Any) -> tuple[str, str, str | None]:
        import importlib.util
        import socket
        import sys as _sys

        try:
            spec = importlib.util.find_spec("engine")
        except (ImportError, ValueError):
            spec = None
        return socket.gethostname(), _sys.executable, spec.origin if spec is not None else None

    return probe


def executors_can_import(spark: SparkSession) -> tuple[bool, bool, list[str]]:
    """Ask the executors: (all can import engine, none can, one note per executor)."""
    sc = spark.sparkContext
    n = max(2, int(sc.defaultParallelism))
    answers = set(sc.parallelize(range(n), n).map(_probe()).collect())
    notes = [f"{host} ({python}): {where or 'cannot import engine'}" for host, python, where in sorted(
        answers, key=lambda a: (a[0], a[1], a[2] or ""))]
    found = [where is not None for _h, _p, where in answers]
    return all(found), not any(found), notes


def _ship(spark: SparkSession) -> str:
    tmp = tempfile.mkdtemp(prefix="engine-spark-")
    atexit.register(shutil.rmtree, tmp, True)
    path = zip_package(tmp)
    spark.sparkContext.addPyFile(path)
    return path


def ship_package(spark: SparkSession, ship: str = "auto") -> bool:
    """Make ``engine`` importable on the executors (see the module docstring);
    returns whether the package was shipped.  ConfigError when the executors cannot
    import it and ``ship`` does not allow shipping, or when only some can."""
    if ship not in SHIP_CHOICES:
        raise ConfigError(f"ship_package: {ship!r} is not one of {', '.join(SHIP_CHOICES)}")
    master = spark.sparkContext.master
    if is_local(master):
        return False
    if ship == "always":
        log.info("shipping the engine package to the executors (%s): %s", master, _ship(spark))
        return True
    every, none, notes = executors_can_import(spark)
    if every:
        return False
    if none and ship == "auto":
        log.warning("the executors of %s cannot import engine: shipping its Python sources "
                    "(the C extensions are off there); to use an installed copy instead: %s", master, FIX)
        _ship(spark)
        return True
    raise ConfigError(
        f"the executors of {master} cannot {'all ' if not none else ''}import engine "
        f"({'; '.join(notes)}): {FIX}")
