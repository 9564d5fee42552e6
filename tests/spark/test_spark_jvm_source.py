"""The JVM engine-log connector (engine.spark.LogSource) in Spark: every pushdown gives
the answer Spark gets by filtering and aggregating the Python reference reader's rows itself."""

from __future__ import annotations

import re
from typing import Any

import pytest
from source_parity import SourceParity, plan

from engine.applog import AppendLog
from engine.fs import OpenMode, resolve
from engine.spark import jvmbuild, logfiles
from engine.spark.logsource import LogReader
from engine.spark.schemas import LOG_SCHEMA

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
JVM = "engine.spark.LogSource"
T0 = 1_700_000_000_000_000_000
_SPARK = SourceParity(JVM, LogReader, LOG_SCHEMA, "log")
same = _SPARK.same


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = str(tmp_path_factory.mktemp("jvm")) + "/clicks"
    log = AppendLog.open(d, segment_bytes=4096)
    for i in range(1000):
        log.append(b"p%04d" % i + b"x" * (i % 9), flags=i % 4, time_ns=T0 + i * 1500 + (i // 10) * 7)
    log.close()
    assert len(logfiles.list_segments(d)) > 4
    return d


@pytest.mark.parametrize("where", [
    "true",
    "index >= 137 and index < 612",
    "index = 999", "index > 999", "index < 0", "index <= 3", "555 <= index",
    "time >= timestamp_micros(1700000000000300) and time < timestamp_micros(1700000000000900)",
    "time > timestamp_micros(1700000000000300) and time <= timestamp_micros(1700000000000301)",
    "time_ns >= 1700000000000450000 and time_ns < 1700000000000450100",
    "index between 10 and 20 or index between 900 and 905",
    "flags = 2 and index < 100",
    "index >= 500 and time < timestamp_micros(1700000000000100)",
])
def test_filters(spark: Any, logdir: str, where: str) -> None:
    same(spark, logdir, f"select * from {{t}} where {where}")
    same(spark, logdir, f"select index, time from {{t}} where {where}")


def test_pushed_ranges_are_trusted(spark: Any, logdir: str) -> None:
    df = spark.read.format(JVM).load(logdir).where("index >= 10 and time < timestamp_micros(1700000000000900)")
    text = plan(df)
    assert "pushed filters: [index >= 10" in text and not re.search(r"\bFilter\b", text)


@pytest.mark.parametrize("select", [
    "count(*)", "count(index)", "min(index), max(index)", "min(time), max(time), min(time_ns), max(time_ns)",
    "count(*), max(index)",
])
@pytest.mark.parametrize("where", ["", " where index >= 250 and index < 260", " where index < 0",
                                   " where time >= timestamp_micros(1700000000000700)"])
def test_aggregates_from_metadata(spark: Any, logdir: str, select: str, where: str) -> None:
    same(spark, logdir, f"select {select} from {{t}}{where}")
    text = plan(spark.sql(f"select {select} from jvm_log{where}"))
    assert "aggregates: " in text


def test_limit_and_pruning(spark: Any, logdir: str) -> None:
    df = spark.read.format(JVM).load(logdir)
    assert [r["index"] for r in df.select("index").limit(5).collect()] == [0, 1, 2, 3, 4]
    assert "limit: 5" in plan(df.limit(5))
    assert "[index, time]" in plan(df.select("index", "time"))
    assert df.count() == 1000


@pytest.mark.parametrize("mode", ["DROPMALFORMED", "PERMISSIVE"])
def test_damaged_record_modes(spark: Any, tmp_path: object, mode: str) -> None:
    d = f"{tmp_path}/damaged"
    log = AppendLog.open(d, segment_bytes=1024)
    for i in range(200):
        log.append(b"r%d" % i, time_ns=T0 + i)
    log.close()
    seg = logfiles.list_segments(d)[1]
    first = logfiles.entry_offsets(resolve(None), seg, 3, 4)[0]
    with resolve(None).open(seg.log_path, OpenMode.WRITE) as h:
        h.write_at(first + 16, b"\xff")
    rows = same(spark, d, "select * from {t}", mode=mode)
    assert len(rows) == (199 if mode == "DROPMALFORMED" else 200)
    same(spark, d, "select count(*) from {t} where index > 5", mode=mode)


def test_failfast_names_file_and_offset(spark: Any, tmp_path: object) -> None:
    d = f"{tmp_path}/bad"
    log = AppendLog.open(d)
    for i in range(50):
        log.append(b"r%d" % i, time_ns=T0 + i)
    log.close()
    seg = logfiles.list_segments(d)[0]
    at = logfiles.entry_offsets(resolve(None), seg, 20, 21)[0]
    with resolve(None).open(seg.log_path, OpenMode.WRITE) as h:
        h.write_at(at + 16, b"\xff")
    with pytest.raises(Exception, match=f"{seg.log_path} at offset {at}: expected record 20 matching its checksum"):
        spark.read.format(JVM).load(d).collect()
