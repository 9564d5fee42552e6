"""Shipping the package to executors, the sink dataset handler and ``engine spark cleanup`` (no Spark)."""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any

import pyarrow as pa
import pytest

from engine.errors import ConfigError, CorruptFileError
from engine.spark import shipping


class _Context:
    def __init__(self, master: str) -> None:
        self.master = master
        self.shipped: list[str] = []

    def addPyFile(self, path: str) -> None:
        self.shipped.append(path)


class _Spark:
    def __init__(self, master: str) -> None:
        self.sparkContext = _Context(master)


def _answers(monkeypatch: pytest.MonkeyPatch, every: bool, none: bool) -> list[int]:
    calls: list[int] = []

    def fake(spark: Any) -> tuple[bool, bool, list[str]]:
        calls.append(1)
        return every, none, ["host-a (/usr/bin/python3): cannot import engine"]

    monkeypatch.setattr(shipping, "executors_can_import", fake)
    return calls


def test_local_masters_never_ship_or_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _answers(monkeypatch, False, True)
    spark = _Spark("local[2]")
    assert shipping.ship_package(spark, "auto") is False  # type: ignore[arg-type]
    assert calls == [] and spark.sparkContext.shipped == []


def test_installed_on_the_executors_is_never_shadowed(monkeypatch: pytest.MonkeyPatch) -> None:
    _answers(monkeypatch, True, False)
    spark = _Spark("spark://h:7077")
    assert shipping.ship_package(spark, "auto") is False  # type: ignore[arg-type]
    assert spark.sparkContext.shipped == []


def test_shipped_when_no_executor_can_import_and_the_zip_is_removed_at_exit(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    _answers(monkeypatch, False, True)
    registered: list[tuple[Any, ...]] = []
    monkeypatch.setattr(shipping.atexit, "register", lambda *a: registered.append(a))
    monkeypatch.setattr(shipping.tempfile, "tempdir", str(tmp_path))
    spark = _Spark("spark://h:7077")
    assert shipping.ship_package(spark, "auto") is True  # type: ignore[arg-type]
    (path,) = spark.sparkContext.shipped
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    assert "engine/spark/logsource.py" in names and not any(n.endswith(".so") for n in names)
    func, tmp, _ignore = registered[0]
    func(tmp, True)
    assert not os.path.exists(tmp)


def test_never_and_mixed_fail_at_once_saying_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    _answers(monkeypatch, False, True)
    with pytest.raises(ConfigError, match=r"cannot import engine .*pip install"):
        shipping.ship_package(_Spark("spark://h:7077"), "never")  # type: ignore[arg-type]
    _answers(monkeypatch, False, False)
    with pytest.raises(ConfigError, match="cannot all import engine"):
        shipping.ship_package(_Spark("spark://h:7077"), "auto")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not one of"):
        shipping.ship_package(_Spark("spark://h:7077"), "sometimes")  # type: ignore[arg-type]


def test_always_ships_without_asking(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    calls = _answers(monkeypatch, True, False)
    monkeypatch.setattr(shipping.atexit, "register", lambda *a: None)
    monkeypatch.setattr(shipping.tempfile, "tempdir", str(tmp_path))
    spark = _Spark("spark://h:7077")
    assert shipping.ship_package(spark, "always") is True  # type: ignore[arg-type]
    assert calls == [] and len(spark.sparkContext.shipped) == 1


def test_the_workers_python_is_forced_only_for_local_masters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    shipping.ensure_worker_path("spark://h:7077")
    assert "PYSPARK_PYTHON" not in os.environ and "PYTHONPATH" not in os.environ
    shipping.ensure_worker_path("local[2]")
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == shipping.package_root()
    assert "PYSPARK_PYTHON" in os.environ


def _dataset(tmp_path: Any) -> str:
    from engine.spark.sink import ShardWriter, commit_job

    ds = str(tmp_path / "ds")
    w = ShardWriter(ds, "1", "shard-a")
    w.write(pa.array([b"x%d" % i for i in range(20)]))
    commit_job(ds, [w.finish()], overwrite=False)
    orphan = ShardWriter(ds, "2", "shard-b")  # a driver that died before its commit
    orphan.write(pa.array([b"y"]))
    orphan.finish()
    return ds


def test_sink_datasets_verify_through_the_append_log_check(tmp_path: Any) -> None:
    from engine.fs import resolve
    from engine.spark import handler

    fs = resolve(None)
    ds = _dataset(tmp_path)
    assert handler.HANDLER.sniff(fs, ds, b"", True)
    assert not handler.HANDLER.sniff(fs, ds + "/job-1/shard-a", b"", True)
    notes = handler.verify(fs, ds)
    assert "job-1/shard-a: 20 records" in notes and any("not published" in n for n in notes)
    assert handler.summarize(fs, ds)["records"] == 20
    log = next(os.path.join(ds, "job-1/shard-a", n) for n in os.listdir(ds + "/job-1/shard-a") if n.endswith(".log"))
    with open(log, "rb") as f:
        raw = bytearray(f.read())
    raw[raw.index(b"x5") + 1] ^= 0x01  # a record in the middle: "x5" -> "x4"
    with open(log, "wb") as f:
        f.write(raw)
    with pytest.raises(CorruptFileError, match="checksum"):
        handler.verify(fs, ds)


def test_engine_spark_cleanup_removes_unpublished_jobs(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    ds = _dataset(tmp_path)
    assert main(["spark", "cleanup", ds]) == 0
    assert "removed 1 unpublished" in " ".join(capsys.readouterr().out.split())
    assert sorted(os.listdir(ds)) == ["_LOCK", "_SHARDS.json", "job-1"]
    assert main(["spark", "cleanup", "--json", ds]) == 0  # nothing left to remove
    assert json.loads(capsys.readouterr().out) == {"dataset": ds, "removed": []}
    assert main(["spark", "cleanup", str(tmp_path / "missing")]) == 1  # no such sink dataset
