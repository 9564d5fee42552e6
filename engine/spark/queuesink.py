"""The engine-queue sink's staging and commit (the Python half of ``engine.spark.QueueSink``).

A Spark write into a queue (``df.write.format("engine-queue").option("queue", NAME)
.mode("append").save(DIR)``) never writes the queue from the executors: the
queue's producer protocol (its append lock and writer lock are ``flock`` s, its
shared words are mapped memory) has one implementation, :mod:`engine.queue`,
and the JVM cannot take a ``flock``.  So:

* each task stages its rows in a file of its own beside the queue,
  ``DIR/<queue>.sink/job-<id>/part-<partition>-<attempt>``, in the queue
  journal's own writer-file format: the writer magic, an empty CHECK, then runs
  of PUT records (ids 1, 2, ... within the file, the staging time as add time,
  the row's expiry) each followed by the CHECK of the run
  (:func:`encode_stage`; the JVM's ``QueueStage`` writes the same bytes, tested
  byte for byte).  A run ends after :data:`RUN_ROWS` rows or once it holds
  :data:`RUN_BYTES`; the task fsyncs the file and its directory before it
  reports it;
* the driver's commit runs ``python -m engine.spark.queuesink commit DIR QUEUE
  JOB PART...`` (:func:`commit_job`), which publishes the parts through
  :meth:`engine.queue.Queue.put_many`, one run per call, in partition order.

Atomicity.  Until the commit starts, the job's rows are only in staged files no
queue reader looks at: a job killed before its commit (or aborted) leaves none of
its rows in the queue; its staging directory is removed by the abort or by
:func:`cleanup` (``engine spark cleanup DIR/<queue>.sink``).  The queue cannot
put many items all-or-nothing at a crash (a put that crosses a writer-file
rotation is two writes, and recovery keeps whole PUTs whose CHECK a crash took),
so the commit is resumable instead: it first writes a marker,
``job-<id>/_COMMIT.json`` (the parts in order and how many rows are already
put), atomically; from then on the job is committed and will be put whole.  It
puts one run per ``put_many`` (a durable put: the queue is opened with
``sync="always"``) and then records the run in the marker.  A crash during the
commit leaves the rows put so far in the queue (consumers may take them) and the
marker; the next commit into the same queue, or :func:`cleanup`, finishes the
job before anything else (so the job's rows stay in order and ahead of later
jobs).  A crash between a run's put and the marker's update puts that run again
on resumption: at most one run (:data:`RUN_ROWS` rows) of a job is delivered
twice, only after a crash during its commit.  The marker goes first, then the
parts: a staging directory without a marker is an uncommitted job.

Commits and cleanups into one queue take turns on the record lock
``<queue>.sink/_LOCK`` (the JVM's abort takes the same lock).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from engine.conventions import datetime_from_ms
from engine.errors import ConfigError, CorruptFileError, EngineError
from engine.fs import FileSystem, HeldLock, OpenMode, atomic_write, crashpoint, resolve, take_record_lock
from engine.queue import codec, naming
from engine.queue.queue import Queue
from engine.spark.sink import remove_tree

#: A staged file's run of PUT records ends after this many rows ...
RUN_ROWS = 1024
#: ... or once its records hold this many bytes (the row that crosses it included).
RUN_BYTES = 1 << 20
#: What the commit reads of a staged file at a time.
READ_CHUNK = 4 << 20
STAGE_SUFFIX = ".sink"
JOB_PREFIX = "job-"
MARKER = "_COMMIT.json"
#: ``{"streams": {name: last epoch put}}``: a streaming write's exactly-once record.
STREAMS = "_STREAMS.json"
LOCK = "_LOCK"
#: The header every staged file starts with: a writer file's.
STAGE_HEADER = codec.WRITER_MAGIC + codec.EMPTY_CHECK

Row = tuple[bytes, int | None]  # (data, expiry in ms since the epoch or None)


def staging_dir(directory: str, queue: str) -> str:
    """Where jobs writing into ``queue`` stage their rows."""
    return naming.join(directory, queue + STAGE_SUFFIX)


def encode_stage(rows: list[Row], add_time_ms: int) -> bytes:
    """A whole staged file of ``rows`` (the twin of the JVM's ``QueueStage``)."""
    out = [STAGE_HEADER]
    run: list[bytes] = []
    size = 0
    for xid, (data, expire) in enumerate(rows, 1):
        record = codec.encode_put(xid, add_time_ms, data, expire)
        run.append(record)
        size += len(record)
        if len(run) >= RUN_ROWS or size >= RUN_BYTES:
            out.append(_close_run(run))
            run, size = [], 0
    if run:
        out.append(_close_run(run))
    return b"".join(out)


def _close_run(run: list[bytes]) -> bytes:
    records = b"".join(run)
    return records + codec.encode_check(records)


def read_runs(fs: FileSystem, path: str) -> Iterator[list[Row]]:
    """The runs of a staged file, each verified by its CHECK; CorruptFileError
    (file and offset) on anything else (nothing of a damaged run is yielded).
    Reads :data:`READ_CHUNK` bytes at a time and keeps one run's bytes at most."""
    with fs.open(path, OpenMode.READ) as h:
        size = h.size()
        if h.read_at(0, len(STAGE_HEADER)) != STAGE_HEADER:
            raise CorruptFileError(path, 0, "a staged file of the engine-queue sink (writer magic, empty CHECK)")
        base = len(STAGE_HEADER)  # the file offset of buf[0], where the current run starts
        buf = b""
        pos = 0
        run: list[Row] = []
        while base + pos < size:
            try:
                record, end = codec.decode_record(buf, pos)
            except codec.Incomplete:
                record, end = None, -1
            except codec.BadRecord as exc:
                raise CorruptFileError(path, base + exc.offset, exc.expected, exc.found) from None
            if record is None and (end == -1 or pos == len(buf)):  # the record goes on past buf
                more = h.read_at(base + len(buf), READ_CHUNK)
                if not more:
                    raise CorruptFileError(path, base + pos, "a whole record", "the end of the file")
                buf += more
                continue
            if isinstance(record, codec.Put) and record.xid > 0:
                run.append((record.data, record.expire_time))
            elif isinstance(record, codec.Check) and run and codec.check_matches(record, buf[:pos]):
                yield run
                run, buf, base, end = [], buf[end:], base + end, 0
            else:
                raise CorruptFileError(path, base + pos, "a PUT record, or the CHECK of the run before it",
                                       type(record).__name__ if record is not None else "the end marker")
            pos = end
        if run or pos:
            raise CorruptFileError(path, base, "a CHECK after the last run", "records without one")


@dataclass
class Marker:
    """A committed job's progress: its parts in order and the rows already put."""

    queue: str
    parts: list[str]
    done: int
    #: A streaming write's name and micro-batch (epoch) id, recorded in
    #: :data:`STREAMS` once the job is put (None: a batch write).
    stream: str | None = None
    epoch: int | None = None

    def encode(self) -> bytes:
        return json.dumps({"version": 1, "queue": self.queue, "parts": self.parts, "done": self.done,
                           "stream": self.stream, "epoch": self.epoch}).encode()

    @classmethod
    def read(cls, fs: FileSystem, path: str) -> Marker:
        with fs.open(path, OpenMode.READ) as h:
            raw = h.read_all()
        try:
            doc = json.loads(raw.decode("utf-8"))
            epoch = doc.get("epoch")
            return cls(str(doc["queue"]), [str(p) for p in doc["parts"]], int(doc["done"]), doc.get("stream"),
                       None if epoch is None else int(epoch))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptFileError(path, 0, "a commit marker of the engine-queue sink", str(exc)) from None


def read_streams(fs: FileSystem, stage: str) -> dict[str, int]:
    """The last epoch put of each streaming write into the staging directory's queue."""
    path = naming.join(stage, STREAMS)
    if not fs.exists(path):
        return {}
    with fs.open(path, OpenMode.READ) as h:
        raw = h.read_all()
    try:
        return {str(k): int(v) for k, v in json.loads(raw.decode("utf-8"))["streams"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptFileError(path, 0, "the stream record of the engine-queue sink", str(exc)) from None


def _lock(fs: FileSystem, stage: str) -> HeldLock:
    """The staging directory's record lock (the JVM's ``SinkLock`` conflicts with it)."""
    return take_record_lock(fs, naming.join(stage, LOCK), wait=None, what="commit lock of the engine-queue sink")


def _jobs(fs: FileSystem, stage: str) -> list[str]:
    return sorted(n for n in fs.listdir(stage) if n.startswith(JOB_PREFIX)) if fs.isdir(stage) else []


def _publish(fs: FileSystem, q: Queue, job_dir: str, marker: Marker) -> int:
    """Put the rows of ``marker`` not yet put into ``q``, recording each run; then
    remove the job's staging directory (marker first).  Returns the rows put now."""
    put = 0
    position = 0
    marker_path = naming.join(job_dir, MARKER)
    for part in marker.parts:
        for run in read_runs(fs, naming.join(job_dir, part)):
            position += len(run)
            if position <= marker.done:
                continue  # put before a crash (runs are the unit of progress)
            q.put_many([(data, None if exp is None else datetime_from_ms(exp)) for data, exp in run])
            put += len(run)
            crashpoint("spark.queuesink.before-marker-update")
            marker.done = position
            atomic_write(fs, marker_path, marker.encode())
    if marker.stream is not None and marker.epoch is not None:
        stage = os.path.dirname(job_dir)
        streams = read_streams(fs, stage)
        streams[marker.stream] = max(marker.epoch, streams.get(marker.stream, -1))
        atomic_write(fs, naming.join(stage, STREAMS), json.dumps({"streams": streams}).encode())
    fs.unlink(marker_path)  # the job is in the queue: what is left is litter
    fs.fsync_dir(job_dir)
    crashpoint("spark.queuesink.before-job-removal")
    remove_tree(fs, job_dir)
    return put


def _committed(fs: FileSystem, stage: str) -> list[str]:
    """The job directories of ``stage`` whose commit has begun (a marker)."""
    return [job for job in _jobs(fs, stage) if fs.exists(naming.join(naming.join(stage, job), MARKER))]


def _finish(fs: FileSystem, q: Queue, stage: str, job: str) -> int:
    """:func:`_publish` of a committed job; a failure says that the job stays
    committed and how it is finished."""
    job_dir = naming.join(stage, job)
    try:
        return _publish(fs, q, job_dir, Marker.read(fs, naming.join(job_dir, MARKER)))
    except (EngineError, OSError) as exc:
        raise EngineError(
            f"{' '.join(str(exc).split())}; {job} is committed (its commit marker is written), so it stays: "
            f"the next commit into queue {q.name!r} or `engine spark cleanup {stage}` puts the rest of its rows"
        ) from exc


def _open(fs: FileSystem, directory: str, queue: str) -> Queue:
    """The commit's producer: durable puts, so the marker never runs ahead of them."""
    return Queue.open(directory, queue, fs=fs, sync="always")


def commit_job(directory: str, queue: str, job_id: str, parts: list[str], *, stream: str | None = None,
               epoch: int | None = None, fs: FileSystem | None = None) -> int:
    """Publish a job's staged parts into ``queue`` (in the order given); returns the
    rows put.  Committed jobs a crash interrupted are finished first.  The queue is
    opened and every part read and checked before the marker is written: a queue
    that cannot be opened, a damaged or missing part, or an item the queue would
    refuse, fails the commit with the queue untouched.  A streaming write's
    micro-batch (``stream``, ``epoch``) already put is not put again: its staged
    parts are removed (Spark re-runs a batch after a failure)."""
    fs = resolve(fs)
    naming.check_queue_name(queue)
    stage = staging_dir(directory, queue)
    job = JOB_PREFIX + job_id
    job_dir = naming.join(stage, job)
    if not fs.isdir(job_dir):
        if not parts:
            return 0  # a job of no task (an empty input without partitions): nothing to put
        raise ConfigError(f"{job_dir}: no such staged job of the engine-queue sink")
    with _lock(fs, stage), _open(fs, directory, queue) as q:
        for other in _committed(fs, stage):
            if other != job:
                _finish(fs, q, stage, other)
        marker_path = naming.join(job_dir, MARKER)
        if stream is not None and epoch is not None and read_streams(fs, stage).get(stream, -1) >= epoch:
            remove_tree(fs, job_dir)  # this micro-batch is in the queue already
            return 0
        if not fs.exists(marker_path):
            for part in parts:
                for run in read_runs(fs, naming.join(job_dir, part)):
                    big = next((len(d) for d, _ in run if len(d) > q.max_item_size), None)
                    if big is not None:
                        raise ConfigError(f"{part}: item of {big} bytes exceeds max_item_size {q.max_item_size}")
            crashpoint("spark.queuesink.before-marker")
            atomic_write(fs, marker_path, Marker(queue, list(parts), 0, stream, epoch).encode())
        # Failed task attempts' parts are not in the marker: removed with the job.
        return _finish(fs, q, stage, job)


def abort_job(directory: str, queue: str, job_id: str, *, fs: FileSystem | None = None) -> bool:
    """Remove a job's staged rows unless its commit has begun (a marker: the job is
    committed and the next commit or :func:`cleanup` finishes it).  True if removed."""
    fs = resolve(fs)
    stage = staging_dir(directory, queue)
    job_dir = naming.join(stage, JOB_PREFIX + job_id)
    if not fs.isdir(stage):
        return False
    with _lock(fs, stage):
        if not fs.isdir(job_dir) or fs.exists(naming.join(job_dir, MARKER)):
            return False
        remove_tree(fs, job_dir)
        return True


def cleanup(stage: str, *, fs: FileSystem | None = None) -> list[str]:
    """Settle a staging directory ``DIR/<queue>.sink``: finish the committed jobs a
    crash interrupted (into the queue), remove the uncommitted ones; returns the
    job directories, ``"put <job>"`` / ``"removed <job>"``.  Run it when no job is
    writing into the queue (a running job's staged parts have no marker yet)."""
    fs = resolve(fs)
    directory, name = os.path.split(os.path.abspath(stage))
    if not name.endswith(STAGE_SUFFIX) or not fs.isdir(stage):
        raise ConfigError(f"{stage}: not a staging directory of the engine-queue sink (DIR/<queue>{STAGE_SUFFIX})")
    queue = name[: -len(STAGE_SUFFIX)]
    with _lock(fs, stage):
        out = []
        committed = _committed(fs, stage)
        if committed:
            with _open(fs, directory, queue) as q:
                for job in committed:
                    _finish(fs, q, stage, job)
                    out.append(f"put {job}")
        for job in _jobs(fs, stage):
            remove_tree(fs, naming.join(stage, job))
            out.append(f"removed {job}")
    return out


def check_target(directory: str, queue: str, *, fs: FileSystem | None = None) -> None:
    """ConfigError unless ``queue`` is a valid queue name and ``directory`` can hold
    it (missing, or a directory): the JVM asks before any task stages a row."""
    fs = resolve(fs)
    naming.check_queue_name(queue)
    if fs.exists(directory) and not fs.isdir(directory):
        raise ConfigError(f"{directory}: not a directory; the engine-queue sink writes a queue in a directory")


def main(argv: list[str] | None = None) -> int:
    """The JVM driver's half of the protocol: ``check DIR QUEUE``, ``commit DIR QUEUE
    JOB PART... [--stream NAME --epoch N]`` (prints the rows put) and ``abort DIR
    QUEUE JOB``.  Errors are one line on stderr, exit status 1."""
    p = argparse.ArgumentParser(prog="python -m engine.spark.queuesink")
    p.add_argument("action", choices=("check", "commit", "abort"))
    p.add_argument("directory")
    p.add_argument("queue")
    p.add_argument("job", nargs="?")
    p.add_argument("parts", nargs="*")
    p.add_argument("--stream")
    p.add_argument("--epoch", type=int)
    args = p.parse_args(argv)
    try:
        if args.action == "check":
            check_target(args.directory, args.queue)
            print("ok")
        elif args.action == "commit":
            print(commit_job(args.directory, args.queue, args.job, args.parts, stream=args.stream, epoch=args.epoch))
        else:
            print("removed" if abort_job(args.directory, args.queue, args.job) else "kept")
    except (EngineError, OSError) as exc:
        message = " ".join(str(exc).split())
        print(f"engine-queue sink: {type(exc).__name__}: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
