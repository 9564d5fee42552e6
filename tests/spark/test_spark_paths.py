"""PySpark's ``.load()`` takes text paths only: ``engine.spark.load`` and ``save``
take a ``pathlib.Path`` (or a list of them), as every engine entry point does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import engine
from engine.spark import load, save

pytestmark = pytest.mark.spark


def test_load_and_save_take_pathlib_paths(spark: Any, tmp_path: Path) -> None:
    with engine.AppendLog.open(tmp_path / "log") as log:
        for i in range(5):
            log.append(f"record {i}".encode())
    with engine.AppendLog.open(tmp_path / "log2") as log:
        log.append(b"other")
    df = load(spark, "engine-log", tmp_path / "log")
    assert sorted(r["data"] for r in df.select("data").collect()) == [f"record {i}".encode() for i in range(5)]
    both = load(spark, "engine-log", [tmp_path / "log", tmp_path / "log2"])
    assert both.count() == 6
    save(df, "engine-log", tmp_path / "copy")
    assert load(spark, "engine-log", tmp_path / "copy").count() == 5
