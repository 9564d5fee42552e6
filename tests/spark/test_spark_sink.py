"""The sink's shard/commit/abort protocol on the Python side (engine.spark.sink): crash states,
injected faults, modes (no Spark).  The JVM sink's twin of it: test_spark_jvm_sink.py."""

from __future__ import annotations

import errno

import numpy as np
import pyarrow as pa
import pytest

from engine.errors import ConfigError, EngineError, PoisonedError
from engine.fs import FileSystem, make_dirs
from engine.spark import logfiles
from engine.spark.sink import JOB_PREFIX, ShardWriter, abort_job, cleanup, commit_job, verify_dataset
from stress.faults import FaultyFS
from stress.simfs import SimFS


def payloads(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def write_shard(fs: FileSystem, ds: str, job: str, shard: str, tag: str, n: int) -> object:
    w = ShardWriter(ds, job, shard, segment_bytes=200, fs=fs)
    data = payloads(tag, n)
    for a in range(0, n, 7):
        w.write(pa.array(data[a:a + 7]), np.arange(a, min(n, a + 7), dtype=np.int64) * 1000)
    return w.finish()


def dataset_content(fs: FileSystem, ds: str) -> dict[str, list[bytes]]:
    out = {}
    for ld in logfiles.dataset_logs(ds, fs):
        segs = logfiles.list_segments(ld.path, fs)
        out[ld.name] = [d for s in segs for run in logfiles.read_range(fs, s, s.min_pos, s.count)
                        for d in run.data.to_pylist()]
    return out


def test_append_and_overwrite(tmp_path: object) -> None:
    fs = logfiles.resolve(None)
    ds = str(tmp_path) + "/out"
    c1 = write_shard(fs, ds, "1", "shard-0", "a", 20)
    c2 = write_shard(fs, ds, "1", "shard-1", "b", 5)
    assert logfiles.dataset_logs(ds) == []  # written but not published: invisible
    commit_job(ds, [c1, c2], overwrite=False)  # type: ignore[list-item]
    c3 = write_shard(fs, ds, "2", "shard-0", "c", 3)
    commit_job(ds, [c3], overwrite=False)  # type: ignore[list-item]
    assert dataset_content(fs, ds) == {"job-1/shard-0": payloads("a", 20), "job-1/shard-1": payloads("b", 5),
                                       "job-2/shard-0": payloads("c", 3)}
    c4 = write_shard(fs, ds, "3", "shard-0", "d", 4)
    commit_job(ds, [c4], overwrite=True)  # type: ignore[list-item]
    assert dataset_content(fs, ds) == {"job-3/shard-0": payloads("d", 4)}
    assert sorted(n for n in fs.listdir(ds) if n.startswith(JOB_PREFIX)) == ["job-3"]  # replaced jobs deleted
    assert verify_dataset(ds) == ["job-3/shard-0: 4 records"]


def test_abort_removes_the_job_and_failed_attempts_are_cleaned(tmp_path: object) -> None:
    fs = logfiles.resolve(None)
    ds = str(tmp_path) + "/out"
    write_shard(fs, ds, "9", "shard-0", "x", 5)
    abort_job(ds, "9")
    assert not fs.exists(ds + "/job-9")
    # a task attempt that failed after writing: its shard is not in the commit, so it is removed
    write_shard(fs, ds, "5", "shard-0-attempt0", "y", 5)
    ok = write_shard(fs, ds, "5", "shard-0-attempt1", "y", 5)
    commit_job(ds, [ok], overwrite=False)  # type: ignore[list-item]
    assert fs.listdir(ds + "/job-5") == ["shard-0-attempt1"]
    # a crashed driver's unlisted job: ignored by readers, removed by cleanup()
    write_shard(fs, ds, "6", "shard-0", "z", 5)
    assert list(dataset_content(fs, ds)) == ["job-5/shard-0-attempt1"]
    assert any("not published" in n for n in verify_dataset(ds))
    cleanup(ds)
    assert not fs.exists(ds + "/job-6")
    # a listed shard that is missing is corruption
    import shutil

    shutil.rmtree(ds + "/job-5/shard-0-attempt1")
    with pytest.raises(EngineError):
        verify_dataset(ds)
    with pytest.raises(ConfigError):
        abort_job(ds, "5")  # committed: abort refuses to delete it


def test_times_must_not_go_backwards(tmp_path: object) -> None:
    ds = str(tmp_path) + "/out"
    w = ShardWriter(ds, "1", "s")
    w.write(pa.array([b"a", b"b"]), np.array([5, 6]))
    with pytest.raises(ConfigError, match="backwards"):
        w.write(pa.array([b"c"]), np.array([4]))
    w.write(pa.array([b"text"]), np.array([7]), np.array([3]))
    c = w.finish()
    commit_job(ds, [c], overwrite=False)
    seg = logfiles.list_segments(ds + "/job-1/s")[0]
    run = next(logfiles.read_range(logfiles.resolve(None), seg, 0, seg.count))
    assert run.data.to_pylist() == [b"a", b"b", b"text"] and run.flags.tolist() == [0, 0, 3]


def test_every_crash_state_shows_a_whole_number_of_jobs() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    states: list[dict[str, list[bytes]]] = [{}]  # dataset content after each acknowledged commit
    c1 = write_shard(sim, "/db/out", "1", "s0", "a", 12)
    c2 = write_shard(sim, "/db/out", "1", "s1", "b", 9)
    commit_job("/db/out", [c1, c2], overwrite=False, fs=sim)  # type: ignore[list-item]
    states.append({"job-1/s0": payloads("a", 12), "job-1/s1": payloads("b", 9)})
    sim.mark(1)
    c3 = write_shard(sim, "/db/out", "2", "s0", "c", 10)
    commit_job("/db/out", [c3], overwrite=False, fs=sim)  # type: ignore[list-item]
    states.append({**states[1], "job-2/s0": payloads("c", 10)})
    sim.mark(2)
    c4 = write_shard(sim, "/db/out", "3", "s0", "d", 4)
    commit_job("/db/out", [c4], overwrite=True, fs=sim)  # type: ignore[list-item]
    states.append({"job-3/s0": payloads("d", 4)})
    sim.mark(3)
    seen = 0
    for state in sim.crash_states(limit=600, seed=1):
        fs2 = state.fs()
        acked = len(state.marks)
        content = dataset_content(fs2, "/db/out") if fs2.isdir("/db/out") else {}
        assert content in states, state.describe()
        # never older than the last acknowledged commit
        assert states.index(content) >= acked, state.describe()
        if content:
            verify_dataset("/db/out", fs2)
        seen += 1
    assert seen > 50


@pytest.mark.parametrize("persistent", [False, True])
def test_injected_faults_never_publish_part_of_a_job(persistent: bool) -> None:
    fail_at = 1
    outcomes = set()
    while True:
        sim = SimFS()
        make_dirs(sim, "/db")
        c0 = write_shard(sim, "/db/out", "0", "s0", "base", 5)
        commit_job("/db/out", [c0], overwrite=False, fs=sim)  # type: ignore[list-item]
        ffs = FaultyFS(sim, fail_at=fail_at, errno=errno.EIO, persistent=persistent)
        try:
            c1 = write_shard(ffs, "/db/out", "1", "s0", "new", 9)
            commit_job("/db/out", [c1], overwrite=False, fs=ffs)  # type: ignore[list-item]
        except (OSError, EngineError) as exc:
            outcomes.add(type(exc).__name__)
            content = dataset_content(sim, "/db/out")
            assert content in ({"job-0/s0": payloads("base", 5)},
                               {"job-0/s0": payloads("base", 5), "job-1/s0": payloads("new", 9)}), fail_at
            # the dataset stays usable: a clean job afterwards commits normally
            if not persistent:
                abort_job("/db/out", "1", fs=sim) if "job-1/s0" not in content else None
                c2 = write_shard(sim, "/db/out", "2", "s0", "more", 2)
                commit_job("/db/out", [c2], overwrite=False, fs=sim)  # type: ignore[list-item]
                assert dataset_content(sim, "/db/out")["job-2/s0"] == payloads("more", 2)
            fail_at += 1
            continue
        break
    assert fail_at > 10 and "OSError" in outcomes


def test_fsync_failure_poisons_the_shard_writer() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    ffs = FaultyFS(sim, fail_at=None)
    w = ShardWriter("/db/out", "1", "s0", fs=ffs)
    w.write(pa.array([b"a"]), np.array([1]))
    ffs.kinds = ("fsync",)
    ffs.fail_at = ffs.ops + 1  # the next fsync: the log's, in finish()
    with pytest.raises(PoisonedError):
        w.finish()
    with pytest.raises(PoisonedError):  # the handle refuses writes until reopened
        w.write(pa.array([b"b"]), np.array([2]))
    w.abort()
    assert not sim.exists("/db/out/job-1/s0")


def test_shards_are_written_by_the_store_segment_writer(tmp_path: object) -> None:
    """A shard's segments are what the append-log store writes for the same records:
    the same .log, .idx and .crc bytes (one segment writer), so the store's own
    reader and writer open them, checksums verified."""
    import os

    from engine.applog import AppendLog, LogReader

    ds = str(tmp_path) + "/out"
    data = [b"r%d" % i * (1 + i % 4) for i in range(40)]
    times = np.repeat(np.arange(20, dtype=np.int64) * 10, 2)  # runs of equal times
    flags = np.arange(40, dtype=np.int64) % 3
    w = ShardWriter(ds, "1", "s", segment_bytes=200)
    for a in range(0, 40, 9):
        w.write(pa.array(data[a:a + 9]), times[a:a + 9], flags[a:a + 9])
    shard = w.finish()
    assert shard.records == 40 and shard.bytes == 16 * 40 + sum(map(len, data))
    store_dir = str(tmp_path) + "/store"
    with AppendLog.open(store_dir, ttl=0, segment_bytes=200, sync="never") as log:
        for d, t, f in zip(data, times.tolist(), flags.tolist()):
            log.append(d, f, t)
    shard_dir = ds + "/job-1/s"

    def files(path: str) -> dict[str, bytes]:
        return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))
                if n.endswith((".log", ".idx", ".crc"))}

    got, want = files(shard_dir), files(store_dir)
    assert sum(n.endswith(".crc") for n in got) == sum(n.endswith(".log") for n in got) > 1
    assert got == want
    with LogReader.open(shard_dir) as reader:
        assert reader.verify() == [] and [r.data for r in reader.scan()] == data
    with AppendLog.open(shard_dir, sync="never") as again:
        assert not again.recovery.repaired and again.verify() == []
