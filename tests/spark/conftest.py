"""Session-wide SparkSession for the Spark tests (one JVM for the whole run)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: The spark extra's packages (setup.cfg); every module here needs them.
SPARK_EXTRA = ("pyspark", "pyarrow", "numpy", "pandas")
MISSING = [name for name in SPARK_EXTRA if importlib.util.find_spec(name) is None]


class _WithoutTheExtra(pytest.Module):
    """A test module of this directory when the spark extra is not installed: it
    is reported skipped, with the reason, instead of failing to import."""

    def collect(self) -> list[Any]:
        pytest.skip(f"needs the spark extra (pip install -e '.[spark]'): {', '.join(MISSING)} not installed")


def pytest_pycollect_makemodule(module_path: Path, parent: Any) -> pytest.Module | None:
    if MISSING and module_path.name.startswith("test_"):
        return _WithoutTheExtra.from_parent(parent, path=module_path)
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """local[2], UI off, quiet logs, two shuffle partitions; engine sources registered.

    Tests that need no Spark (most of them) do not use this fixture, so running
    them alone never starts a JVM.
    """
    from engine.spark.session import build_session

    session = build_session("local[2]", "engine-tests", shuffle_partitions=2, conf={
        # Short-lived test JVM: the C1 compiler only (faster warm-up), small plans.
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "spark.sql.adaptive.enabled": "false",
    })
    session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    yield session
    session.stop()


def pytest_configure(config: pytest.Config) -> None:
    # pyspark 4.3 warns about pandas 3 at import and about untyped UDFs; not ours.
    config.addinivalue_line("filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning")
    config.addinivalue_line("filterwarnings", "ignore:Cannot infer the eval type:UserWarning")
