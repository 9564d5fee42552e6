"""End to end on a real (local) SparkSession: every source, the sink, streaming, the pipeline.

One session for the whole run (conftest.py).  Data sets are small: these tests
check wiring, schemas, options and the commit protocols, not speed.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.spark import logfiles
from engine.spark.sink import ShardWriter, cleanup, commit_job


def make_log(ds: str, n: int, *, job: str = "1", segment_bytes: int = 2000, t0: int = 10**18) -> None:
    w = ShardWriter(ds, job, "s", segment_bytes=segment_bytes)
    for a in range(0, n, 100):
        b = min(n, a + 100)
        w.write(pa.array([b"rec%d" % i for i in range(a, b)]), t0 + np.arange(a, b, dtype=np.int64) * 10**6)
    commit_job(ds, [w.finish()], overwrite=False)


def test_log_batch_read_filters_and_positions(spark: Any, tmp_path: Any) -> None:
    ds = str(tmp_path / "logs")
    make_log(ds, 1000)
    from pyspark.sql import functions as F

    df = spark.read.format("engine-log").option("recordsPerPartition", 100).load(ds)
    assert df.rdd.getNumPartitions() >= 10
    sub = df.where("index >= 250 AND index < 260")
    assert [r["data"] for r in sub.orderBy("index").collect()] == [b"rec%d" % i for i in range(250, 260)]
    by_time = df.where(df.time >= F.timestamp_micros(F.lit(10**15 + 500_000)))
    assert tuple(by_time.agg(F.count("*"), F.min("index")).first()) == (500, 500)
    # Pruning is chosen by options (part of the DataFrame's definition): Kafka-style positions.
    name = df.select("log").first()["log"]
    ranged = (spark.read.format("engine-log").option("recordsPerPartition", 100).option("minPartitions", 1)
              .option("startingOffsets", json.dumps({name: 250})).option("endingOffsets", json.dumps({name: 260}))
              .load(ds))
    assert ranged.rdd.getNumPartitions() == 1
    assert [r["index"] for r in ranged.collect()] == list(range(250, 260))
    # times are 10**18 + i * 10**6 ns, i.e. 10**12 + i ms
    timed = spark.read.format("engine-log").option("startingTimestamp", 10**12 + 500).load(ds)
    assert tuple(timed.agg(F.count("*"), F.min("index")).first()) == (500, 500)
    assert spark.read.format("engine-log").option("minPartitions", 7).load(ds).rdd.getNumPartitions() >= 7


def test_sink_append_overwrite_and_failed_job(spark: Any, tmp_path: Any) -> None:
    from pyspark.sql import functions as F

    out = str(tmp_path / "out")
    src = spark.range(0, 300, numPartitions=3).select(
        F.format_string("row-%d", "id").cast("binary").alias("data"),
        F.timestamp_micros(F.col("id") * 1000).alias("time"))
    src.write.format("engine-log").mode("append").save(out)
    src.write.format("engine-log").mode("append").save(out)
    back = spark.read.format("engine-log").load(out)
    per_shard = {r["log"]: r["count"] for r in back.groupBy("log").count().collect()}
    assert len(per_shard) == 6 and sum(per_shard.values()) == 600  # one shard per task per job
    src.limit(10).coalesce(1).write.format("engine-log").mode("overwrite").save(out)
    assert spark.read.format("engine-log").load(out).count() == 10
    before = sorted(os.listdir(out))

    @F.udf("binary")
    def boom(x: int) -> bytes:
        if x == 150:
            raise ValueError("task fails on purpose")
        return b"x"

    bad = spark.range(0, 300, numPartitions=3).select(boom("id").alias("data"))
    with pytest.raises(Exception, match="task fails on purpose"):
        bad.write.format("engine-log").mode("append").save(out)
    # The driver's abort removed the job's shards; a task Spark had not stopped yet
    # may still finish after it and leave an unlisted shard, which no reader sees
    # and cleanup() removes.
    assert spark.read.format("engine-log").load(out).count() == 10
    cleanup(out)
    assert sorted(os.listdir(out)) == before
    assert spark.read.format("engine-log").load(out).count() == 10


def test_log_streaming_with_limits_and_restart(spark: Any, tmp_path: Any) -> None:
    ds, out, chk = str(tmp_path / "logs"), str(tmp_path / "sink"), str(tmp_path / "chk")
    make_log(ds, 250)

    def run() -> Any:
        q = (spark.readStream.format("engine-log").option("maxRecordsPerTrigger", 100).load(ds)
             .select("log", "index", "data").writeStream.format("parquet")
             .option("checkpointLocation", chk).trigger(availableNow=True).start(out))
        q.awaitTermination(120)
        return q

    q = run()
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes == [100, 100, 50]
    make_log(ds, 120, job="2")  # a second log appears in the dataset
    run()
    got = spark.read.parquet(out).select("log", "index").collect()
    assert len(got) == 370 and len(set(got)) == 370  # nothing lost, nothing twice
    assert sorted(r["index"] for r in got if r["log"] == "job-2/s") == list(range(120))


def test_log_to_log_streaming_is_exactly_once(spark: Any, tmp_path: Any) -> None:
    ds, out, chk = str(tmp_path / "logs"), str(tmp_path / "copy"), str(tmp_path / "chk")
    make_log(ds, 230)

    def run() -> None:
        q = (spark.readStream.format("engine-log").option("maxRecordsPerTrigger", 100).load(ds)
             .select("data", "time_ns").writeStream.format("engine-log")
             .option("checkpointLocation", chk).trigger(availableNow=True).start(out))
        q.awaitTermination(120)

    run()
    make_log(ds, 40, job="2")
    run()
    copy = spark.read.format("engine-log").load(out).select("data").collect()
    assert sorted(r["data"] for r in copy) == sorted([b"rec%d" % i for i in range(230)] +
                                                      [b"rec%d" % i for i in range(40)])


def _queue(dirpath: str, n: int, readers: tuple[str, ...] = ("billing", "audit")) -> Any:
    from engine.queue import Queue

    q = Queue.open(dirpath, "orders", sync="never")
    rs = [q.reader(r) for r in readers]
    for i in range(n):
        q.put(b"order-%d" % i)
    return q, rs


def test_queue_batch_source(spark: Any, tmp_path: Any) -> None:
    d = str(tmp_path / "q")
    os.makedirs(d)
    q, (billing, _audit) = _queue(d, 40)
    for _ in range(15):
        item = billing.get(timeout=0)
        billing.confirm([item.id])
    q.checkpoint()
    df = spark.read.format("engine-queue").load(d)
    counts = {(r["queue"], r["reader"]): r["count"] for r in df.groupBy("queue", "reader").count().collect()}
    assert counts == {("orders", "billing"): 25, ("orders", "audit"): 40}
    only = df.where("reader = 'billing'")
    assert [r["id"] for r in only.orderBy("id").collect()] == list(range(16, 41))
    chosen = spark.read.format("engine-queue").option("reader", "billing").load(d)
    assert chosen.rdd.getNumPartitions() == 1  # only that reader's items are read
    assert chosen.count() == 25
    q.close()


def test_queue_streaming_is_at_least_once(spark: Any, tmp_path: Any) -> None:
    from engine.fs import resolve
    from engine.queue import Queue
    from engine.spark.queuesource import pending_puts

    d, out, chk = str(tmp_path / "q"), str(tmp_path / "sink"), str(tmp_path / "chk")
    os.makedirs(d)
    q, (mine,) = _queue(d, 0, readers=("spark",))
    q.put_many([b"item-%d" % i for i in range(30)])
    q.sync()
    mine.close()  # the writer keeps writing; the reader now lives in Spark's source process

    def run(expect_rows: int) -> None:
        query = (spark.readStream.format("engine-queue").option("queue", "orders").option("reader", "spark")
                 .option("maxRecordsPerTrigger", 10).load(d).select("id", "data")
                 .writeStream.format("parquet").option("checkpointLocation", chk)
                 .trigger(processingTime="100 milliseconds").start(out))
        query.processAllAvailable()
        query.stop()

    run(30)
    ids = [r["id"] for r in spark.read.parquet(out).collect()]
    assert sorted(ids) == list(range(1, 31))
    # Spark commits a batch's offsets to the source one micro-batch late, so the items
    # of the last batch are still unconfirmed on disk: another consumer would get them
    # again (at-least-once).
    still = [p.xid for p in pending_puts(resolve(None), d, "orders", "spark")]
    assert still and set(still) <= set(ids)
    # A restart with the same checkpoint does not deliver them twice, and picks up new items.
    q.put_many([b"late-%d" % i for i in range(5)])
    q.sync()
    run(35)
    ids = [r["id"] for r in spark.read.parquet(out).collect()]
    assert sorted(ids) == list(range(1, 36))
    q.close()
    assert isinstance(Queue, type)


def _events(d: str) -> None:
    from engine.events import EventJournal

    with EventJournal.open(d, sync="never") as j:
        for k in range(10):
            j.write(f"id-{k}", [(s, b"e%d-%d" % (k, s)) for s in range(1, 21)])
        j.delete_to("id-0", 5)


def test_events_source_filters_and_options(spark: Any, tmp_path: Any) -> None:
    d = str(tmp_path / "ev")
    os.makedirs(d)
    _events(d)
    df = spark.read.format("engine-events").option("idsPerPartition", 3).load(d)
    assert df.rdd.getNumPartitions() == 4
    sub = df.where("persistence_id = 'id-3' AND sequence_nr >= 5 AND sequence_nr <= 7")
    assert [(r["sequence_nr"], r["payload"]) for r in sub.orderBy("sequence_nr").collect()] == [
        (s, b"e3-%d" % s) for s in (5, 6, 7)]
    chosen = (spark.read.format("engine-events").option("persistenceIds", "id-3")
              .option("fromSequenceNr", 5).option("toSequenceNr", 7).load(d))
    assert chosen.rdd.getNumPartitions() == 1
    assert [r["sequence_nr"] for r in chosen.orderBy("sequence_nr").collect()] == [5, 6, 7]


def test_streams_and_pages_sources(spark: Any, tmp_path: Any) -> None:
    from engine.pages import PageStore
    from engine.streams import StreamJournal

    path = str(tmp_path / "s.journal")
    with StreamJournal.open(path, size=1 << 20, create=True) as sj:
        for i in range(5):
            s = sj.open_stream(b"stream-%d" % i)
            s.write(b"x" * (i + 1))
            s.close()
    df = spark.read.format("engine-streams").load(path)
    rows = df.orderBy("stream").collect()
    assert [(r["ident"], r["status"], r["data"]) for r in rows] == [
        (f"stream-{i}", "complete", b"x" * (i + 1)) for i in range(5)]
    pstore = str(tmp_path / "p.db")
    with PageStore.open(pstore, page_size=512, create=True) as ps:
        ids = []
        for i in range(6):
            with ps.transaction() as tx:
                page = tx.allocate()
                tx.write(page, 0, b"page%d" % i)
                ids.append(page)
        with ps.transaction() as tx:
            tx.free(ids[2])
    pages = spark.read.format("engine-pages").load(pstore)
    got = {r["page"]: (r["free"], r["data"][:5]) for r in pages.collect()}
    assert len(got) == 6 and got[ids[0]] == (False, b"page0") and got[ids[2]] == (True, b"")
    assert pages.where("page >= 2 AND page < 4").count() == 2


def test_pipeline_summary(spark: Any, tmp_path: Any) -> None:
    from engine.spark.pipeline import run_pipeline

    root = tmp_path / "data"
    make_log(str(root / "logs" / "clicks"), 120)
    os.makedirs(root / "queues")
    q, (billing, _audit) = _queue(str(root / "queues"), 12)
    billing.confirm([billing.get(timeout=0).id for _ in range(2)] and [])
    q.checkpoint()
    q.close()
    os.makedirs(root / "events" / "acct")
    _events(str(root / "events" / "acct"))
    os.makedirs(root / "logs" / "broken")  # a foreign file named like a segment
    (root / "logs" / "broken" / "00000000000000000000.log").write_bytes(b"NOT A LOG FILE AT ALL")
    summary = run_pipeline(spark, str(root), str(tmp_path / "out"))
    assert len(summary.errors) == 1 and summary.errors[0].startswith("logs/broken: ")
    assert "signature" in summary.errors[0]
    logs = summary.of_kind("log")
    assert [(r["name"], r["records"]) for r in logs] == [("logs/clicks", 120)]
    assert logs[0]["span_seconds"] == pytest.approx(0.119)
    queues = {r["detail"]: r["backlog"] for r in summary.of_kind("queue")}
    assert queues == {"audit": 12, "billing": 12}
    ev = summary.of_kind("events")[0]
    assert (ev["ids"], ev["events"]) == (10, 195)
    table = pq.read_table(summary.parquet)
    assert table.num_rows == len(summary.rows) == 4
    assert os.path.getsize(summary.chart) > 1000
    assert logfiles.MANIFEST in os.listdir(root / "logs" / "clicks")
