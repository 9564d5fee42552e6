"""Every way a store's data can be read, per store: the damage attack reads through each.

An independent adversarial run found damaged files that one read path reported and
another read back wrong (or died on with a traceback).  So the damage attack does
not read a damaged copy only through the adapter's ``snapshot``; it reads it through
every path listed here:

* in-process read paths (:data:`READ_PATHS`): the writer's open, the read-only
  readers (``Queue.open_reader``, ``PageStore.open_reader``, ``AppendLog.open_reader``,
  ``EventJournal.open_reader``, ``read_streams``) and the Spark sources'
  partition readers called directly, without a Spark session (cheap: no JVM);
* the command line (:data:`CLI_COMMANDS`): ``engine inspect``, ``engine verify``
  and each store's read-only commands, run as processes of their own.

Each path returns something comparable with ``==`` (or raises); the damage attack
compares it with what the same path returned for the clean copy.

It also lists, per store, which files a checksum covers (:data:`COVERAGE`): damage to
a covered byte that reads back different without an error is silent wrong data, a
violation; damage to a byte no checksum covers is "undetectable by the format",
counted and documented, not a violation.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.fs import FileSystem

#: A read path: (file system, store root) -> everything it read, comparable with ``==``.
ReadPath = Callable[[FileSystem, str], Any]


def _spark_rows(source: str, options: dict[str, str]) -> list[tuple[Any, ...]]:
    """Every row a Spark source's partition reader yields, without a Spark session.

    ``source`` is ``module:ReaderClass:SCHEMA`` inside ``engine.spark``.  The rows
    are compared as tuples; the arrival time columns of the queue source are data
    written by the store, so they compare equal on an undamaged copy.
    """
    import importlib

    module_name, cls_name, schema_name = source.split(":")
    module = importlib.import_module(f"engine.spark.{module_name}")
    schemas = importlib.import_module("engine.spark.schemas")
    schema = getattr(module, schema_name, None) or getattr(schemas, schema_name)
    reader = getattr(module, cls_name)(options, schema)
    rows: list[tuple[Any, ...]] = []
    for part in reader.partitions():
        for batch in reader.read(part):
            rows.extend(tuple(r.values()) for r in batch.to_pylist())
    return rows


# -- queue -----------------------------------------------------------------------------


def _queue_writer(fs: FileSystem, root: str) -> Any:
    from stress.stores.queue import read_queue

    return read_queue(fs, root)


def _queue_remote(fs: FileSystem, root: str) -> Any:
    """The default reader as a process that is not the writer sees it (``open_reader``)."""
    from engine.queue import Queue
    from stress.stores.queue import NAME

    reader = Queue.open_reader(root, NAME, "", fs=fs)
    out = []
    try:
        while True:
            item = reader.get(timeout=0)
            if item is None:
                break
            out.append((item.id, item.data))
    finally:
        reader.close(checkpoint_first=False)
    return out


# -- pages -------------------------------------------------------------------------------


def _pages_writer(fs: FileSystem, root: str) -> Any:
    from stress.stores.pages import read_store

    return read_store(fs, root)


def _pages_reader(fs: FileSystem, root: str) -> Any:
    from stress.stores.pages import read_store

    return read_store(fs, root, readonly=True)


# -- streams -----------------------------------------------------------------------------


def _streams_reader(fs: FileSystem, root: str) -> Any:
    from engine.streams import StreamJournal

    with StreamJournal.open_reader(root + "/journal", fs=fs) as reader:
        return [(s.number, s.ident, s.start_offset, s.data, s.status) for s in reader.streams()]


# -- applog ------------------------------------------------------------------------------


def _applog_writer(fs: FileSystem, root: str) -> Any:
    from stress.stores.applog import read_log

    return read_log(fs, root)


def _applog_reader(fs: FileSystem, root: str) -> Any:
    from engine.applog import AppendLog

    reader = AppendLog.open_reader(root, fs=fs)
    try:
        first, nxt = reader.first_index, reader.next_index
        return first, nxt, [(r.index, r.time_ns, r.flags, r.data) for r in reader.scan(first)]
    finally:
        reader.close()


# -- events ------------------------------------------------------------------------------


def _events_snapshot(journal: Any) -> Any:
    """Every id's (lowest, highest, events) after a full verify; closes ``journal``."""
    try:
        journal.verify()
        return {
            pid: (
                journal.lowest_sequence_nr(pid),
                journal.highest_sequence_nr(pid),
                [(e.sequence_nr, e.payload) for e in journal.replay(pid)],
            )
            for pid in journal.persistence_ids()
        }
    finally:
        journal.close()


def _events_reader(fs: FileSystem, root: str) -> Any:
    from engine.events import EventJournal

    return _events_snapshot(EventJournal.open_reader(root, fs=fs))


def _events_writer(fs: FileSystem, root: str) -> Any:
    from engine.events import EventJournal

    return _events_snapshot(EventJournal.open(root, sync="always", fs=fs))


# -- kv ------------------------------------------------------------------------------------


def _kv_writer(fs: FileSystem, root: str) -> Any:
    from stress.stores.kv import read_store

    return read_store(fs, root)


def _kv_reader(fs: FileSystem, root: str) -> Any:
    from stress.stores.kv import read_store

    return read_store(fs, root, readonly=True)


#: The spark extra's packages the Spark sources' partition readers import; without
#: them (``pip install -e '.[test]'`` only) the Spark read paths are left out of
#: :data:`READ_PATHS` (``tests/stress`` says so in a skipped test, with this reason).
NO_SPARK = ", ".join(n for n in ("pyarrow", "pyspark") if importlib.util.find_spec(n) is None)


def _spark(source: str, sub: str = "") -> dict[str, ReadPath]:
    """The Spark source's read path, named ``spark <ReaderClass>``, or none
    without the spark extra."""

    def read(fs: FileSystem, root: str) -> Any:
        return _spark_rows(source, {"path": root + sub})

    return {} if NO_SPARK else {f"spark {source.split(':')[1]}": read}


#: store -> read path name -> function.  Read-only paths first: a writer's open may
#: repair a damaged copy (each path gets a fresh copy anyway).
READ_PATHS: dict[str, dict[str, ReadPath]] = {
    "queue": {
        "Queue.open_reader": _queue_remote,
        "Queue.open": _queue_writer,
        **_spark("queuesource:QueueReader:QUEUE_SCHEMA"),
    },
    "pages": {
        "PageStore.open_reader": _pages_reader,
        "PageStore.open": _pages_writer,
        **_spark("pagesource:PagesReader:PAGES_SCHEMA", "/store.db"),
    },
    "streams": {
        "read_streams": _streams_reader,
        **_spark("streamsource:StreamsReader:STREAMS_SCHEMA", "/journal"),
    },
    "applog": {
        "LogReader": _applog_reader,
        "AppendLog.open": _applog_writer,
        **_spark("logsource:LogReader:LOG_SCHEMA"),
    },
    "events": {
        "EventJournal.open_reader": _events_reader,
        "EventJournal.open": _events_writer,
        **_spark("eventsource:EventsReader:EVENTS_SCHEMA"),
    },
    "kv": {
        "KV.open (read-only)": _kv_reader,
        "KV.open": _kv_writer,
        **_spark("kvsource:KVSourceReader:KV_SCHEMA", "/store.kv"),
    },
}

#: store -> CLI commands (argv after ``engine``; ``{root}`` is the store directory,
#: ``{file}`` the damaged file).  Only commands that do not change the store.
CLI_COMMANDS: dict[str, list[list[str]]] = {
    "queue": [
        ["inspect", "{root}"],
        ["inspect", "{file}"],
        ["verify", "{root}"],
        ["queue", "stats", "{root}", "jobs"],
        ["queue", "dump", "{root}", "jobs"],
        ["queue", "dump", "{file}"],
    ],
    "pages": [
        ["inspect", "{root}/store.db"],
        ["verify", "{root}/store.db"],
        ["pages", "stats", "{root}/store.db"],
        ["pages", "dump", "{root}/store.db"],
        ["pages", "journal", "{root}/store.db"],
    ],
    "streams": [
        ["inspect", "{root}/journal"],
        ["verify", "{root}/journal"],
        ["streams", "dump", "{root}/journal"],
    ],
    "applog": [
        ["inspect", "{root}"],
        ["verify", "{root}"],
        ["log", "stats", "{root}"],
        ["log", "tail", "-n", "100000", "{root}"],
        ["log", "between", "{root}", "0", f"{2**62}ns"],  # past every record (a plain number is seconds)
    ],
    "events": [
        ["inspect", "{root}"],
        ["verify", "{root}"],
        ["events", "ids", "{root}"],
        ["events", "stats", "{root}"],
        ["events", "replay", "{root}", "alpha"],
        ["events", "replay", "{root}", "beta"],
    ],
    "kv": [
        ["inspect", "{root}/store.kv"],
        ["verify", "{root}/store.kv"],
        ["kv", "stats", "{root}/store.kv"],
        ["kv", "scan", "{root}/store.kv"],
    ],
}


@dataclass(frozen=True)
class Coverage:
    """Which files of a store a checksum covers, and why the others are not."""

    covered: tuple[str, ...]  # regexes over :func:`stress.attack_damage.file_kind` names
    uncovered_why: dict[str, str]

    def covers(self, kind_name: str) -> bool:
        return any(re.fullmatch(p, kind_name) for p in self.covered)


#: store -> coverage.  Lock files are empty and never damaged.
COVERAGE: dict[str, Coverage] = {
    # Writer files: CHECK records; reader checkpoints this engine writes carry CHECKs
    # too (files written by libkestrel itself have none: not what this suite writes).
    "queue": Coverage(covered=(r"jobs\.N", r"jobs\.read\..*"), uncovered_why={}),
    "pages": Coverage(covered=(r"store\.db", r"store\.db-journal", r"store\.db-sums"), uncovered_why={}),
    "streams": Coverage(covered=(r"journal",), uncovered_why={}),
    "applog": Coverage(
        covered=(r"N\.log", r"N\.idx", r"N\.crc"),
        uncovered_why={
            "log-start-index": "a decimal number in a text file, written atomically, no checksum: a changed "
            "digit or a cut-off number moves first_index",
        },
    ),
    "events": Coverage(covered=(r"data", r"meta", r"data\.crc", r"meta\.crc"), uncovered_why={}),
    # B+trees in a page store: the page store's per-page sums and journal CRCs.
    "kv": Coverage(covered=(r"store\.kv", r"store\.kv-journal", r"store\.kv-sums"), uncovered_why={}),
}


def coverage(store: str) -> Coverage:
    """The coverage of ``store`` (nothing covered for a store not listed, such as the toys)."""
    return COVERAGE.get(store, Coverage((), {}))
