"""Building the JVM connector (``engine/spark/jars/engine-spark.jar``) offline.

The connector's Java sources live in ``engine/spark/java/``; they compile
against the jars the installed ``pyspark`` package ships (``pyspark/jars/*.jar``:
Spark SQL, Catalyst, Hadoop's client API, Arrow), so no Maven download is
needed.  ``javac --release 17`` compiles them; the classes, the sources' hash
and the ``META-INF/services`` registration go into one jar inside the package.

Three drivers, one function (:func:`build`):

* the project's install (``setup.py``'s build step runs it when ``javac`` and
  ``pyspark`` are there; without them the install still succeeds);
* ``python -m engine.spark.jvmbuild`` (``--force`` to rebuild regardless);
* the first Spark use (:func:`connector_jar`, called by
  :func:`engine.spark.session.build_session`), which builds it when missing or
  stale and otherwise says in one line what to install.

The jar is cached by a hash of the sources, the registration list and the
pyspark version (stored in the jar as ``engine-spark.hash``): an unchanged tree
is never recompiled.

This module imports neither pyspark nor numpy (``setup.py`` runs it).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
JAVA_DIR = os.path.join(HERE, "java")
JAR = os.path.join(HERE, "jars", "engine-spark.jar")
HASH_ENTRY = "engine-spark.hash"
SERVICES = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
#: The JVM providers registered under a short name (``spark.read.format("engine-log")``).
#: A format is listed here in the same commit that retires its Python data
#: source: Spark refuses two providers of one short name, so a format listed
#: here is served by the JVM only (one implementation per format).  Every
#: provider is also reachable by its class name, e.g.
#: ``spark.read.format("engine.spark.LogSource")``.
REGISTERED: tuple[str, ...] = ("engine.spark.LogSource", "engine.spark.EventsSource", "engine.spark.QueueSource",
                               "engine.spark.PagesSource", "engine.spark.KvSource", "engine.spark.StreamSource")
#: The short names those providers register (their ``shortName()``).
REGISTERED_NAMES: tuple[str, ...] = ("engine-log", "engine-events", "engine-queue", "engine-pages", "engine-kv",
                                     "engine-streams")
JAVA_RELEASE = "17"


class ConnectorUnavailable(RuntimeError):
    """The connector jar is missing and cannot be built here; the message is the
    one line saying what to install."""


def _pyspark_dir() -> str | None:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))


def spark_jars() -> list[str]:
    """The jars of the installed pyspark (the compile class path); empty without pyspark."""
    root = _pyspark_dir()
    return sorted(glob.glob(os.path.join(root, "jars", "*.jar"))) if root else []


def _tool(name: str) -> str | None:
    """``name`` (javac, java) from ``$JAVA_HOME/bin`` or the ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", name), os.X_OK):
        return os.path.join(home, "bin", name)
    return shutil.which(name)


def sources() -> list[str]:
    """Every ``.java`` file of the connector, sorted."""
    return sorted(glob.glob(os.path.join(JAVA_DIR, "**", "*.java"), recursive=True))


def source_hash(jars: list[str] | None = None) -> str:
    """Hash of the sources, the registration list and the class path's jar names."""
    h = hashlib.sha256()
    for path in sources():
        h.update(os.path.relpath(path, JAVA_DIR).encode())
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    h.update("\n".join(REGISTERED).encode())
    h.update("\n".join(os.path.basename(j) for j in (spark_jars() if jars is None else jars)).encode())
    h.update(JAVA_RELEASE.encode())
    return h.hexdigest()


def built_hash(jar: str = JAR) -> str | None:
    """The source hash stored in ``jar`` (None when missing or unreadable)."""
    try:
        with zipfile.ZipFile(jar) as z:
            return z.read(HASH_ENTRY).decode().strip()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def missing() -> str | None:
    """What is missing to build the jar (one line), or None."""
    if _tool("javac") is None:
        return ("the engine Spark connector needs a JDK 17 to build: install one "
                "(apt-get install openjdk-17-jdk-headless, or set JAVA_HOME), then run "
                "python -m engine.spark.jvmbuild")
    if not spark_jars():
        return "the engine Spark connector compiles against pyspark's jars: pip install 'engine[spark]'"
    if not sources():
        return f"the engine Spark connector's sources are missing from {JAVA_DIR}"
    return None


def build(force: bool = False, jar: str = JAR) -> str:
    """Compile the connector into ``jar`` unless it is up to date; returns its path.

    Raises :class:`ConnectorUnavailable` when it cannot be built (no javac, no
    pyspark) and ``RuntimeError`` with javac's output when compiling fails."""
    problem = missing()
    if problem is not None:
        raise ConnectorUnavailable(problem)
    jars = spark_jars()
    digest = source_hash(jars)
    if not force and built_hash(jar) == digest:
        return jar
    javac = _tool("javac")
    assert javac is not None
    with tempfile.TemporaryDirectory(prefix="engine-jvmbuild-") as tmp:
        classes = os.path.join(tmp, "classes")
        os.makedirs(classes)
        argfile = os.path.join(tmp, "sources.txt")
        with open(argfile, "w") as f:
            f.write("\n".join(sources()))
        cmd = [javac, "--release", JAVA_RELEASE, "-nowarn", "-encoding", "UTF-8", "-d", classes,
               "-cp", os.pathsep.join(jars), "@" + argfile]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        os.makedirs(os.path.dirname(jar), exist_ok=True)
        partial = jar + ".tmp"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: engine.spark.jvmbuild\n\n")
            if REGISTERED:
                z.writestr(SERVICES, "\n".join(REGISTERED) + "\n")
            for root, _dirs, files in os.walk(classes):
                for name in sorted(files):
                    full = os.path.join(root, name)
                    z.write(full, os.path.relpath(full, classes))
            z.writestr(HASH_ENTRY, digest + "\n")
        os.replace(partial, jar)
    return jar


def connector_jar() -> str:
    """The connector jar for a Spark session: built (or rebuilt) when missing or
    stale and a JDK is here; an up-to-date jar shipped without a JDK is used as
    it is.  :class:`ConnectorUnavailable` (one line: what to install) otherwise."""
    if built_hash() is not None and (missing() is not None or built_hash() == source_hash()):
        return JAR
    return build()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.spark.jvmbuild", description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if the jar is up to date")
    parser.add_argument("--print-path", action="store_true", help="print the jar's path only")
    args = parser.parse_args(argv)
    try:
        jar = build(force=args.force)
    except ConnectorUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(jar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
