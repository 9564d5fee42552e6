"""engine-queue's id filter pushdown (engine.spark.QueuePushdown): the JVM connector answers
comparisons of ``id`` with an integer and ``id IN (...)`` itself, exactly, skipping the
partitions and the journal files that hold no id in range.

Every answer is held to Spark's own filter over an unfiltered read and to the Python reference
reader's id ranges (``queuesource.pending_puts``); a damaged journal file out of range shows that
the files are skipped (a read opening it fails); the plan shows the filters pushed and no
``Filter`` left to Spark."""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

import pytest
from source_parity import plan

from engine.fs import resolve
from engine.queue.segments import list_segments
from engine.spark import jvmbuild
from engine.spark.queuesource import pending_puts

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
JVM = "engine.spark.QueueSource"


@pytest.fixture(scope="module")
def queues(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Queue ``jobs``: 200 items in five journal files (ids 1-50, 51-99, 100-146, 147-192, 193-200),
    reader ``a`` with 1-5 and odd ids up to 39 confirmed, reader ``b`` with none; queue ``mail``: 7 items."""
    from engine.queue import Queue

    d = str(tmp_path_factory.mktemp("jvmqpush"))
    q = Queue.open(d, "jobs", sync="never", journal_size=2048)
    a = q.reader("a")
    q.reader("b")
    for i in range(200):
        q.put(b"job-%d" % i * (1 + i % 4))
        if i % 10 == 9:
            q.flush()  # writes of ten items, each with its CHECK: damage in a file's last is not in its first
    got = [a.get(timeout=0) for _ in range(40)]
    a.confirm([item.id for item in got[::2] if item is not None])
    a.confirm([item.id for item in got[1:4:2] if item is not None])
    q.checkpoint()
    q.close()
    assert firsts(d) == [1, 51, 100, 147, 193]  # the ranges below are chosen at these files' edges
    m = Queue.open(d, "mail", sync="never")
    m.put_many([b"m%d" % i for i in range(7)])
    m.close()
    return d


def firsts(d: str) -> list[int]:
    """The first ids of queue ``jobs``'s journal files, oldest first."""
    return [s.first_id for s in list_segments(resolve(None), d, "jobs", strict=False) if s.first_id is not None]


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(map(tuple, df.collect()), key=repr)


_WHOLE: dict[tuple[str, str], Any] = {}


def spark_filtered(spark: Any, path: str, where: str, **options: str) -> list[tuple[Any, ...]]:
    """Spark's own filter over an unfiltered read (its rows handed to Spark as a local relation,
    which has nothing to push a filter into)."""
    key = (path, repr(sorted(options.items())))
    if key not in _WHOLE:
        whole = spark.read.format(JVM).options(**options).load(path)
        _WHOLE[key] = spark.createDataFrame(whole.collect(), whole.schema)
    return rows(_WHOLE[key].where(where))


WHERE = [
    "id >= 100",                    # an open upper end, from a file's first id
    "id > 99",
    "id < 51", "id <= 50",          # an open lower end, to a file's last id
    "id > 40 and id <= 150",        # across three files
    "id between 95 and 110",        # across one rotation
    "id = 51", "id = 99", "id = 200", "id = 3", "id = 6",  # one item (3: confirmed by a, 6: pending)
    "id = 9223372036854775807", "id >= 9223372036854775807",
    "id > 200", "id > 5000", "id < 1", "id <= 0", "id < -7", "id > 60 and id < 55",  # nothing
    "150 <= id", "110 > id and id > 100",  # the literal first
    "id in (1, 51, 53, 150, 199, 4000)", "id in (150)", "id in (4000, 5000)",
    "id in (30, 40, 180) and id > 35",
    "id >= 100 and error_count = 0",  # the id part pushed, the rest left to Spark
    "id = 51 or id = 190",            # an OR: left to Spark
    "not (id > 60)",
    "id >= 40 and queue = 'jobs' and reader = 'a'",
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("options", [{}, {"bytesPerPartition": "1500"}, {"minPartitions": "1"}])
def test_same_rows_as_spark_filtering(spark: Any, queues: str, where: str, options: dict[str, str]) -> None:
    got = rows(spark.read.format(JVM).options(**options).load(queues).where(where))
    assert got == spark_filtered(spark, queues, where, **options)
    picked = spark.read.format(JVM).options(**options).load(queues).where(where).select("reader", "id")
    assert rows(picked) == sorted(((r[1], r[2]) for r in got), key=repr)


@pytest.mark.parametrize(("after", "upto"), [
    (0, 1), (0, 50), (50, 51), (40, 150), (99, 146), (146, 192), (192, 200), (150, 1000), (0, 10_000), (200, 300),
])
@pytest.mark.parametrize("reader", ["a", "b"])
def test_parity_with_the_reference_reader(spark: Any, queues: str, after: int, upto: int, reader: str) -> None:
    """The rows of ``id > after and id <= upto`` are the reference reader's ``pending_puts(after, upto)``."""
    df = (spark.read.format(JVM).option("queue", "jobs").option("reader", reader).load(queues)
          .where(f"id > {after} and id <= {upto}").select("id", "data", "error_count"))
    want = [(p.xid, p.data, p.error_count) for p in pending_puts(resolve(None), queues, "jobs", reader, after, upto)]
    assert sorted((r[0], bytes(r[1]), r[2]) for r in df.collect()) == want


def test_pushed_filters_are_trusted(spark: Any, queues: str) -> None:
    df = spark.read.format(JVM).load(queues).where("id >= 60 and id < 70")
    text = plan(df)
    assert re.search(r"pushed filters: \[.*id.*\]", text), text
    assert not re.search(r"\bFilter\b", text), text  # Spark does not filter again
    assert df.count() == 10 * 2  # readers a and b of jobs (mail's ids are 1-7)
    for partial in ("id = 51 or id = 190", "id > 60 and error_count = 0", "expire_time is not null and id > 3"):
        assert re.search(r"\bFilter\b", plan(spark.read.format(JVM).load(queues).where(partial))), partial
    assert "pushed filters" not in plan(spark.read.format(JVM).load(queues).select("id"))


def test_partitions_and_statistics_follow_the_range(spark: Any, queues: str) -> None:
    def scan(where: str) -> Any:
        return spark.read.format(JVM).option("queue", "jobs").option("bytesPerPartition", "1500").load(queues) \
            .where(where)

    def size(df: Any) -> int:
        return int(str(df._jdf.queryExecution().optimizedPlan().collectLeaves().head().stats().sizeInBytes()))

    whole = spark.read.format(JVM).option("queue", "jobs").option("bytesPerPartition", "1500").load(queues)
    files = sorted(os.path.getsize(os.path.join(queues, f)) for f in os.listdir(queues)
                   if f.startswith("jobs.") and f[5:].isdigit())
    assert size(whole) == 2 * sum(files)  # each reader reads the journal
    assert whole.rdd.getNumPartitions() > 4
    one = scan("id = 120")
    assert one.rdd.getNumPartitions() == 2  # one per reader
    assert size(one) == 2 * os.path.getsize(os.path.join(queues, sorted(
        (f for f in os.listdir(queues) if f.startswith("jobs.") and f[5:].isdigit()), key=lambda f: int(f[5:]))[2]))
    assert scan("id > 5000").rdd.getNumPartitions() == 2  # the newest file's ids have no known end
    assert scan("id > 5000 and id < 6000").rdd.getNumPartitions() == 2
    assert scan("id < 0").rdd.getNumPartitions() == 0
    assert scan("id in (7, 8) and id > 9").rdd.getNumPartitions() == 0
    assert scan("id > 5000").count() == 0


def damaged_copy(queues: str, tmp_path: Any, index: int) -> str:
    """A copy of ``queues`` whose journal file ``index`` (0: the oldest) has a byte flipped in its
    last write (its first write, which the plan reads for its first id, is whole)."""
    d = str(tmp_path / "damaged")
    shutil.copytree(queues, d)
    segs = list_segments(resolve(None), d, "jobs", strict=False)
    path = segs[index].path
    at = os.path.getsize(path) - 40
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x40]))
    return d


@pytest.mark.parametrize("where", ["id >= 100", "id < 51", "id = 147", "id in (3, 160, 199)", "id > 500"])
def test_files_out_of_range_are_not_opened(spark: Any, queues: str, tmp_path: Any, where: str) -> None:
    """Damage in file 51-99 fails every read that opens it; a filtered read that cannot need it
    does not open it (and gives the rows of the undamaged queue)."""
    d = damaged_copy(queues, tmp_path, 1)
    with pytest.raises(Exception, match="CorruptFile"):
        spark.read.format(JVM).load(d).collect()
    with pytest.raises(Exception, match="CorruptFile"):
        spark.read.format(JVM).load(d).where("id = 99").collect()  # in the damaged write
    for options in ({}, {"minPartitions": "1"}, {"bytesPerPartition": "1500"}):
        got = rows(spark.read.format(JVM).options(**options).load(d).where(where))
        assert got == spark_filtered(spark, queues, where)


def test_permissive_keeps_the_filters_in_spark(spark: Any, queues: str, tmp_path: Any) -> None:
    """In PERMISSIVE mode Spark checks every filter again (a damaged row's id is null); the
    files out of range are still not opened."""
    d = damaged_copy(queues, tmp_path, 1)
    # One partition per reader: one opening the damaged file would end there, before ids 100 on.
    df = spark.read.format(JVM).option("mode", "PERMISSIVE").option("minPartitions", "1").load(d).where("id >= 100")
    assert re.search(r"\bFilter\b", plan(df))
    got = rows(df)
    assert all(r[-1] is None for r in got)
    assert [r[:-1] for r in got] == spark_filtered(spark, queues, "id >= 100")
    damaged = spark.read.format(JVM).option("mode", "PERMISSIVE").load(d).where("id >= 60 or id is null")
    assert any(r["_corrupt_record"] for r in damaged.collect())


def test_a_stream_leaves_the_filter_to_spark(spark: Any, tmp_path: Any) -> None:
    """Spark pushes no filter into a stream's scan (the connector refuses one it would not apply):
    a filtered stream gets the items in range."""
    from engine.queue import Queue

    d = str(tmp_path / "stream")
    q = Queue.open(d, "jobs", sync="never", journal_size=2048)
    q.reader("spark").close()
    q.put_many([b"s%d" % i for i in range(30)])
    q.close()
    got: list[int] = []

    def each(df: Any, batch_id: int) -> None:
        got.extend(r["id"] for r in df.collect())

    query = (spark.readStream.format(JVM).option("queue", "jobs").option("reader", "spark").load(d)
             .where("id > 20").writeStream.foreachBatch(each)
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(got) == list(range(21, 31))
