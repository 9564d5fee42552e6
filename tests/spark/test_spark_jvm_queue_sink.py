"""The engine-queue sink: the JVM's staged files against the Python encoder (byte for byte),
the commit's protocol (rows in order, resumable after a crash, nothing of an aborted or
killed job in the queue), Spark writes through ``engine.spark.QueueSource``, and the
refusals (one line, no file created).

Skipped where the connector cannot be built (no JDK).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.errors import ConfigError, CorruptFileError
from engine.fs import set_crashpoint_hook
from engine.queue import Queue
from engine.spark import jvmbuild
from engine.spark import queuesink as qs

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
FORMAT = "engine.spark.QueueSource"  # the short name engine-queue once QueueSource takes it
EXPIRY = 1_900_000_000_000
Rows = list[tuple[bytes, int | None]]


def java_stage(path: str, rows: Rows, add_time_ms: int) -> None:
    cp = os.pathsep.join([jvmbuild.connector_jar(), *jvmbuild.spark_jars()])
    java = jvmbuild._tool("java") or "java"
    lines = "".join(f"{'-' if e is None else e} {d.hex()}\n" for d, e in rows)
    done = subprocess.run([java, "-XX:TieredStopAtLevel=1", "-cp", cp, "engine.spark.QueueStage", path,
                           str(add_time_ms)], input=lines, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(len(rows))


def cases() -> Iterator[tuple[str, Rows]]:
    yield "empty", []
    yield "one", [(b"x", None)]
    yield "expiry", [(bytes([i % 256]) * (i % 50), None if i % 3 else EXPIRY + i) for i in range(300)]
    yield "rows-runs", [(b"r%d" % i, None) for i in range(2 * qs.RUN_ROWS + 5)]
    yield "byte-runs", [(bytes([i]) * (300_000 + i), EXPIRY if i % 2 else None) for i in range(9)]
    yield "empty-items", [(b"", None), (b"", 0), (b"\x00" * 7, -5)]


@pytest.mark.parametrize("name,rows", list(cases()), ids=[c[0] for c in cases()])
def test_the_jvm_stages_the_python_encoders_bytes(tmp_path: Path, name: str, rows: Rows) -> None:
    path = str(tmp_path / "part")
    java_stage(path, rows, 1_700_000_000_123)
    with open(path, "rb") as f:
        staged = f.read()
    assert staged == qs.encode_stage(rows, 1_700_000_000_123)
    from engine.fs import resolve

    assert [r for run in qs.read_runs(resolve(None), path) for r in run] == rows


def stage(directory: str, queue: str, job: str, parts: list[Rows]) -> list[str]:
    """A job's staged parts, as its tasks would leave them (Python's encoder)."""
    job_dir = os.path.join(qs.staging_dir(directory, queue), "job-" + job)
    os.makedirs(job_dir)
    names = []
    for i, rows in enumerate(parts):
        names.append(f"part-{i:05d}-0")
        with open(os.path.join(job_dir, names[-1]), "wb") as f:
            f.write(qs.encode_stage(rows, 1))
    return names


def items(directory: str, queue: str, reader: str = "check") -> Rows:
    with Queue.open(directory, queue) as q:
        r = q.reader(reader)
        out = []
        while (it := r.get(timeout=0)) is not None:
            out.append((it.data, it.expire_time_ms))
    return out


def rows_of(n: int, start: int = 0) -> Rows:
    return [(b"row-%d" % i, EXPIRY + i if i % 4 == 0 else None) for i in range(start, start + n)]


def test_a_commit_puts_the_parts_in_order_and_removes_them(tmp_path: Path) -> None:
    d = str(tmp_path)
    parts = [rows_of(1500), rows_of(10, 1500), rows_of(0), rows_of(700, 1510)]
    names = stage(d, "q", "j1", parts)
    os.makedirs(f"{qs.staging_dir(d, 'q')}/job-j1/part-00001-1")  # a failed attempt's leftover: not listed
    assert qs.commit_job(d, "q", "j1", names) == 2210
    assert items(d, "q") == rows_of(2210)
    assert os.listdir(qs.staging_dir(d, "q")) == ["_LOCK"]


def test_a_commit_is_one_more_producer_of_a_queue_in_use(tmp_path: Path) -> None:
    d = str(tmp_path)
    names = stage(d, "q", "j1", [rows_of(2100)])
    with Queue.open(d, "q") as q:  # another producer, open throughout (the commit joins it)
        q.put(b"before")
        assert qs.commit_job(d, "q", "j1", names) == 2100
        q.put(b"after")
    assert items(d, "q") == [(b"before", None), *rows_of(2100), (b"after", None)]


def test_a_damaged_part_fails_the_commit_before_anything_is_put(tmp_path: Path) -> None:
    d = str(tmp_path)
    names = stage(d, "q", "j1", [rows_of(10), rows_of(3000, 10)])
    path = f"{qs.staging_dir(d, 'q')}/job-j1/{names[1]}"
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 20)
        f.write(b"\xff")
    with pytest.raises(CorruptFileError, match="part-00001-0 at offset"):
        qs.commit_job(d, "q", "j1", names)
    assert items(d, "q") == []
    assert not os.path.exists(f"{qs.staging_dir(d, 'q')}/job-j1/{qs.MARKER}")
    assert qs.cleanup(qs.staging_dir(d, "q")) == ["removed job-j1"]


@pytest.mark.parametrize("chunk", [33, 4096, 4 << 20])
def test_read_runs_reads_by_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    from engine.fs import resolve

    big = 1_200_000 if chunk > 33 else 1000  # (33-byte reads of a MiB would copy it a hundred thousand times)
    rows = [*rows_of(2100), (b"y" * big, None), (b"", 5)]
    path = tmp_path / "part"
    path.write_bytes(qs.encode_stage(rows, 1))
    monkeypatch.setattr(qs, "READ_CHUNK", chunk)
    runs = list(qs.read_runs(resolve(None), str(path)))
    assert [len(r) for r in runs] == ([1024, 1024, 53, 1] if big > qs.RUN_BYTES else [1024, 1024, 54])
    assert [x for r in runs for x in r] == rows


def _damaged(good: bytes) -> Iterator[tuple[str, bytes, str]]:
    yield "magic", b"\x27\x64\x26\x04" + good[4:], "at offset 0: expected a staged file"
    yield "torn", good[:-20], "expected a whole record, found the end of the file"
    yield "no-check", good[:-9], "expected a CHECK after the last run"
    yield "crc", good[:-9] + b"\x22" + bytes(8), "expected a PUT record, or the CHECK of the run before it"
    yield "marker", good + b"\x00", "found the end marker"
    yield "hostile", good[:13] + b"\x86\xff\xff\xff\x7f" + bytes(4) + b"\x01" + bytes(40), \
        "offset 13: expected a whole record, found the end of the file"
    yield "id-0", good[:13] + b"\x86" + bytes(40), "offset 13: expected a positive item id"


@pytest.mark.parametrize("case", ["magic", "torn", "no-check", "crc", "marker", "hostile", "id-0"])
def test_read_runs_refuses_damaged_files(tmp_path: Path, case: str) -> None:
    from engine.fs import resolve

    good = qs.encode_stage(rows_of(1030), 1)
    data, words = {n: (d, w) for n, d, w in _damaged(good)}[case]
    path = tmp_path / "part"
    path.write_bytes(data)
    with pytest.raises(CorruptFileError, match=words):
        for _ in qs.read_runs(resolve(None), str(path)):
            pass


def test_a_queue_that_cannot_be_opened_leaves_the_job_uncommitted(tmp_path: Path) -> None:
    d = str(tmp_path)
    names = stage(d, "q", "j1", [rows_of(3)])
    (tmp_path / "q.1").write_bytes(b"not a journal")
    with pytest.raises(CorruptFileError, match="writer journal magic"):
        qs.commit_job(d, "q", "j1", names)
    assert qs.abort_job(d, "q", "j1")  # no marker: the abort removes it


def test_a_failure_after_the_marker_says_the_job_stays_committed(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.errors import EngineError

    d = str(tmp_path)
    names = stage(d, "q", "j1", [rows_of(1500)])
    calls = []

    def failing(self: Queue, batch: Any) -> list[int]:
        calls.append(len(batch))
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        return original(self, batch)

    original = Queue.put_many
    monkeypatch.setattr(Queue, "put_many", failing)
    with pytest.raises(EngineError, match=r"Input/output error; job-j1 is committed .*engine spark cleanup"):
        qs.commit_job(d, "q", "j1", names)
    monkeypatch.setattr(Queue, "put_many", original)
    assert not qs.abort_job(d, "q", "j1")  # kept: its commit has begun
    assert qs.cleanup(qs.staging_dir(d, "q")) == ["put job-j1"]
    assert items(d, "q") == rows_of(1500)


def _sim_stage(sim: Any, job: str, rows: Rows) -> str:
    from engine.fs import OpenMode, make_dirs

    job_dir = f"/db/q.sink/job-{job}"
    make_dirs(sim, job_dir)
    h = sim.open(f"{job_dir}/part-00000-0", OpenMode.CREATE)
    h.write_at(0, qs.encode_stage(rows, 1))
    h.fsync()
    h.close()
    sim.fsync_dir(job_dir)
    return "part-00000-0"


def _accepted(runs: list[Rows], got: Rows) -> bool:
    """Whether ``got`` is the job's rows, in order, with at most a prefix of one run
    put twice (a crash between a run's put and its record in the marker; the put
    itself may be torn, whole records kept)."""
    whole = [r for run in runs for r in run]
    for i, run in enumerate(runs):
        before = [r for x in runs[:i] for r in x]
        for k in range(len(run) + 1):
            if got == before + run[:k] + [r for x in runs[i:] for r in x]:
                return True
    return got == whole


def test_every_crash_state_of_a_commit_settles_to_the_job_or_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.fs import make_dirs
    from stress.simfs import SimFS

    monkeypatch.setattr(qs, "RUN_ROWS", 4)
    sim = SimFS()
    make_dirs(sim, "/db")
    j1, j2 = rows_of(10), rows_of(5, 100)
    qs.commit_job("/db", "q", "1", [_sim_stage(sim, "1", j1)], fs=sim)
    sim.mark(1)
    qs.commit_job("/db", "q", "2", [_sim_stage(sim, "2", j2)], fs=sim)
    sim.mark(2)
    runs1, runs2 = [j1[:4], j1[4:8], j1[8:]], [j2[:4], j2[4:]]
    seen = 0
    for state in sim.crash_states(limit=300, seed=1):
        fs2 = state.fs()
        if fs2.isdir("/db/q.sink"):
            qs.cleanup("/db/q.sink", fs=fs2)
        with Queue.open("/db", "q", fs=fs2) as q:
            r = q.reader("check")
            got = []
            while (it := r.get(timeout=0)) is not None:
                got.append((it.data, it.expire_time_ms))
        cut = next((i for i in range(len(got) + 1) if _accepted(runs1, got[:i]) and
                    (_accepted(runs2, got[i:]) or not got[i:])), None)
        acked = len(state.marks)
        assert cut is not None or (not got and acked == 0), state.describe()
        assert acked < 1 or (cut is not None and cut > 0), state.describe()
        assert acked < 2 or (cut is not None and got[cut:]), state.describe()
        assert not fs2.isdir("/db/q.sink") or fs2.listdir("/db/q.sink") in (["_LOCK"], []), state.describe()
        seen += 1
    assert seen > 50


class Crash(Exception):
    pass


def crash_at(point: str, nth: int = 1) -> Any:
    seen = [0]

    def hook(name: str) -> None:
        if name == point:
            seen[0] += 1
            if seen[0] == nth:
                raise Crash(name)
    return hook


@pytest.mark.parametrize("point,nth,first", [
    ("spark.queuesink.before-marker", 1, []),                    # nothing put: the job is not committed
    ("spark.queuesink.before-marker-update", 2, rows_of(2048)),  # two runs put, the second not recorded
    ("spark.queuesink.before-job-removal", 1, rows_of(2500)),    # all put, marker gone
])
def test_a_commit_a_crash_interrupts_is_finished_by_cleanup_or_the_next_commit(
        tmp_path: Path, point: str, nth: int, first: Rows) -> None:
    d = str(tmp_path)
    names = stage(d, "q", "j1", [rows_of(2500)])
    previous = set_crashpoint_hook(crash_at(point, nth))
    try:
        with pytest.raises(Crash):
            qs.commit_job(d, "q", "j1", names)
    finally:
        set_crashpoint_hook(previous)
    assert items(d, "q") == first  # what consumers can see meanwhile
    later = stage(d, "q", "j2", [rows_of(5, 9000)])
    qs.commit_job(d, "q", "j2", later)
    got = items(d, "q")
    if point == "spark.queuesink.before-marker":
        assert got == rows_of(5, 9000)  # the uncommitted job stays staged, never put
        assert qs.cleanup(qs.staging_dir(d, "q")) == ["removed job-j1"]
    elif point == "spark.queuesink.before-marker-update":
        # The unrecorded run is put again: the one duplicate a crash during a commit can make.
        whole = rows_of(2500)
        assert got == whole[:2048] + whole[1024:] + rows_of(5, 9000)
    else:
        assert got == rows_of(2500) + rows_of(5, 9000)
        assert qs.cleanup(qs.staging_dir(d, "q")) == ["removed job-j1"]  # put, its litter left
    assert sorted(os.listdir(qs.staging_dir(d, "q"))) == ["_LOCK"]


def test_a_micro_batch_is_put_once(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert qs.commit_job(d, "q", "s-e0", stage(d, "q", "s-e0", [rows_of(3)]), stream="s", epoch=0) == 3
    assert qs.commit_job(d, "q", "t-e0", stage(d, "q", "t-e0", [rows_of(3)]), stream="s", epoch=0) == 0  # a re-run
    assert qs.commit_job(d, "q", "t-e1", stage(d, "q", "t-e1", [rows_of(2, 3)]), stream="s", epoch=1) == 2
    assert items(d, "q") == rows_of(5)


def test_abort_removes_an_uncommitted_job_only(tmp_path: Path) -> None:
    d = str(tmp_path)
    stage(d, "q", "j1", [rows_of(3)])
    assert qs.abort_job(d, "q", "j1") and os.listdir(qs.staging_dir(d, "q")) == ["_LOCK"]
    with pytest.raises(ConfigError, match="collide with queue 'a'"):
        qs.commit_job(d, "a.read.x", "j", [])


def test_engine_spark_cleanup_settles_a_staging_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    d = str(tmp_path)
    names = stage(d, "q", "j1", [rows_of(1500)])
    previous = set_crashpoint_hook(crash_at("spark.queuesink.before-marker-update"))
    try:
        with pytest.raises(Crash):
            qs.commit_job(d, "q", "j1", names)
    finally:
        set_crashpoint_hook(previous)
    stage(d, "q", "j2", [rows_of(3)])  # never committed
    assert main(["spark", "cleanup", qs.staging_dir(d, "q")]) == 0
    assert "2 staged job directories: put job-j1, removed job-j2" in " ".join(capsys.readouterr().out.split())
    whole = rows_of(1500)
    assert items(d, "q") == whole[:1024] + whole  # the run put before the crash, again
    assert main(["spark", "cleanup", "--json", qs.staging_dir(d, "q")]) == 0
    assert '"settled": []' in capsys.readouterr().out


# -- Spark -------------------------------------------------------------------------


def test_spark_writes_rows_in_order_and_reads_them_back(spark: Any, tmp_path: Path) -> None:
    d = str(tmp_path / "queues")
    df = spark.range(0, 3000, numPartitions=3).selectExpr(
        "cast(concat('row-', id) as binary) as data",
        f"case when id % 4 = 0 then timestamp_millis({EXPIRY} + id) end as expire_time")
    df.write.format(FORMAT).option("queue", "jobs").mode("append").save(d)
    assert items(d, "jobs") == rows_of(3000)
    # A read written back (the source's other columns are ignored): appended after.
    back = spark.read.format(FORMAT).option("queue", "jobs").option("reader", "check").load(d)
    back.selectExpr("cast(data as string) as data", "queue", "id").write.format(FORMAT).option("queue", "copy") \
        .mode("append").save(d)
    assert [x for x, _ in items(d, "copy")] == [x for x, _ in rows_of(3000)]
    assert os.listdir(qs.staging_dir(d, "jobs")) == ["_LOCK"]


def test_a_failed_job_leaves_nothing(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    d = str(tmp_path)

    @F.udf("binary")
    def boom(i: int) -> bytes:
        if i == 1500:
            raise ValueError("boom")
        return b"x"

    with pytest.raises(Exception, match="boom"):
        spark.range(0, 2000, numPartitions=2).select(boom("id").alias("data")).write.format(FORMAT) \
            .option("queue", "q").mode("append").save(d)
    assert items(d, "q") == []
    assert os.listdir(qs.staging_dir(d, "q")) == ["_LOCK"]


@pytest.mark.parametrize("build,words", [
    (lambda w: w.option("queue", "q").option("queueName", "x"), r"unknown option\(s\) queuename; valid options: "),
    (lambda w: w, r"engine-queue sink needs the queue's name: \.option\('queue', NAME\)"),
    (lambda w: w.option("queue", "a/b"), r"engine-queue sink: ConfigError: invalid queue name 'a/b'"),
    (lambda w: w.option("queue", "a.read.b"), r"would collide with queue 'a'"),
    (lambda w: w.option("queue", "q").option("commitTimeoutSeconds", 0), "must be at least 1, not 0"),
])
def test_wrong_arguments_are_one_line_errors_and_create_nothing(spark: Any, tmp_path: Path, build: Any,
                                                                words: str) -> None:
    df = spark.range(3).selectExpr("cast(id as string) as data")
    with pytest.raises(Exception, match=words) as err:
        build(df.write.format(FORMAT).mode("append")).save(str(tmp_path / "new"))
    assert "\n" not in str(err.value).split("ConfigException: ")[-1].split("\n\tat ")[0].strip()
    assert not os.path.exists(tmp_path / "new")


@pytest.mark.parametrize("mode,words", [
    ("overwrite", "does not support truncate in batch mode"),
    ("errorifexists", "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),
])
def test_spark_refuses_modes_other_than_append(spark: Any, tmp_path: Path, mode: str, words: str) -> None:
    with pytest.raises(Exception, match=words):  # Spark's own errors (a plan follows the first line)
        spark.range(3).selectExpr("cast(id as string) as data").write.format(FORMAT).option("queue", "q") \
            .mode(mode).save(str(tmp_path / "new"))
    assert not os.path.exists(tmp_path / "new")


@pytest.mark.parametrize("expr,words", [
    ("cast(id as string) as payload", r"needs a 'data' column .*unexpected: \['payload'\]"),
    ("id as data", "column 'data' is bigint, not binary or string"),
    ("cast(id as string) as data, id as expire_time", "column 'expire_time' is bigint, not timestamp"),
])
def test_wrong_columns(spark: Any, tmp_path: Path, expr: str, words: str) -> None:
    with pytest.raises(Exception, match=words):
        spark.range(3).selectExpr(*expr.split(", ")).write.format(FORMAT).option("queue", "q").mode("append") \
            .save(str(tmp_path / "new"))
    assert not os.path.exists(tmp_path / "new")


def test_a_stream_puts_each_micro_batch_once(spark: Any, tmp_path: Path) -> None:
    src, d, chk = tmp_path / "in", str(tmp_path / "queues"), str(tmp_path / "chk")
    src.mkdir()

    def run() -> None:
        q = (spark.readStream.format("text").load(str(src)).selectExpr("value as data")
             .writeStream.format(FORMAT).option("queue", "q").option("checkpointLocation", chk)
             .option("streamName", "lines").trigger(availableNow=True).start(d))
        q.awaitTermination(120)
        assert q.exception() is None

    (src / "a.txt").write_text("a1\na2\n")
    run()
    (src / "b.txt").write_text("b1\n")
    run()
    assert [x for x, _ in items(d, "q")] == [b"a1", b"a2", b"b1"]
    with open(f"{qs.staging_dir(d, 'q')}/{qs.STREAMS}") as f:
        assert '"lines": 1' in f.read()
    for name in ("1", ".1.crc"):  # Spark runs batch 1 again on restart: it is not put again
        os.remove(f"{chk}/commits/{name}")
    run()
    assert [x for x, _ in items(d, "q")] == [b"a1", b"a2", b"b1"]
    assert sorted(os.listdir(qs.staging_dir(d, "q"))) == ["_LOCK", qs.STREAMS]


STALLED_COMMIT = r'''#!/bin/sh
# The commit's interpreter: stalls the commit (after the tasks staged their rows).
if [ "$3" = commit ]; then touch "{marker}"; sleep 600; fi
exec "{python}" "$@"
'''

KILLED_JOB = r'''
import sys
from engine.spark.session import build_session
d, python = sys.argv[1], sys.argv[2]
spark = build_session("local[2]", "engine-kill", conf={"spark.sql.adaptive.enabled": "false",
                                                        "spark.pyspark.python": python})
spark.range(0, 100, numPartitions=2).selectExpr("cast(id as string) as data").write \
    .format("engine.spark.QueueSource").option("queue", "q").mode("append").save(d)
'''


def test_a_job_killed_between_its_tasks_and_its_commit_leaves_nothing(tmp_path: Path) -> None:
    d, marker, script = str(tmp_path / "queues"), str(tmp_path / "marker"), tmp_path / "python.sh"
    script.write_text(STALLED_COMMIT.format(marker=marker, python=sys.executable))
    script.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).parents[2]),
                                                                   os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_JOB, d, str(script)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        for _ in range(6000):
            if os.path.exists(marker) or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert os.path.exists(marker)
        (job,) = [n for n in os.listdir(qs.staging_dir(d, "q")) if n.startswith("job-")]
        assert len(os.listdir(f"{qs.staging_dir(d, 'q')}/{job}")) == 2  # both tasks staged theirs
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and the stalled commit
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
    assert items(d, "q") == []
    assert qs.cleanup(qs.staging_dir(d, "q")) == [f"removed {job}"]
    assert os.listdir(qs.staging_dir(d, "q")) == ["_LOCK"]
