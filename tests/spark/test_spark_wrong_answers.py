"""The four wrong answers of the issue "Spark pipeline: never a wrong answer", on a real session.

1. A DataFrame reused after a filtered query must still answer the unfiltered one
   (PySpark caches a pushed-down plan on the DataFrame's relation: the sources
   push nothing down).
2. Sources check what their stores check (checksums); ``mode`` follows Spark.
3. Parent directories, globs and lists of paths are read like Spark's file sources.
4. The sink refuses a plain append-log directory instead of hiding its records.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pytest

from engine.errors import ConfigError


def _make_log(path: str, n: int, t0: int = 10**18) -> None:
    from engine.applog import AppendLog

    with AppendLog.open(path, sync="never") as log:
        for i in range(n):
            log.append(b"rec%d" % i, time_ns=t0 + i * 10**6)


def _error_text(exc: BaseException) -> str:
    return str(exc)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: Any) -> dict[str, str]:
    """One small store of every kind."""
    from engine.events import EventJournal
    from engine.pages import PageStore
    from engine.queue import Queue
    from engine.streams import StreamJournal

    root = tmp_path_factory.mktemp("stores")
    logs = str(root / "logs")
    _make_log(logs + "/clicks", 300)
    _make_log(logs + "/views", 200)
    q = str(root / "q")
    os.makedirs(q)
    queue = Queue.open(q, "orders", sync="never")
    queue.reader("billing")
    queue.reader("audit")
    queue.put_many([b"o%d" % i for i in range(30)])
    queue.checkpoint()
    queue.close()
    ev = str(root / "ev")
    os.makedirs(ev)
    with EventJournal.open(ev, sync="never") as j:
        for k in range(6):
            j.write(f"id-{k}", [(s, b"e%d" % s) for s in range(1, 11)])
    journal = str(root / "s.journal")
    with StreamJournal.open(journal, size=1 << 20, create=True) as sj:
        for i in range(6):
            s = sj.open_stream(b"s%d" % i)
            s.write(b"x" * (i + 1))
            if i % 3 == 2:
                s.abort()
            else:
                s.close()
    pages = str(root / "p.db")
    with PageStore.open(pages, page_size=512, create=True) as ps:
        ids = []
        for i in range(8):
            with ps.transaction() as tx:
                page = tx.allocate()
                tx.write(page, 0, b"page%d" % i)
                ids.append(page)
        with ps.transaction() as tx:
            tx.free(ids[3])
    return {"logs": logs, "log": logs + "/clicks", "queue": q, "events": ev, "streams": journal, "pages": pages}


_T = dt.datetime(2001, 9, 9, 1, 46, 40, 100_000)  # 10**18 ns + 100 ms: record 100 of a log
#: (source, store, filters on every column the sources used to push down)
_REUSE = [
    ("engine-log", "log", ["index = 142", "index >= 250", "time_ns < 1000000000005000000",
                           f"time >= timestamp'{_T:%Y-%m-%d %H:%M:%S.%f}'", "log = 'nope'"]),
    ("engine-log", "logs", ["log = 'clicks'", "index < 10"]),
    ("engine-queue", "queue", ["reader = 'billing'", "queue = 'other'"]),
    ("engine-events", "events", ["persistence_id = 'id-3'", "sequence_nr >= 5 AND sequence_nr <= 7"]),
    ("engine-streams", "streams", ["status = 'aborted'", "journal = 'other'"]),
    ("engine-pages", "pages", ["page >= 2 AND page < 4", "free = true"]),
]


@pytest.mark.parametrize(("source", "store", "filters"), _REUSE, ids=[f"{s}-{k}" for s, k, _f in _REUSE])
def test_a_reused_dataframe_answers_every_query(spark: Any, stores: dict[str, str], source: str, store: str,
                                                filters: list[str]) -> None:
    df = spark.read.format(source).load(stores[store])
    total = df.count()
    everything = sorted(map(tuple, df.collect()))
    assert total > 0
    for f in filters:
        expected = sum(1 for _ in spark.read.format(source).load(stores[store]).where(f).collect())
        assert len(df.where(f).collect()) == expected
        assert df.count() == total, f"after where({f!r})"
    assert sorted(map(tuple, df.collect())) == everything


def test_reads_work_with_python_filter_pushdown_off(spark: Any, stores: dict[str, str]) -> None:
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        for source, store in (("engine-log", "log"), ("engine-queue", "queue"), ("engine-events", "events"),
                              ("engine-streams", "streams"), ("engine-pages", "pages")):
            assert spark.read.format(source).load(stores[store]).count() > 0
        assert spark.read.format("engine-log").load(stores["log"]).where("index < 5").count() == 5
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def _flip_payload_bit(log_dir: str, needle: bytes) -> str:
    seg = sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))[0]
    path = os.path.join(log_dir, seg)
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    raw[raw.index(needle) + 1] ^= 0x01  # b"rec142" -> b"sec142": same size, same time
    with open(path, "wb") as f:
        f.write(raw)
    return path


def test_a_flipped_bit_is_never_a_row(spark: Any, tmp_path: Any) -> None:
    from pyspark.sql import functions as F

    from engine.spark.pipeline import run_pipeline

    root = tmp_path / "data"
    log_dir = str(root / "clicks")
    _make_log(log_dir, 300)
    damaged = _flip_payload_bit(log_dir, b"rec142")
    df = spark.read.format("engine-log").load(log_dir)
    with pytest.raises(Exception) as err:  # FAILFAST, the default
        df.collect()
    assert damaged in _error_text(err.value) and "checksum" in _error_text(err.value)
    dropped = spark.read.format("engine-log").option("mode", "DROPMALFORMED").load(log_dir)
    assert dropped.count() == 299
    assert dropped.where("index = 142").count() == 0
    kept = spark.read.format("engine-log").option("mode", "PERMISSIVE").load(log_dir)
    assert "_corrupt_record" in kept.columns
    bad = kept.where(F.col("_corrupt_record").isNotNull()).collect()
    assert [r["index"] for r in bad] == [142] and damaged in bad[0]["_corrupt_record"]
    assert kept.count() == 300
    summary = run_pipeline(spark, str(root), str(tmp_path / "out"), chart=False)
    assert summary.errors and "checksum" in summary.errors[0]
    assert not summary.of_kind("log")


def test_a_cut_newest_index_reads_every_record(spark: Any, tmp_path: Any) -> None:
    """The newest segment's .idx cut to its header, no writer live: the query reads
    every record the writer shows (through the index the store's reader rebuilds in
    memory), not the log without that segment."""
    from engine.applog import AppendLog
    from engine.applog.codec import segment_name

    log_dir = str(tmp_path / "clicks")
    with AppendLog.open(log_dir, segment_bytes=512, sync="never") as log:
        for i in range(60):
            log.append(b"rec%d" % i, time_ns=10**18 + i * 10**6)
        newest = log.segments()[-1].first_index
    os.truncate(os.path.join(log_dir, segment_name(newest, ".idx")), 16)
    rows = spark.read.format("engine-log").load(log_dir).orderBy("index").collect()
    assert 0 < newest < 59 and [r["data"] for r in rows] == [b"rec%d" % i for i in range(60)]


def test_damage_in_other_stores_follows_the_mode(spark: Any, tmp_path: Any) -> None:
    from engine.pages import PageStore

    path = str(tmp_path / "p.db")
    with PageStore.open(path, page_size=512, create=True) as ps:
        for i in range(4):
            with ps.transaction() as tx:
                tx.write(tx.allocate(), 0, b"PAGEDATA%d" % i * 10)
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    raw[raw.index(b"PAGEDATA2")] ^= 0x10
    with open(path, "wb") as f:
        f.write(raw)
    with pytest.raises(Exception, match="checksum"):
        spark.read.format("engine-pages").load(path).count()
    kept = spark.read.format("engine-pages").option("mode", "PERMISSIVE").load(path)
    notes = [r["_corrupt_record"] for r in kept.collect() if r["_corrupt_record"]]
    assert len(notes) == 1 and path in notes[0]


def test_parent_directories_globs_and_lists(spark: Any, stores: dict[str, str]) -> None:
    logs = stores["logs"]

    def per_log(df: Any) -> dict[str, int]:
        return {r["log"]: r["count"] for r in df.groupBy("log").count().collect()}

    assert per_log(spark.read.format("engine-log").load(logs)) == {"clicks": 300, "views": 200}
    assert per_log(spark.read.format("engine-log").load(logs + "/*")) == {"clicks": 300, "views": 200}
    assert per_log(spark.read.format("engine-log").load(logs + "/c*")) == {"clicks": 300}
    both = spark.read.format("engine-log").load([logs + "/clicks", logs + "/views"])
    assert per_log(both) == {"clicks": 300, "views": 200}
    with pytest.raises(Exception, match="no path matches"):
        spark.read.format("engine-log").load(logs + "/zz*")


def test_the_sink_refuses_a_plain_append_log(spark: Any, tmp_path: Any) -> None:
    from engine.applog import LogReader

    log_dir = str(tmp_path / "plain")
    _make_log(log_dir, 50)
    src = spark.range(10).selectExpr("cast(cast(id as string) as binary) as data")
    with pytest.raises(Exception, match="plain append log"):
        src.write.format("engine-log").mode("append").save(log_dir)
    assert spark.read.format("engine-log").load(log_dir).count() == 50
    with LogReader.open(log_dir) as r:
        assert r.next_index - r.first_index == 50


def test_unknown_and_bad_options_fail_when_the_dataframe_is_defined(spark: Any, stores: dict[str, str]) -> None:
    with pytest.raises(Exception, match=r"unknown option\(s\) recordperpartition; valid options: .*"
                                        r"recordsPerPartition"):
        spark.read.format("engine-log").option("recordPerPartition", 5).load(stores["log"])
    # engine-log and engine-queue are the JVM connector: its ConfigException has the Python message (no type prefix).
    with pytest.raises(Exception, match="option maxRecordsPerTrigger='x' is not an integer"):
        spark.readStream.format("engine-log").option("maxRecordsPerTrigger", "x").load(stores["log"])
    with pytest.raises(Exception, match=r"option mode='LENIENT': use one of FAILFAST"):
        spark.read.format("engine-queue").option("mode", "LENIENT").load(stores["queue"])


def test_sink_target_check_without_spark(tmp_path: Any) -> None:
    from engine.fs import resolve
    from engine.spark.sink import check_target

    fs = resolve(None)
    check_target(fs, str(tmp_path / "new"))
    os.makedirs(tmp_path / "other")
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match="not an engine-log sink dataset"):
        check_target(fs, str(tmp_path / "other"))
