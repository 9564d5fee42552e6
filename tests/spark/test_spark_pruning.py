"""Column pruning through ``spark.read.schema(...)`` on a real session.

PySpark 4.3 has no ``pruneColumns`` for Python sources (Spark asks the reader
for every column of the schema); a schema the user gives is what the reader
gets, so that is how a read asks for fewer columns.  Checked here: the pruned
reads answer what the default schema answers, with every ``mode``, positions,
a reused DataFrame and streaming; a wrong schema is a clear error.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

T0 = 10**18
IDX = "index long, time timestamp"


def _make_log(path: str, n: int) -> None:
    from engine.applog import AppendLog

    with AppendLog.open(path, sync="never", segment_bytes=8192) as log:
        for i in range(n):
            log.append(b"rec%d" % i, flags=i % 3, time_ns=T0 + i * 10**6)


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: Any) -> str:
    path = str(tmp_path_factory.mktemp("pruning") / "clicks")
    _make_log(path, 300)
    return path


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(map(tuple, df.collect()))


# Every allowed kind of pruned schema: IDX columns only (the LOG is not read),
# LOG columns without the payload, with it; and the same in PERMISSIVE mode.
SCHEMAS = [IDX, "time_ns long, log string, segment long", "flags long, index long", "data binary, time timestamp"]


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("mode", ["FAILFAST", "DROPMALFORMED", "PERMISSIVE"])
def test_pruned_reads_answer_like_the_default_schema(spark: Any, log_dir: str, schema: str, mode: str) -> None:
    if mode == "PERMISSIVE":
        schema += ", _corrupt_record string"
    pruned = spark.read.format("engine-log").option("mode", mode).schema(schema).load(log_dir)
    full = spark.read.format("engine-log").option("mode", mode).load(log_dir)
    names = pruned.columns
    assert pruned.count() == 300
    assert _rows(pruned) == _rows(full.select(*names))
    # A DataFrame reused after filtered queries still answers the unfiltered one.
    for f in ("index = 142", "index >= 250", f"time_ns < {T0 + 5 * 10**6}", "log = 'nope'", "flags = 1"):
        cols = [c for c in ("index", "time_ns", "log", "flags") if c in f]
        if not set(cols) <= set(names):
            continue
        assert pruned.where(f).count() == full.where(f).count()
        assert pruned.count() == 300, f"after where({f!r})"


@pytest.mark.parametrize("schema", [IDX, "flags long, index long"])
@pytest.mark.parametrize("mode", ["FAILFAST", "DROPMALFORMED", "PERMISSIVE"])
def test_pruned_reads_with_positions(spark: Any, log_dir: str, schema: str, mode: str) -> None:
    if mode == "PERMISSIVE":
        schema += ", _corrupt_record string"

    def read(**opts: str) -> list[int]:
        reader = spark.read.format("engine-log").option("mode", mode).schema(schema)
        for k, v in opts.items():
            reader = reader.option(k, v)
        return sorted(r["index"] for r in reader.load(log_dir).collect())

    assert read(startingOffsets='{"clicks": 40}', endingOffsets='{"clicks": 77}') == list(range(40, 77))
    assert read(startingTimestamp=str((T0 + 200 * 10**6) // 10**6)) == list(range(200, 300))
    ten = (T0 + 10 * 10**6) // 10**6
    assert read(endingOffsetsByTimestamp=f'{{"clicks": {ten}}}') == list(range(10))
    assert read(minPartitions="7") == list(range(300))


def test_a_damaged_record_with_pruned_schemas(spark: Any, tmp_path: Any) -> None:
    log_dir = str(tmp_path / "clicks")
    _make_log(log_dir, 300)
    seg = sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))[0]
    path = os.path.join(log_dir, seg)
    with open(path, "r+b") as f:
        raw = f.read()
        f.seek(raw.index(b"rec42") + 1)
        f.write(b"f")  # same size, same time: only the checksum sees it
    read = spark.read.format("engine-log")
    # Reading the records checks them (count() alone is answered from the IDX entries:
    # docs/pipeline.md, "engine-log on the JVM").
    with pytest.raises(Exception, match="checksum"):
        read.schema("index long, data binary").load(log_dir).collect()
    with pytest.raises(Exception, match="checksum"):
        read.schema("flags long").load(log_dir).collect()
    dropped = read.option("mode", "DROPMALFORMED").schema("index long, flags long").load(log_dir)
    assert dropped.count() == 299 and dropped.where("index = 42").count() == 0
    kept = spark.read.format("engine-log").option("mode", "PERMISSIVE").schema(
        "index long, flags long, _corrupt_record string").load(log_dir)
    bad = kept.where("_corrupt_record is not null").collect()
    assert [r["index"] for r in bad] == [42] and path in bad[0]["_corrupt_record"]
    # The IDX columns are answered without reading the LOG (docs/pipeline.md): the
    # record's index and time come from its index entry, which is intact.
    assert spark.read.format("engine-log").schema(IDX).load(log_dir).count() == 300


def test_a_wrong_schema_fails_the_query_listing_the_columns(spark: Any, log_dir: str, tmp_path: Any) -> None:
    df = spark.read.format("engine-log").schema("index long, nope string").load(log_dir)
    with pytest.raises(Exception, match=r"no column 'nope'") as err:
        df.count()
    assert "index bigint NOT NULL, time timestamp NOT NULL" in str(err.value)
    with pytest.raises(Exception, match=r"'index' is int, not bigint"):
        spark.read.format("engine-log").schema("index int").load(log_dir).collect()
    with pytest.raises(Exception, match="mode PERMISSIVE needs the _corrupt_record column"):
        spark.read.format("engine-log").option("mode", "PERMISSIVE").schema(IDX).load(log_dir).count()
    with pytest.raises(Exception, match=r"unknown option\(s\) recordperpartition"):
        spark.read.format("engine-log").option("recordPerPartition", 5).schema(IDX).load(log_dir).count()


def test_pruned_streaming_reads(spark: Any, log_dir: str, tmp_path: Any) -> None:
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    q = (spark.readStream.format("engine-log").schema(IDX).option("maxRecordsPerTrigger", 120).load(log_dir)
         .writeStream.format("parquet").option("checkpointLocation", chk).trigger(availableNow=True).start(out))
    q.awaitTermination(120)
    got = spark.read.parquet(out)
    assert got.columns == ["index", "time"]
    assert sorted(r["index"] for r in got.collect()) == list(range(300))


def test_other_sources_prune(spark: Any, tmp_path: Any) -> None:
    from engine.events import EventJournal
    from engine.queue import Queue

    q = str(tmp_path / "q")
    os.makedirs(q)
    queue = Queue.open(q, "orders", sync="never", journal_size=2048)
    queue.reader("billing")
    queue.put_many([b"o%d" % i * 20 for i in range(200)])
    queue.checkpoint()
    queue.close()
    ev = str(tmp_path / "ev")
    os.makedirs(ev)
    with EventJournal.open(ev, sync="never") as j:
        for k in range(4):
            j.write(f"id-{k}", [(s, b"e%d" % s) for s in range(1, 8)])
    for source, path, schema in (("engine-queue", q, "data binary, id long"),
                                 ("engine-events", ev, "sequence_nr long, persistence_id string")):
        pruned = spark.read.format(source).schema(schema).load(path)
        full = spark.read.format(source).load(path)
        assert _rows(pruned) == _rows(full.select(*pruned.columns))
    split = spark.read.format("engine-queue").option("bytesPerPartition", 1000).load(q)
    assert split.rdd.getNumPartitions() > 2
    assert sorted(r["id"] for r in split.collect()) == list(range(1, 201))
