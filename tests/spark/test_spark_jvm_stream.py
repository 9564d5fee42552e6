"""The JVM engine-log stream (engine.spark.LogSource's MicroBatchStream, also the short name
``engine-log``) gives the micro-batches, offsets and errors the Python source's stream gave
(recorded in EXPECTED when both ran side by side, before the Python one was retired)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from engine.applog import AppendLog
from engine.spark import jvmbuild

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
JVM = "engine.spark.LogSource"
T0 = 1_700_000_000_000_000_000
#: What the Python source's stream gave for these runs (batches, last offset) before it was
#: retired for the JVM one: the first run, then the run after 120 more records.
EXPECTED: dict[str, tuple[Any, Any]] = {
    '{"maxRecordsPerTrigger": "70"}': (
        ((
            (0, 70, 0, 69), (1, 70, 70, 139), (2, 70, 140, 209), (3, 70, 210, 279), (4, 20, 280, 299),
        ), '{"clicks": {"index": 300}}'),
        ((
            (5, 70, 300, 369), (6, 50, 370, 419),
        ), '{"clicks": {"index": 420}}'),
    ),
    '{"maxBytesPerTrigger": "900"}': (
        ((
            (0, 37, 0, 36), (1, 37, 37, 73), (2, 10, 74, 83), (3, 37, 84, 120), (4, 37, 121, 157),
            (5, 10, 158, 167), (6, 37, 168, 204), (7, 37, 205, 241), (8, 10, 242, 251), (9, 37, 252, 288),
            (10, 11, 289, 299),
        ), '{"clicks": {"index": 300}}'),
        ((
            (11, 36, 300, 335), (12, 37, 336, 372), (13, 37, 373, 409), (14, 10, 410, 419),
        ), '{"clicks": {"index": 420}}'),
    ),
    '{}': (
        ((
            (0, 300, 0, 299),
        ), '{"clicks": {"index": 300}}'),
        ((
            (1, 120, 300, 419),
        ), '{"clicks": {"index": 420}}'),
    ),
}
KEPT = (((0, 70, 330, 399),), '{"lossy": {"index": 400}}')


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
    first = run(spark, "engine-log", d, f"{tmp_path}/chk", **options)
    append(d, 300, 420)
    again = run(spark, "engine-log", d, f"{tmp_path}/chk", **options)
    want = EXPECTED[json.dumps(options)]
    assert (first[0], first[1]) == (list(want[0][0]), want[0][1])
    assert (again[0], again[1]) == (list(want[1][0]), want[1][1])


def test_data_loss_fails_unless_allowed(spark: Any, tmp_path: object) -> None:
    d = f"{tmp_path}/lossy"
    append(d, 0, 200, segment_bytes=600)
    run(spark, JVM, d, f"{tmp_path}/chk", maxRecordsPerTrigger="50", startingOffsets='{"lossy": 0}')
    append(d, 200, 400, segment_bytes=600)
    log = AppendLog.open(d, segment_bytes=600)
    log.truncate_before(330)
    log.close()
    with pytest.raises(Exception, match=r"were deleted \(TTL expiry or truncation\) before they were read"):
        run(spark, JVM, d, f"{tmp_path}/chk")
    kept = run(spark, "engine-log", d, f"{tmp_path}/chk2", failOnDataLoss="false", startingOffsets='{"lossy": 100}')
    assert (kept[0], kept[1]) == (list(KEPT[0]), KEPT[1])


def test_positions_below_the_first_live_index_and_a_tiny_byte_budget(spark: Any, tmp_path: object) -> None:
    """A start below what truncation left fails the query's definition; a start inside the
    live records is honoured; maxBytesPerTrigger smaller than a record still moves one
    record per micro-batch (ported from the retired Python stream reader's tests)."""
    d = f"{tmp_path}/trunc"
    append(d, 0, 100, segment_bytes=500)
    log = AppendLog.open(d, segment_bytes=500)
    log.truncate_before(42)
    log.close()
    with pytest.raises(Exception, match="is below its first live index 42"):
        run(spark, "engine-log", d, f"{tmp_path}/chk0", startingOffsets='{"trunc": 10}')
    seen, last = run(spark, "engine-log", d, f"{tmp_path}/chk1", startingOffsets='{"trunc": 60}')
    assert [(n, lo, hi) for _b, n, lo, hi in seen] == [(40, 60, 99)] and last == '{"trunc": {"index": 100}}'
    seen, last = run(spark, "engine-log", d, f"{tmp_path}/chk2", startingOffsets='{"trunc": 96}',
                     maxBytesPerTrigger="1")
    assert [(n, lo) for _b, n, lo, _hi in seen] == [(1, 96), (1, 97), (1, 98), (1, 99)]
