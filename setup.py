"""Build script: the metadata lives in setup.cfg; this file only adds the optional
C accelerators.

Each ``engine/<store>/_native*.c`` becomes the extension ``engine.<store>._native*``.
They are *optional*: every one has a pure-Python twin that the store uses when the
extension is missing (no compiler, or ``ENGINE_PURE_PYTHON=1``), and the tests run
both and compare them byte for byte.  ``optional=True`` turns a failed compile into
a warning rather than a failed install.
"""

from glob import glob

from setuptools import Extension, setup

NATIVE = [
    Extension(
        source[: -len(".c")].replace("/", "."),
        [source],
        include_dirs=["engine"],  # engine/crc32.h: the CRC-32 every twin shares
        depends=["engine/crc32.h"],
        optional=True,
        extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    )
    for source in sorted(glob("engine/*/_native*.c"))
]

setup(ext_modules=NATIVE)
