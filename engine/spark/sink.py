"""The shard/commit/abort protocol of the engine-log sink, on the Python side (no Spark).

Spark's ``engine-log`` sink is the JVM connector's (``engine.spark.LogSink``,
``ShardWriter`` and ``SinkDataset`` in ``engine/spark/java``); it writes the same
files (byte for byte: ``tests/spark/test_spark_jvm_sink.py``) and commits by
the same protocol under the same lock.  This module writes sink datasets
without Spark (:class:`ShardWriter`, :func:`commit_job`: tests, benchmarks and
the crash-simulator tests of the protocol), and :func:`cleanup` and
:func:`verify_dataset` serve ``engine spark cleanup`` and ``engine verify``.

Layout of a dataset written by the sink (this engine's, around LOG/IDX logs, documented in
``docs/pipeline.md``)::

    DATASET/
      _SHARDS.json                 manifest: {"version": 1, "shards": ["job-<id>/shard-...", ...]}
      _LOCK                        record-locked (fcntl, byte 0) while a job commits or cleans up
      job-<id>/shard-<part>-<attempt>/   one append log (LOG/IDX segments with their
                                         .crc files) per task, written by the
                                         store's own segment writer

* Every task writes its own shard under its job's directory, fsyncs its files
  and directories, and returns a :class:`ShardCommit` message.  A shard no
  manifest lists is invisible to readers.
* The driver's :func:`commit_job` replaces the manifest atomically (temp file,
  fsync, rename, fsync directory) with one that also lists the job's shards
  (append) or only them (overwrite).  That rename is the single publication
  point: a reader sees the old list of shards or the new one, never part of a
  job.  Afterwards it deletes what the new manifest no longer lists: the
  replaced jobs (overwrite) and the shards of this job's failed task attempts.
* :func:`abort_job` deletes the job's directory.  A driver that dies between the
  tasks and the commit leaves an unlisted ``job-<id>`` directory; readers ignore
  it and :func:`cleanup` removes it (run it when no job is writing).

No directory is ever renamed: every step is a file create, a file rename or a
delete, which keeps the protocol within what the crash simulator models.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from engine.applog.codec import MAX_RECORD_SIZE, RECORD_HEADER_SIZE
from engine.applog.writer import SegmentWriter, create_segment
from engine.errors import ConfigError
from engine.fs import (
    FileSystem,
    HeldLock,
    as_path,
    atomic_write,
    crashpoint,
    make_dirs,
    no_such,
    resolve,
    take_record_lock,
)
from engine.spark.logfiles import SEGMENT_RE
from engine.spark.manifest import JOB_PREFIX, MANIFEST, join, read_manifest

log = logging.getLogger("engine.spark")

LOCK = "_LOCK"
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
#: Encoded bytes a shard writer keeps before writing them (also written at the end
#: of every batch).
SINK_BUFFER_BYTES = 1 << 20


def new_job_id() -> str:
    """A job id unique enough to name staging directories (time-ordered for humans)."""
    return time.strftime("%Y%m%d%H%M%S") + "-" + uuid.uuid4().hex[:8]


def shard_name(job_id: str, partition: int, attempt: int) -> str:
    return f"shard-{job_id}-{partition:05d}-{attempt}"


@dataclass(frozen=True)
class ShardCommit:
    """What a task reports to the driver: the shard it wrote and its size."""

    job_id: str
    shard: str
    records: int
    bytes: int


def check_target(fs: FileSystem, dataset: str) -> None:
    """ConfigError unless ``dataset`` is a sink dataset, or new, or empty.

    A plain append log (an :class:`engine.applog.AppendLog` directory) or a
    directory holding other files would get a manifest that hides them from
    every reader of the dataset, so the sink refuses to write there.
    """
    if not fs.exists(dataset):
        return
    if not fs.isdir(dataset):
        raise ConfigError(f"{dataset}: not a directory; the engine-log sink writes a dataset directory")
    names = fs.listdir(dataset)
    if MANIFEST in names:
        return
    if any(SEGMENT_RE.match(n) for n in names):
        raise ConfigError(
            f"{dataset}: a plain append log (it has log segments and no {MANIFEST}); the engine-log sink "
            "writes datasets of shards, which would hide this log's records: write to a new directory, "
            "or append to the log with engine.applog.AppendLog")
    other = sorted(n for n in names if n != LOCK and not n.startswith(JOB_PREFIX))
    if other:
        raise ConfigError(
            f"{dataset}: not an engine-log sink dataset (no {MANIFEST}) and not empty ({', '.join(other[:5])}); "
            "the sink's manifest would hide what is there: write to a new or empty directory")


def remove_tree(fs: FileSystem, path: str) -> None:
    """Delete a directory and everything under it (then fsync its parent)."""
    if not fs.exists(path):
        return
    if fs.isdir(path):
        for name in fs.listdir(path):
            remove_tree(fs, join(path, name))
        fs.rmdir(path)
    else:
        fs.unlink(path)


class ShardWriter:
    """Writes one task's rows as an append log under its job's directory.

    The segments are written by the append-log store's own segment writer
    (:class:`engine.applog.writer.SegmentWriter`): the same encoder, the same
    ``.crc`` checksum files, the same write and sync order, and the same rule for
    starting a new segment (a record that would push the log past
    ``segment_bytes`` goes to a new one, unless the segment is empty).  Records
    get indexes 0, 1, ...; times must not go backwards, as in any append log.
    """

    def __init__(self, dataset: str, job_id: str, shard: str, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 ttl_ns: int = 0, fs: FileSystem | None = None) -> None:
        self.fs = resolve(fs)
        self.dataset = dataset
        self.job_id = job_id
        self.shard = shard
        self.dir = join(dataset, JOB_PREFIX + job_id, shard)
        self.segment_bytes = segment_bytes
        self.ttl_ns = ttl_ns
        self.next_index = 0
        self.last_time = -(1 << 63)
        self.bytes = 0
        self._writer: SegmentWriter | None = None
        self._segments = 0
        self._result: ShardCommit | None = None
        make_dirs(self.fs, self.dir)

    def _roll(self) -> SegmentWriter:
        """Seal the current segment and start the next one at ``next_index``."""
        base = self.next_index if self._writer is None else self._writer.seg.end
        self._close_segment()
        seg = create_segment(self.fs, self.dir, base, self.ttl_ns)
        self._segments += 1
        self._writer = SegmentWriter(seg, self.segment_bytes, SINK_BUFFER_BYTES, self._roll, self._flush)
        return self._writer

    def _flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def _close_segment(self) -> None:
        writer = self._writer
        if writer is not None:
            # The segment is final: its data must be durable before the driver can
            # publish the shard (log, checksums, then index, as the store does).
            crashpoint("spark.sink.before-segment-fsync")
            writer.seal()
            writer.seg.close()
            self._writer = None

    def write(self, data: pa.Array, times_ns: np.ndarray | None = None, flags: np.ndarray | None = None) -> None:
        """Append a column of payloads (with optional times in ns and flags)."""
        n = len(data)
        if self._result is not None:
            raise ConfigError(f"{self.shard}: the shard is finished")
        if n == 0:
            return
        if data.null_count:
            raise ConfigError(f"{self.shard}: record data must not be null")
        if times_ns is None:
            now = max(time.time_ns(), self.last_time)
            times_ns = np.full(n, now, dtype=np.int64)
        times_ns = np.asarray(times_ns, dtype=np.int64)
        if times_ns[0] < self.last_time or (n > 1 and np.any(times_ns[1:] < times_ns[:-1])):
            raise ConfigError(
                f"{self.shard}: record times go backwards; an append log needs them in order "
                "(sort each partition first: df.sortWithinPartitions('time'))")
        flags_arr = np.zeros(n, dtype=np.int64) if flags is None else np.asarray(flags, dtype=np.int64)
        if np.any((flags_arr < 0) | (flags_arr > 0xFFFFFFFF)):
            raise ConfigError(f"{self.shard}: flags must fit in an unsigned 32-bit integer")
        if not (pa.types.is_binary(data.type) or pa.types.is_large_binary(data.type)):
            data = data.cast(pa.binary())
        payloads: list[bytes] = data.to_pylist()
        if any(len(p) > MAX_RECORD_SIZE for p in payloads):
            raise ConfigError(f"{self.shard}: a record's data is larger than the format's 4 GiB limit")
        if self._writer is None:
            self._roll()
        # Runs of rows sharing time and flags: one call of the segment writer each
        # (it starts new segments as they fill and flushes every SINK_BUFFER_BYTES).
        cuts = np.flatnonzero((times_ns[1:] != times_ns[:-1]) | (flags_arr[1:] != flags_arr[:-1])) + 1
        bounds = [0, *cuts.tolist(), n]
        for a, b in itertools.pairwise(bounds):
            self._writer.add(payloads[a:b], int(flags_arr[a]), int(times_ns[a]))  # type: ignore[union-attr]
        self._flush()
        self.next_index += n
        self.last_time = int(times_ns[-1])
        self.bytes += RECORD_HEADER_SIZE * n + sum(map(len, payloads))

    def finish(self) -> ShardCommit:
        """Make the shard durable and describe it for the driver's commit (idempotent)."""
        if self._result is not None:
            return self._result
        if self._segments == 0:
            self._roll()  # an empty task still leaves a valid (empty) log
        self._close_segment()
        crashpoint("spark.sink.before-shard-dir-fsync")
        self.fs.fsync_dir(self.dir)
        self._result = ShardCommit(self.job_id, self.shard, self.next_index, self.bytes)
        return self._result

    def abort(self) -> None:
        """Remove this task's shard, and its job's directory when no other shard is
        in it (a failed or killed task leaves nothing, even after the driver's
        :func:`abort_job` has run)."""
        if self._writer is not None:
            self._writer.seg.close()
            self._writer = None
        remove_tree(self.fs, self.dir)
        job_dir = join(self.dataset, JOB_PREFIX + self.job_id)
        try:
            if self.fs.isdir(job_dir) and not self.fs.listdir(job_dir):
                self.fs.rmdir(job_dir)
        except OSError:
            pass  # another task of the job created its shard meanwhile: the job's abort or cleanup() removes it


def _streams(fs: FileSystem, dataset: str) -> dict[str, int]:
    """The per-stream last published batch ids kept in the manifest."""
    mpath = join(dataset, MANIFEST)
    if not fs.exists(mpath):
        return {}
    with fs.open(mpath) as h:
        doc = json.loads(h.read_all().decode("utf-8"))
    streams = doc.get("streams", {}) if isinstance(doc, dict) else {}
    return {str(k): int(v) for k, v in streams.items()} if isinstance(streams, dict) else {}


def _lock(fs: FileSystem, dataset: str) -> HeldLock:
    """The dataset's commit lock (waits for another job's commit or cleanup).

    A record lock (:func:`engine.fs.take_record_lock`), not a ``flock``: the JVM
    connector's driver commit takes it with ``FileChannel.lock``, a POSIX
    record lock, which only a record lock excludes."""
    return take_record_lock(fs, join(dataset, LOCK), wait=None, what="commit lock of the sink dataset")


def listed_name(c: ShardCommit) -> str:
    """How the manifest names a shard: relative to the dataset."""
    return f"{JOB_PREFIX}{c.job_id}/{c.shard}"


def commit_job(dataset: str, commits: list[ShardCommit], *, overwrite: bool,
               fs: FileSystem | None = None) -> list[str]:
    """Publish the shards of a job atomically; returns the new list of shards.

    The shards are already durable (each task fsynced its files and directories
    before reporting).  The manifest replacement is the commit point; deleting
    what it no longer lists comes after it, so a crash at any point leaves the
    old or the new dataset, plus at most some unlisted files.
    """
    fs = resolve(fs)
    check_target(fs, dataset)
    make_dirs(fs, dataset)
    lock = _lock(fs, dataset)
    try:
        old = read_manifest(fs, dataset) or []
        new = sorted(listed_name(c) for c in commits)
        shards = new if overwrite else old + [s for s in new if s not in old]
        doc: dict[str, object] = {"version": 1, "shards": shards, "committed_ns": time.time_ns()}
        if not overwrite:
            doc["streams"] = _streams(fs, dataset)
        crashpoint("spark.sink.commit.before-manifest")
        atomic_write(fs, join(dataset, MANIFEST), json.dumps(doc, indent=1).encode() + b"\n")
        crashpoint("spark.sink.commit.after-manifest")
        # Published.  The rest is cleanup of what no manifest lists any more.
        jobs = {c.job_id for c in commits}
        if overwrite:
            jobs |= {s.split("/", 1)[0][len(JOB_PREFIX):] for s in old}
        _remove_unlisted(fs, dataset, set(shards), jobs)
        return shards
    finally:
        lock.release()


def _remove_unlisted(fs: FileSystem, dataset: str, listed: set[str], jobs: set[str] | None) -> list[str]:
    """Delete shards (and then empty job directories) the manifest does not list;
    returns the shard directories deleted.

    ``jobs`` limits this to those job ids (None: every job directory).
    """
    changed = False
    removed: list[str] = []
    for name in fs.listdir(dataset):
        if not name.startswith(JOB_PREFIX) or not fs.isdir(join(dataset, name)):
            continue
        if jobs is not None and name[len(JOB_PREFIX):] not in jobs:
            continue
        job_dir = join(dataset, name)
        for shard in fs.listdir(job_dir):
            if f"{name}/{shard}" not in listed:
                log.info("removing unlisted shard %s", join(job_dir, shard))
                remove_tree(fs, join(job_dir, shard))
                removed.append(join(job_dir, shard))
                changed = True
        if not fs.listdir(job_dir):
            fs.rmdir(job_dir)
            changed = True
    if changed:
        fs.fsync_dir(dataset)
    return removed


def abort_job(dataset: str, job_id: str, fs: FileSystem | None = None) -> None:
    """Remove everything a failed job wrote (its tasks' shards)."""
    fs = resolve(fs)
    path = join(dataset, JOB_PREFIX + job_id)
    if fs.exists(path):
        listed = set(read_manifest(fs, dataset) or [])
        if any(s.startswith(JOB_PREFIX + job_id + "/") for s in listed):
            raise ConfigError(f"{dataset}: job {job_id} is already committed; not removing it")
        remove_tree(fs, path)
        fs.fsync_dir(dataset)


def cleanup(dataset: str | os.PathLike[str], fs: FileSystem | None = None) -> list[str]:
    """Remove job directories no manifest lists (what a crashed driver left);
    returns the shard directories removed (``engine spark cleanup DATASET``).

    Only safe when no job is writing to the dataset: a running job's shards are
    unlisted until its commit.
    """
    fs = resolve(fs)
    dataset = as_path(dataset, "dataset")
    if not fs.exists(dataset):
        raise no_such(fs, dataset, "sink dataset")
    check_target(fs, dataset)
    if not any(n.startswith(JOB_PREFIX) for n in fs.listdir(dataset)):
        return []  # no job directory, nothing to remove: take no lock, create no file
    lock = _lock(fs, dataset)
    try:
        return _remove_unlisted(fs, dataset, set(read_manifest(fs, dataset) or []), None)
    finally:
        lock.release()


def verify_dataset(dataset: str | os.PathLike[str], fs: FileSystem | None = None) -> list[str]:
    """Check a sink dataset (``engine verify DATASET``): the manifest parses, every
    listed shard exists and passes the append log's own self-check.  Raises an
    :class:`~engine.errors.EngineError` on a problem; returns notes (records per
    shard, unlisted job directories that :func:`cleanup` would remove)."""
    from engine.spark.handler import verify

    return verify(resolve(fs), as_path(dataset, "dataset"))
