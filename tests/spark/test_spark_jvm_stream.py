"""The JVM engine-log stream (engine.spark.LogSource's MicroBatchStream) gives the
micro-batches, offsets and errors of the Python source's stream."""

from __future__ import annotations

import os
from typing import Any

import pytest

from engine.applog import AppendLog
from engine.spark import jvmbuild

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
JVM = "engine.spark.LogSource"
T0 = 1_700_000_000_000_000_000


def append(path: str, a: int, b: int, segment_bytes: int = 2048) -> None:
    log = AppendLog.open(path, segment_bytes=segment_bytes)
    for i in range(a, b):
        log.append(b"r%05d" % i + b"." * (i % 5), flags=i % 3, time_ns=T0 + i * 100)
    log.close()


def run(spark: Any, fmt: str, path: str, chk: str, **options: str) -> tuple[list[tuple[int, int, int, int]], str]:
    """One availableNow run: (batch id, rows, min index, max index) per micro-batch, and
    the last offset the checkpoint holds."""
    seen: list[tuple[int, int, int, int]] = []

    def each(df: Any, batch_id: int) -> None:
        r = df.selectExpr("count(*) n", "min(index) lo", "max(index) hi").first()
        if r["n"]:
            seen.append((batch_id, r["n"], r["lo"], r["hi"]))

    q = (spark.readStream.format(fmt).options(**options).load(path).writeStream.foreachBatch(each)
         .option("checkpointLocation", chk).trigger(availableNow=True).start())
    q.awaitTermination()
    offsets = os.path.join(chk, "offsets")
    last = max((n for n in os.listdir(offsets) if n.isdigit()), key=int)
    with open(os.path.join(offsets, last)) as f:
        return seen, f.read().splitlines()[-1]


@pytest.mark.parametrize("options", [{"maxRecordsPerTrigger": "70"}, {"maxBytesPerTrigger": "900"}, {}])
def test_batches_offsets_and_restart(spark: Any, tmp_path: object, options: dict[str, str]) -> None:
    d = f"{tmp_path}/clicks"
    append(d, 0, 300)
    first = {fmt: run(spark, fmt, d, f"{tmp_path}/chk-{fmt}", **options) for fmt in (JVM, "engine-log")}
    assert first[JVM] == first["engine-log"]
    assert sum(n for _b, n, _lo, _hi in first[JVM][0]) == 300
    append(d, 300, 420)
    again = {fmt: run(spark, fmt, d, f"{tmp_path}/chk-{fmt}", **options) for fmt in (JVM, "engine-log")}
    assert again[JVM] == again["engine-log"]
    assert [lo for _b, _n, lo, _hi in again[JVM][0]][:1] == [300]


def test_data_loss_fails_unless_allowed(spark: Any, tmp_path: object) -> None:
    d = f"{tmp_path}/lossy"
    append(d, 0, 200, segment_bytes=600)
    for fmt in (JVM, "engine-log"):
        run(spark, fmt, d, f"{tmp_path}/chk-{fmt}", maxRecordsPerTrigger="50", startingOffsets='{"lossy": 0}')
    append(d, 200, 400, segment_bytes=600)
    log = AppendLog.open(d, segment_bytes=600)
    log.truncate_before(330)
    log.close()
    for fmt in (JVM, "engine-log"):
        with pytest.raises(Exception, match=r"were deleted \(TTL expiry or truncation\) before they were read"):
            run(spark, fmt, d, f"{tmp_path}/chk-{fmt}")
    kept = {fmt: run(spark, fmt, d, f"{tmp_path}/chk2-{fmt}", failOnDataLoss="false",
                     startingOffsets='{"lossy": 100}') for fmt in (JVM, "engine-log")}
    assert kept[JVM] == kept["engine-log"]
