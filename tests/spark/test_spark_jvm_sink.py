"""The JVM engine-log sink (engine.spark.LogSink) against the Python writers, without Spark.

* Byte parity: the same records written by the connector's shard writer
  (``engine.spark.ShardWriter``'s test entry, one JVM per case) and by
  engine.applog's segment writer (:class:`engine.applog.AppendLog`, and the
  sink's :class:`engine.spark.sink.ShardWriter` built on it) give the same LOG,
  IDX and .crc files, byte for byte; the Java-written shard reads back with
  :class:`engine.applog.LogReader` and verifies.
* The same refusals, with the same messages.
* The manifest lock excludes across runtimes: a Python holder (an OFD record
  lock, :func:`engine.fs.take_record_lock`) blocks the JVM's ``FileChannel.lock``
  and the other way round; a flock would not.

Skipped where the connector cannot be built (no JDK).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from engine.applog import AppendLog, LogReader
from engine.errors import ConfigError, LockedError
from engine.fs import resolve, take_lock, take_record_lock
from engine.spark import jvmbuild
from engine.spark.manifest import read_manifest
from engine.spark.sink import ShardWriter, cleanup, commit_job, verify_dataset

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
T0 = 1_700_000_000_000_000_000
Rows = list[tuple[int, int, bytes]]  # (time_ns, flags, data)


def _java(*args: str, stdin: str = "", timeout: float = 120) -> str:
    cp = os.pathsep.join([jvmbuild.connector_jar(), *jvmbuild.spark_jars()])
    java = jvmbuild._tool("java") or "java"
    done = subprocess.run([java, "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-cp", cp, *args], input=stdin,
                          capture_output=True, text=True, check=False, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def java_shard(dataset: str, shard: str, rows: Rows, segment_bytes: int, ttl_ns: int = 0, job: str = "j") -> str:
    lines = "".join(f"{t} {f} {d.hex()}\n" for t, f, d in rows)
    return _java("engine.spark.ShardWriter", dataset, job, shard, str(segment_bytes), str(ttl_ns),
                 stdin=lines).strip()


def python_shard(dataset: str, shard: str, rows: Rows, segment_bytes: int, ttl_ns: int = 0) -> str:
    w = ShardWriter(dataset, "j", shard, segment_bytes=segment_bytes, ttl_ns=ttl_ns)
    try:
        for t, f, d in rows:
            w.write(pa.array([d], pa.binary()), np.array([t], dtype=np.int64), np.array([f], dtype=np.int64))
        c = w.finish()
    except ConfigError as exc:
        w.abort()
        return f"ERROR ConfigError: {exc}"
    return f"{c.records} {c.bytes}"


def segment_files(directory: str) -> dict[str, bytes]:
    """The LOG, IDX and .crc files of a log directory, by name."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith((".log", ".idx", ".crc")):
            with open(os.path.join(directory, name), "rb") as f:
                out[name] = f.read()
    return out


def cases() -> Iterator[tuple[str, Rows, int, int]]:
    rows = [(T0 + i * 1000 + (i // 7), i % 5, bytes([65 + i % 26]) * (i % 37)) for i in range(500)]
    yield "many-segments", rows, 2048, 0
    yield "one-record-per-segment", rows[:40], 32, 0
    yield "one-segment-ttl", rows, 1 << 20, 3_600_000_000_000
    yield "equal-times-big-flags", [(T0, 0xFFFFFFFF, b"x" * 5000), (T0, 0, b""), (T0, 7, b"\x00\xff")], 4096, 0
    yield "empty", [], 1 << 20, 0


@pytest.mark.parametrize("name,rows,segment_bytes,ttl_ns", list(cases()), ids=[c[0] for c in cases()])
def test_java_shard_is_byte_identical_to_the_python_writers(tmp_path: Path, name: str, rows: Rows,
                                                              segment_bytes: int, ttl_ns: int) -> None:
    jds, pds = str(tmp_path / "jvm"), str(tmp_path / "py")
    got = java_shard(jds, "s", rows, segment_bytes, ttl_ns)
    assert got == python_shard(pds, "s", rows, segment_bytes, ttl_ns)
    assert got == f"{len(rows)} {sum(16 + len(d) for _t, _f, d in rows)}"
    jdir, pdir = f"{jds}/job-j/s", f"{pds}/job-j/s"
    java_files = segment_files(jdir)
    assert java_files and java_files == segment_files(pdir)
    # engine.applog's own writer gives the same segments for the same records.
    log = AppendLog.open(str(tmp_path / "store"), segment_bytes=segment_bytes, ttl_ns=ttl_ns)
    for t, f, d in rows:
        log.append(d, flags=f, time_ns=t)
    log.close()
    assert segment_files(str(tmp_path / "store")) == java_files
    # The Java-written shard reads back with the store's reader and verifies.
    with LogReader.open(jdir) as reader:
        reader.verify()
        assert [(r.time_ns, r.flags, r.data) for r in reader.scan()] == [(t, f, d) for t, f, d in rows]


@pytest.mark.parametrize("rows,words", [
    ([(T0 + 5, 0, b"a"), (T0, 0, b"b")], "record times go backwards"),
    ([(T0, 1 << 32, b"a")], "flags must fit in an unsigned 32-bit integer"),
    ([(T0, -1, b"a")], "flags must fit in an unsigned 32-bit integer"),
])
def test_refusals_match_the_python_writer(tmp_path: Path, rows: Rows, words: str) -> None:
    got = java_shard(str(tmp_path / "jvm"), "s", rows, 1 << 20)
    assert got == python_shard(str(tmp_path / "py"), "s", rows, 1 << 20)
    assert got.startswith("ERROR ConfigError: s: ") and words in got
    # A refused task leaves nothing behind (its shard and its empty job directory).
    assert os.listdir(tmp_path / "jvm") == []


def _hold_in_java(path: str) -> subprocess.Popen[str]:
    cp = os.pathsep.join([jvmbuild.connector_jar(), *jvmbuild.spark_jars()])
    proc = subprocess.Popen([jvmbuild._tool("java") or "java", "-cp", cp, "engine.spark.SinkLock", "hold", path],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_python_holder_blocks_the_jvm_and_a_flock_would_not(tmp_path: Path) -> None:
    path = str(tmp_path / "_LOCK")
    held = take_record_lock(resolve(None), path, what="commit lock of the sink dataset")
    try:
        assert _java("engine.spark.SinkLock", "probe", path).strip() == "held"
    finally:
        held.release()
    assert _java("engine.spark.SinkLock", "probe", path).strip() == "free"
    # Why a record lock: the JVM's FileChannel.lock does not see a flock at all.
    flocked = take_lock(resolve(None), path)
    try:
        assert _java("engine.spark.SinkLock", "probe", path).strip() == "free"
    finally:
        flocked.release()


def _waiters(path: str) -> int:
    """Lock requests blocked on ``path`` now (the kernel's /proc/locks ``->`` lines)."""
    inode = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return sum(1 for line in f if "->" in line and line.split()[6].endswith(f":{inode}"))


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs Linux's /proc/locks")
def test_a_jvm_commit_lock_waits_for_a_python_holder(tmp_path: Path) -> None:
    """The JVM's blocking take (what its driver commit does) queues behind Python's lock
    and gets it once Python lets go."""
    path = str(tmp_path / "_LOCK")
    held = take_record_lock(resolve(None), path, what="commit lock of the sink dataset")
    cp = os.pathsep.join([jvmbuild.connector_jar(), *jvmbuild.spark_jars()])
    proc = subprocess.Popen([jvmbuild._tool("java") or "java", "-cp", cp, "engine.spark.SinkLock", "hold", path],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(2400):  # the JVM starting up, then blocking in fcntl(F_SETLKW)
            if _waiters(path) or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert _waiters(path) == 1 and proc.poll() is None
        held.release()
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    finally:
        held.release()
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(60)


def test_a_jvm_holder_blocks_python(tmp_path: Path) -> None:
    path = str(tmp_path / "_LOCK")
    proc = _hold_in_java(path)
    try:
        with pytest.raises(LockedError, match="commit lock of the sink dataset is held"):
            take_record_lock(resolve(None), path, what="commit lock of the sink dataset")
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
        assert proc.wait(60) == 0
    take_record_lock(resolve(None), path).release()


def test_the_pipeline_names_a_jvm_error_by_its_engine_type() -> None:
    """Spark wraps the connector's exception in a stage failure; the pipeline's summary
    line is the connector's error, typed as the Python reader's."""
    from engine.spark.pipeline import first_line

    text = ("org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 95.0 failed 1 "
            "times, most recent failure: Lost task 0.0 (executor driver): engine.spark.CorruptFileException: "
            "/d/0.log at offset 3030: expected record 142 matching its checksum (/d/0.crc), found a record that "
            "does not\n\tat engine.spark.LogBatchReader.next(LogBatchReader.java:1)")
    assert first_line(Exception(text)) == ("CorruptFileError: /d/0.log at offset 3030: expected record 142 matching "
                                           "its checksum (/d/0.crc), found a record that does not")
    assert first_line(Exception("x: engine.spark.ConfigException: option mode='X': use one of")) == (
        "ConfigError: option mode='X': use one of")


def _sink(*args: str) -> str:
    return _java("engine.spark.SinkDataset", *args).strip()


def _rows(tag: str, n: int) -> Rows:
    return [(T0 + i, 0, f"{tag}-{i}".encode()) for i in range(n)]


def test_the_java_commit_keeps_the_python_protocol(tmp_path: Path) -> None:
    """SinkDataset's commit, overwrite, abort and stream batches, checked with the Python
    side (manifest reader, verify, cleanup, commit_job) on the same dataset."""
    ds = str(tmp_path / "out")
    fs = resolve(None)
    for job, shard, tag in (("1", "s0", "a"), ("1", "s1", "b"), ("2", "s0", "c"), ("2", "s0-retry", "c")):
        java_shard(ds, shard, _rows(tag, 5), 4096, job=job)
    assert _sink("commit", ds, "append", "1/s1", "1/s0") == ""
    assert read_manifest(fs, ds) == ["job-1/s0", "job-1/s1"]
    assert _sink("commit", ds, "append", "2/s0") == ""  # the failed attempt's shard goes
    assert read_manifest(fs, ds) == ["job-1/s0", "job-1/s1", "job-2/s0"]
    assert sorted(os.listdir(f"{ds}/job-2")) == ["s0"]
    verify_dataset(ds)
    with open(f"{ds}/_SHARDS.json", "rb") as f:
        raw = f.read()
    assert raw == json.dumps(json.loads(raw), indent=1).encode() + b"\n"  # as Python writes it
    java_shard(ds, "s0", _rows("d", 3), 4096, job="3")
    assert _sink("commit", ds, "overwrite", "3/s0") == ""
    assert read_manifest(fs, ds) == ["job-3/s0"] and sorted(os.listdir(ds)) == ["_LOCK", "_SHARDS.json", "job-3"]
    assert "job 3 is already committed" in _sink("abort-job", ds, "3")
    java_shard(ds, "s0", _rows("e", 3), 4096, job="4")
    assert _sink("abort-job", ds, "4") == "" and not os.path.exists(f"{ds}/job-4")
    # Streams: a batch id is published once, also across a Python commit in between.
    for shard in ("b0", "b1", "b1-rerun"):
        java_shard(ds, shard, _rows(shard, 2), 4096, job="st")
    assert _sink("commit-stream", ds, "q", "0", "st/b0") == "published"
    assert _sink("commit-stream", ds, "q", "1", "st/b1") == "published"
    assert _sink("commit-stream", ds, "q", "1", "st/b1-rerun") == "dropped"
    assert sorted(os.listdir(f"{ds}/job-st")) == ["b0", "b1"]
    w = ShardWriter(ds, "5", "s0")
    w.write(pa.array([b"x"]), np.array([T0]))
    commit_job(ds, [w.finish()], overwrite=False)
    assert _sink("commit-stream", ds, "q", "1") == "dropped"
    assert read_manifest(fs, ds) == ["job-3/s0", "job-st/b0", "job-st/b1", "job-5/s0"]
    verify_dataset(ds)
    assert cleanup(ds) == []
    # The target checks are the Python sink's.
    plain = str(tmp_path / "plain")
    AppendLog.open(plain).close()
    assert "a plain append log" in _sink("commit", plain, "append")
