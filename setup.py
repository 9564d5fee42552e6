"""Build script: the metadata lives in setup.cfg; this file only adds the optional
C accelerators.

Each ``engine/<store>/_native*.c`` becomes the extension ``engine.<store>._native*``.
They are *optional*: every one has a pure-Python twin that the store uses when the
extension is missing (no compiler, or ``ENGINE_PURE_PYTHON=1``), and the tests run
both and compare them byte for byte.  ``optional=True`` turns a failed compile into
a warning rather than a failed install.
"""

import importlib.util
import os
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class BuildPyWithConnector(build_py):
    """``build_py`` that first compiles the JVM Spark connector
    (``engine/spark/jars/engine-spark.jar``, see ``engine/spark/jvmbuild.py``) when a
    JDK and pyspark are here.  Optional like the C accelerators: without them the
    install succeeds and the first Spark use says in one line what to install."""

    def run(self) -> None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine", "spark", "jvmbuild.py")
        spec = importlib.util.spec_from_file_location("engine_jvmbuild", path)
        if spec is not None and spec.loader is not None:
            jvmbuild = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(jvmbuild)
            try:
                print("engine: built the Spark connector", jvmbuild.build())
            except Exception as exc:  # optional: reported, never a failed install
                print(f"engine: the Spark connector was not built ({exc})")
        super().run()


NATIVE = [
    Extension(
        source[: -len(".c")].replace("/", "."),
        [source],
        include_dirs=["engine"],  # engine/crc32.h (the CRC-32 every twin shares), engine/native.h
        depends=["engine/crc32.h", "engine/native.h"],
        optional=True,
        extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    )
    for source in sorted(glob("engine/*/_native*.c"))
]

setup(ext_modules=NATIVE, cmdclass={"build_py": BuildPyWithConnector})
