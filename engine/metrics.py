"""Metrics in Prometheus' exposition format, through ``prometheus_client``.

Two sources, one registry:

* :class:`DirectoryCollector`: every store under a directory, from its files
  alone, through the stores' public read-only faces (``engine.stores.discover``,
  the queue's ``diagnose.queue_stats``, ``LogReader.stats()``,
  ``EventJournal.open_reader(...).stats()``, ``StreamJournal.open_reader(...).stats()``,
  the page store's ``diagnose.file_stats``, ``KV.open_reader().stats()``): no lock is
  taken, nothing is written, a live writer is not disturbed.  ``engine metrics
  DIR --port N`` serves it; :func:`scan` is the same snapshot as data, for
  ``engine top`` and ``engine dashboard``.
* :class:`LiveCollector`: objects of this process, watched through their own
  ``stats()``: queues (open reads, and the counters their ``stats()`` carries),
  servers (connections, requests by outcome, errors), any store (its recovery
  report's repairs).  ``engine streams serve --metrics-port N`` serves its server
  and journal this way.

Both add this process's fsync latency histogram (``engine_fsync_seconds``, per
directory: :mod:`engine.fs.timing`).  :func:`serve_metrics` starts the HTTP
endpoint (``/metrics``), on loopback unless told otherwise.

Metric names (labels in braces; ``store`` is the store's path relative to the
directory served, ``kind`` one of queue, log, streams, events, pages, kv):

=========================================  ====================================================
``engine_store_disk_bytes``                bytes the store's files take {store, kind}
``engine_store_files``                     files that make up the store {store, kind}
``engine_store_readable``                  1 if the store's files could be read, else 0
``engine_store_records``                   items put (queue), records (log), live events
                                           (events), streams (streams), pages (pages), keys (kv)
``engine_store_commits_total``             commits so far (kv: its txid; events: events written)
``engine_store_pending_repairs``           what the next writable open repairs (pages: committed
                                           transactions not yet checkpointed)
``engine_queue_backlog_items``             items a reader has not confirmed {store, queue, reader}
``engine_queue_backlog_bytes``             their payload bytes
``engine_queue_oldest_item_age_seconds``   how long its oldest unconfirmed item has waited
``engine_queue_confirmed_total``           items the reader confirmed (ids up to its head and
                                           done out of order)
``engine_queue_puts_total``                items put into the queue {store, queue}
``engine_queue_open_reads``                items read, not yet confirmed (live queues only)
``engine_queue_<counter>_total``           ``gets``, ``confirms``, ``aborts`` of each reader open
                                           in the watched process; ``engine_queue_consumers``
``engine_server_connections``              connections open now {server}
``engine_server_requests_total``           requests by outcome {server, outcome}
``engine_server_errors_total``             requests that failed {server, error}
``engine_store_recovery_repairs``          repairs of the last open {store, action}
``engine_fsync_seconds``                   fsync / O_DSYNC write latency {directory} (histogram)
=========================================  ====================================================
"""

from __future__ import annotations

import os
import posixpath
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.conventions import naming_the_host
from engine.fs import FileSystem, as_path, resolve, timing
from engine.stores import KINDS, discover, disk_usage

#: Where the HTTP endpoints listen unless told otherwise.
LOOPBACK = "127.0.0.1"


@dataclass
class ReaderFigures:
    """One queue reader, from its files."""

    queue: str
    reader: str
    backlog_items: int
    backlog_bytes: int
    oldest_age_s: float | None
    confirmed: int
    open_reads: int | None = None


@dataclass
class StoreFigures:
    """One store, from its files: ``name`` is its path relative to the directory
    scanned (a queue: ``<directory>/<queue>``); ``error`` says why its figures are
    missing (unreadable, damaged) when they are."""

    kind: str
    name: str
    path: str
    disk_bytes: int = 0
    files: int = 0
    records: int | None = None
    commits: int | None = None
    pending_repairs: int | None = None
    readers: list[ReaderFigures] = field(default_factory=list)
    error: str | None = None


@dataclass
class Snapshot:
    """Every store under ``root`` at ``time`` (seconds since the epoch), and the
    paths that could not be read."""

    root: str
    time: float
    stores: list[StoreFigures]
    errors: list[str]

    def as_json(self) -> dict[str, Any]:
        """For ``--json``: snake_case keys, raw numbers, ``time_ns``."""
        return {"root": self.root, "time_ns": int(self.time * 1e9), "errors": list(self.errors),
                "stores": [asdict(s) for s in self.stores]}


def _relative(root: str, path: str) -> str:
    rel = os.path.relpath(path, root)
    return posixpath.basename(path.rstrip("/")) if rel == "." else rel


def _queue_figures(fs: FileSystem, root: str, directory: str) -> Iterator[StoreFigures]:
    from engine.queue.diagnose import queue_names, queue_stats

    for queue in queue_names(fs, directory):
        name = posixpath.join(_relative(root, directory), queue)
        figures = StoreFigures("queue", name, directory)
        try:
            figures.disk_bytes, figures.files = disk_usage(fs, directory, queue)
            stats = queue_stats(fs, directory, queue)
            figures.records = int(stats["tail_id"])  # type: ignore[call-overload]
            for r in stats["readers"]:  # type: ignore[attr-defined]
                figures.readers.append(ReaderFigures(
                    queue=queue, reader=r["reader"], backlog_items=r["items"], backlog_bytes=r["backlog_bytes"],
                    oldest_age_s=r["oldest_age_s"], confirmed=r["head"] + r["done_out_of_order"]))
        except Exception as exc:  # a damaged or vanished queue: said, and the others still counted
            figures.error = _problem(exc)
        yield figures


def _problem(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        reason = exc.strerror[:1].lower() + exc.strerror[1:]
        return f"{exc.filename}: {reason}" if exc.filename else reason
    return f"{type(exc).__name__}: {exc}"


def _whole(value: object) -> int:
    """A count from a ``stats()`` dict (typed ``object`` there)."""
    if not isinstance(value, int):
        raise TypeError(f"expected a count, got {value!r}")
    return value


def _file_figures(fs: FileSystem, kind: str, path: str) -> tuple[int | None, int | None, int | None]:
    """``(records, commits, pending repairs)`` of a store other than a queue."""
    if kind == "log":
        from engine.applog import AppendLog

        with AppendLog.open_reader(path, fs=fs) as reader:
            return int(reader.stats()["records"]), None, None
    if kind == "events":
        from engine.events import EventJournal

        with EventJournal.open_reader(path, fs=fs) as journal:
            stats = journal.stats()
            return int(stats["live_events"]), int(stats["events_ever_written"]), None
    if kind == "streams":
        from engine.streams import StreamJournal

        with StreamJournal.open_reader(path, fs=fs) as journal:
            counts = journal.stats()
        streams = sum(_whole(counts[key]) for key in ("streams_complete", "streams_aborted", "streams_open"))
        return streams, None, None
    if kind == "pages":
        from engine.pages import diagnose

        figures = diagnose.file_stats(fs, path)
        return _whole(figures.get("pages") or 0), None, _whole(figures.get("pending_transactions") or 0)
    if kind == "kv":
        from engine.kv import KV

        with KV.open_reader(path, fs=fs) as kv:
            stats = kv.stats()
            keys, txid = stats["keys"], stats["txid"]
            assert isinstance(keys, int) and isinstance(txid, int)
            return keys, txid, None
    raise AssertionError(kind)


def scan(root: str | os.PathLike[str], fs: FileSystem | None = None, clock: Callable[[], float] = time.time,
         ) -> Snapshot:
    """Every store under ``root``, from its files (read-only; see the module docstring)."""
    root = os.path.abspath(as_path(root, "root"))
    fs = resolve(fs)
    found = discover(root, fs)
    stores: list[StoreFigures] = []
    for kind, paths in found.by_kind().items():
        for path in paths:
            if kind == "queue":
                stores.extend(_queue_figures(fs, root, path))
                continue
            figures = StoreFigures(kind, _relative(root, path), path)
            try:
                figures.disk_bytes, figures.files = disk_usage(fs, path)
                figures.records, figures.commits, figures.pending_repairs = _file_figures(fs, kind, path)
            except Exception as exc:  # a damaged or vanished store: said, and the others still counted
                figures.error = _problem(exc)
            stores.append(figures)
    stores.sort(key=lambda s: (KINDS.index(s.kind), s.name))
    return Snapshot(root, clock(), stores, list(found.errors))


def _fsync_family(directories: Iterable[str] | None = None, root: str | None = None) -> HistogramMetricFamily:
    family = HistogramMetricFamily("engine_fsync_seconds", "fsync and O_DSYNC write latency of this process",
                                   labels=["directory"])
    for directory, hist in sorted(timing.snapshot().items()):
        if directories is not None and directory not in directories:
            continue
        cumulative, buckets = 0, []
        for bound, count in zip([*map(str, timing.BUCKETS), "+Inf"], hist.buckets, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        label = _relative(root, directory) if root and directory.startswith(root) else directory
        family.add_metric([label], buckets, hist.total_seconds)
    return family


class DirectoryCollector(Collector):
    """The stores under a directory, read from their files at every scrape."""

    def __init__(self, root: str | os.PathLike[str], fs: FileSystem | None = None) -> None:
        self.root = os.path.abspath(as_path(root, "root"))
        self.fs = resolve(fs)

    def collect(self) -> Iterator[Metric]:
        snap = scan(self.root, self.fs)
        yield from snapshot_families(snap)
        yield _fsync_family(root=self.root)


def snapshot_families(snap: Snapshot) -> Iterator[Metric]:
    """The metric families of a :class:`Snapshot`."""
    store_labels = ["store", "kind"]

    def gauge(name: str, doc: str, labels: list[str] = store_labels) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=labels)

    disk = gauge("engine_store_disk_bytes", "bytes the store's files take on disk")
    files = gauge("engine_store_files", "files that make up the store")
    readable = gauge("engine_store_readable", "1 if the store's files could be read, else 0")
    records = gauge("engine_store_records", "items put, records, live events, streams, pages or keys")
    commits = CounterMetricFamily("engine_store_commits", "commits so far", labels=store_labels)
    pending = gauge("engine_store_pending_repairs", "what the next writable open repairs")
    reader_labels = ["store", "queue", "reader"]
    backlog = gauge("engine_queue_backlog_items", "items the reader has not confirmed", reader_labels)
    backlog_bytes = gauge("engine_queue_backlog_bytes", "payload bytes of the reader's backlog", reader_labels)
    age = gauge("engine_queue_oldest_item_age_seconds", "how long the oldest unconfirmed item has waited",
                reader_labels)
    confirmed = CounterMetricFamily("engine_queue_confirmed", "items the reader confirmed", labels=reader_labels)
    puts = CounterMetricFamily("engine_queue_puts", "items put into the queue", labels=["store", "queue"])
    for s in snap.stores:
        key = [s.name, s.kind]
        disk.add_metric(key, s.disk_bytes)
        files.add_metric(key, s.files)
        readable.add_metric(key, 0 if s.error else 1)
        if s.records is not None:
            records.add_metric(key, s.records)
        if s.commits is not None:
            commits.add_metric(key, s.commits)
        if s.pending_repairs is not None:
            pending.add_metric(key, s.pending_repairs)
        if s.kind == "queue" and s.records is not None:
            puts.add_metric([s.name, posixpath.basename(s.name)], s.records)
        for r in s.readers:
            labels = [s.name, r.queue, r.reader]
            backlog.add_metric(labels, r.backlog_items)
            backlog_bytes.add_metric(labels, r.backlog_bytes)
            if r.oldest_age_s is not None:
                age.add_metric(labels, r.oldest_age_s)
            confirmed.add_metric(labels, r.confirmed)
    yield from (disk, files, readable, records, commits, pending, backlog, backlog_bytes, age, confirmed, puts)


class _HasStats(Protocol):
    def stats(self) -> dict[str, Any]: ...


#: A server's ``stats()`` keys: (key, outcome or error label, which family).
_SERVER_OUTCOMES = {"committed": "requests", "aborted": "requests", "rejected": "errors", "refused": "errors",
                    "timed_out": "errors", "requests": "requests", "errors": "errors"}


class LiveCollector(Collector):
    """Objects of this process, read through their ``stats()`` at every scrape;
    an object collected or closed meanwhile drops out (weak references)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, weakref.ref[Any]] = {}
        self._servers: dict[str, weakref.ref[Any]] = {}
        self._stores: dict[str, weakref.ref[Any]] = {}

    def watch_queue(self, name: str, queue: Any) -> None:
        """Export ``queue.stats()`` (an :class:`engine.Queue`) under ``store=name``."""
        with self._lock:
            self._queues[name] = weakref.ref(queue)

    def watch_server(self, name: str, server: _HasStats) -> None:
        """Export ``server.stats()``: ``connections`` (a gauge) and its counters,
        as requests by outcome (``committed``, ``aborted``, ``requests``) and errors
        (``rejected``, ``refused``, ``timed_out``, ``errors``)."""
        with self._lock:
            self._servers[name] = weakref.ref(server)

    def watch_store(self, name: str, store: Any) -> None:
        """Export ``store.recovery`` (its last open's repairs by action)."""
        with self._lock:
            self._stores[name] = weakref.ref(store)

    def _alive(self, table: dict[str, weakref.ref[Any]]) -> list[tuple[str, Any]]:
        with self._lock:
            pairs = [(name, ref()) for name, ref in table.items()]
        return [(name, obj) for name, obj in pairs if obj is not None and not getattr(obj, "closed", False)]

    def collect(self) -> Iterator[Metric]:
        yield from self._queue_families()
        yield from self._server_families()
        repairs = GaugeMetricFamily("engine_store_recovery_repairs", "repairs of the store's last open",
                                    labels=["store", "action"])
        for name, store in self._alive(self._stores):
            counts: dict[str, int] = {}
            for action in getattr(store.recovery, "actions", []):
                kind = str(getattr(action, "kind", type(action).__name__))
                counts[kind] = counts.get(kind, 0) + 1
            for action_kind, count in sorted(counts.items()):
                repairs.add_metric([name, action_kind], count)
        yield repairs
        yield _fsync_family()

    def _queue_families(self) -> Iterator[Metric]:
        labels = ["store", "queue", "reader"]
        open_reads = GaugeMetricFamily("engine_queue_open_reads", "items read, not yet confirmed", labels=labels)
        counters = {key: CounterMetricFamily(f"engine_queue_{key}", f"{key} of this process's consumer so far",
                                             labels=labels)
                    for key in ("gets", "confirms", "aborts")}
        consumers = GaugeMetricFamily("engine_queue_consumers", "consumers of the reader name now", labels=labels)
        for name, queue in self._alive(self._queues):
            try:
                stats = queue.stats()
            except Exception:  # closed between the check and the call: gone from this scrape
                continue
            qname = str(stats.get("queue", name))
            for r in stats.get("readers", []):
                key_labels = [name, qname, r["reader"]]
                if r.get("open_reads") is not None:
                    open_reads.add_metric(key_labels, r["open_reads"])
                for key, family in counters.items():
                    if isinstance(r.get(key), int):
                        family.add_metric(key_labels, r[key])
                if isinstance(r.get("consumers"), int):
                    consumers.add_metric(key_labels, r["consumers"])
        yield open_reads
        yield from counters.values()
        yield consumers

    def _server_families(self) -> Iterator[Metric]:
        connections = GaugeMetricFamily("engine_server_connections", "connections open now", labels=["server"])
        requests = CounterMetricFamily("engine_server_requests", "requests by outcome", labels=["server", "outcome"])
        errors = CounterMetricFamily("engine_server_errors", "requests that failed", labels=["server", "error"])
        for name, server in self._alive(self._servers):
            stats = server.stats()
            if isinstance(stats.get("connections"), int):
                connections.add_metric([name], stats["connections"])
            for key, which in _SERVER_OUTCOMES.items():
                value = stats.get(key)
                if isinstance(value, int):
                    (requests if which == "requests" else errors).add_metric([name, key], value)
        yield from (connections, requests, errors)


class MetricsServer:
    """``/metrics`` over HTTP for ``registry`` (:func:`serve_metrics`); :meth:`stop` ends it."""

    def __init__(self, registry: CollectorRegistry, port: int, host: str) -> None:
        with naming_the_host(host):
            self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        self.host = host
        self.port: int = self._httpd.server_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)


def serve_metrics(*collectors: Collector, port: int, host: str = LOOPBACK) -> MetricsServer:
    """Serve ``collectors`` at ``http://host:port/metrics`` in a background thread
    (``port`` 0: any free port, see ``.port``).  Loopback unless ``host`` says
    otherwise: metrics name the stores and their paths."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    return MetricsServer(registry, port, host)


__all__ = [
    "LOOPBACK",
    "DirectoryCollector",
    "LiveCollector",
    "MetricsServer",
    "ReaderFigures",
    "Snapshot",
    "StoreFigures",
    "scan",
    "serve_metrics",
    "snapshot_families",
]
