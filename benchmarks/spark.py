"""Spark scan benchmark: the engine-log source against Parquet and a tuple-yielding reader.

    python3 -m benchmarks.spark            # 2 million 100-byte records
    python3 -m benchmarks.spark --quick    # 200 thousand

All three read the same records with the same schema on the same SparkSession
(``local[2]``) and are forced through Spark's ``noop`` sink, so every column of
every row is produced.  Targets (issue 8): the source at least 0.5x Parquet and
at least 2x the tuple reader.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import struct
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from benchmarks.common import Row, bench_dir, report
from engine.spark import logcodec as lc
from engine.spark import logfiles
from engine.spark.logsource import LogPartition, plan
from engine.spark.schemas import LOG_SCHEMA
from engine.spark.sink import ShardWriter, commit_job

RESULTS = os.path.join(os.path.dirname(__file__), "results", "spark.json")
_UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)


class TupleLogReader(DataSourceReader):
    """The same partitions as engine-log, but one Python tuple per record (the baseline)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.path = options["path"]
        self.per_partition = int(options.get("recordsPerPartition", "1000000"))

    def partitions(self) -> list[InputPartition]:
        return list(plan(logfiles.dataset_logs(self.path), self.per_partition))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        if not isinstance(partition, LogPartition):
            return
        seg = partition.segment
        unpack = struct.Struct(lc.RECORD_FMT).unpack_from
        with open(seg.idx_path, "rb") as idx, open(seg.log_path, "rb") as log:
            idx.seek(lc.HEADER_SIZE + lc.INDEX_ENTRY * partition.start)
            first = struct.unpack(lc.INDEX_FMT, idx.read(lc.INDEX_ENTRY))
            log.seek(first[2])
            buf = log.read(seg.end_offset - first[2])
        pos = 0
        for i in range(partition.start, partition.stop):
            size, flags, t = unpack(buf, pos)
            data = buf[pos + 16:pos + 16 + size]
            pos += 16 + size
            yield (partition.log_name, seg.first_index, seg.first_index + i,
                   _EPOCH + dt.timedelta(microseconds=t // 1000), t, flags, data)


class TupleLogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-log-tuples"

    def schema(self) -> StructType:
        return LOG_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return TupleLogReader(dict(self.options), schema)


def make_data(root: str, n: int) -> tuple[str, str]:
    """n 100-byte records as an engine-log dataset and as Parquet (same columns)."""
    ds = os.path.join(root, "log")
    w = ShardWriter(ds, "bench", "s0", segment_bytes=1 << 30)
    t0 = time.time_ns() - n * 1000
    step = 100_000
    tables = []
    rng = np.random.default_rng(1)
    for a in range(0, n, step):
        b = min(n, a + step)
        raw = rng.integers(32, 127, size=(b - a) * 100, dtype=np.uint8).tobytes()
        offsets = (np.arange(b - a + 1, dtype=np.int32) * 100)
        data = pa.Array.from_buffers(pa.binary(), b - a, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])
        times = t0 + np.arange(a, b, dtype=np.int64) * 1000
        w.write(data, times)
        tables.append(pa.table({
            "log": pa.array(["job-bench/s0"] * (b - a)), "segment": pa.array(np.zeros(b - a, np.int64)),
            "index": pa.array(np.arange(a, b, dtype=np.int64)),
            "time": pa.array(times // 1000).cast(pa.timestamp("us", tz="UTC")),
            "time_ns": pa.array(times), "flags": pa.array(np.zeros(b - a, np.int64)), "data": data}))
    commit_job(ds, [w.finish()], overwrite=True)
    pq_dir = os.path.join(root, "parquet")
    os.makedirs(pq_dir)
    table = pa.concat_tables(tables)
    half = (n + 1) // 2
    pq.write_table(table.slice(0, half), os.path.join(pq_dir, "part-0.parquet"))
    pq.write_table(table.slice(half), os.path.join(pq_dir, "part-1.parquet"))
    return ds, pq_dir


def scan_rate(df: Any, n: int, repeat: int) -> float:
    """Rows/s forcing every column through Spark's noop sink (best of ``repeat``)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        best = min(best, time.perf_counter() - t)
    return n / best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 thousand records instead of 2 million")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    n = args.records or (200_000 if args.quick else 2_000_000)
    from engine.spark.session import build_session

    spark = build_session("local[2]", "engine-bench", shuffle_partitions=2)
    spark.dataSource.register(TupleLogSource)
    per_part = str(max(1, n // 2))
    with bench_dir("engine-bench-spark-") as root:
        t = time.perf_counter()
        ds, pq_dir = make_data(root, n)
        print(f"{n:,} records written in {time.perf_counter() - t:.1f}s")
        arrow = spark.read.format("engine-log").option("recordsPerPartition", per_part).load(ds)
        tuples = spark.read.format("bench-log-tuples").option("recordsPerPartition", per_part).load(ds)
        parquet = spark.read.parquet(pq_dir)
        assert arrow.count() == n
        rows = [
            Row("engine-log source (Arrow batches)", scan_rate(arrow, n, args.repeat), "rows/s"),
            Row("Parquet (same data)", scan_rate(parquet, n, args.repeat), "rows/s"),
            Row("tuple-yielding reader", scan_rate(tuples, n, max(1, args.repeat - 1)), "rows/s"),
        ]
    spark.stop()
    report(f"Spark scan of {n:,} 100-byte log records (local[2], noop sink)", rows,
           baseline="Parquet (same data)",
           targets=[("engine-log source (Arrow batches)", "Parquet (same data)", 0.5),
                    ("engine-log source (Arrow batches)", "tuple-yielding reader", 2.0)],
           json_path=RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
