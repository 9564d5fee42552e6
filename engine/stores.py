"""Finding the stores under a directory (``engine pipeline``, ``engine metrics``,
``engine top``, ``engine dashboard``).

Walks the tree (not following symlinks, at most :data:`MAX_DEPTH` levels) and
classifies what it finds by the files' own markers: log segments
(``<20 digits>.log``) or a sink manifest, queue journals (the libkestrel writer
magic), journald files (``journald``), event journals (``meta`` + ``data``),
key-value stores (a page store whose page 1 is the ``ENGKVDB1`` meta page) and
page stores (``ENGPAGES``).  Reads only the first bytes of files: never opens a
store, takes no lock and writes nothing.

A directory or file that cannot be read (permission denied, say) is listed in
:attr:`Found.errors` and the walk goes on: one unreadable corner does not hide
the rest.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from engine.errors import ConfigError
from engine.fs import FileSystem, resolve
from engine.kv.handler import is_kv_store
from engine.spark.manifest import MANIFEST as SINK_MANIFEST

MAX_DEPTH = 6
QUEUE_WRITER_MAGIC = bytes([0x27, 0x64, 0x26, 0x03])
JOURNALD_MAGIC = b"journald"
PAGES_MAGIC = b"ENGPAGES"
EVENTS_MAGIC = b"AKFD"
#: An append log's segment file.
SEGMENT_RE = re.compile(r"^(\d{20})\.log$")

#: The kinds of store, in the order reports list them.
KINDS = ("queue", "log", "streams", "events", "pages", "kv")


@dataclass
class Found:
    """Stores found under a directory, by kind (paths), and what could not be read."""

    logs: list[str] = field(default_factory=list)  # log directories or sink datasets
    queues: list[str] = field(default_factory=list)  # directories holding queue files
    streams: list[str] = field(default_factory=list)  # journald files
    events: list[str] = field(default_factory=list)  # event journal directories
    pages: list[str] = field(default_factory=list)  # page store files (not key-value stores)
    kv: list[str] = field(default_factory=list)  # key-value store files
    errors: list[str] = field(default_factory=list)  # "path: problem" for what could not be read

    @property
    def total(self) -> int:
        return len(self.logs) + len(self.queues) + len(self.streams) + len(self.events) + len(self.pages) + len(self.kv)

    def by_kind(self) -> dict[str, list[str]]:
        """``{kind: paths}`` for the :data:`KINDS`."""
        return {"queue": self.queues, "log": self.logs, "streams": self.streams, "events": self.events,
                "pages": self.pages, "kv": self.kv}


def _head(fs: FileSystem, path: str, n: int = 16) -> bytes:
    with fs.open(path) as h:
        return h.read_at(0, n)


def _problem(path: str, exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    return f"{path}: {reason[:1].lower()}{reason[1:]}"


def discover(root: str, fs: FileSystem | None = None) -> Found:
    """Every store under ``root`` (ConfigError if ``root`` is not a directory)."""
    fs = resolve(fs)
    found = Found()

    def walk(path: str, depth: int) -> None:
        try:
            names = sorted(fs.listdir(path))
        except OSError as exc:
            found.errors.append(_problem(path, exc))
            return
        if SINK_MANIFEST in names or any(SEGMENT_RE.match(n) for n in names):
            found.logs.append(path)
            return  # a log directory (or sink dataset) holds nothing else of interest
        if "meta" in names and "data" in names:
            try:
                if _head(fs, posixpath.join(path, "data"), 4) == EVENTS_MAGIC:
                    found.events.append(path)
                    return
            except OSError as exc:
                found.errors.append(_problem(path, exc))
                return
        has_queue = False
        for name in names:
            full = posixpath.join(path, name)
            if fs.isdir(full):
                if depth < MAX_DEPTH and not name.startswith(("_", ".")):
                    walk(full, depth + 1)
                continue
            try:
                head = _head(fs, full)
                if head[:4] == QUEUE_WRITER_MAGIC and name.rpartition(".")[2].isdigit():
                    has_queue = True
                elif head[:8] == JOURNALD_MAGIC:
                    found.streams.append(full)
                elif head[:8] == PAGES_MAGIC:
                    (found.kv if is_kv_store(fs, full, head) else found.pages).append(full)
            except OSError as exc:
                found.errors.append(_problem(full, exc))
        if has_queue:
            found.queues.append(path)

    if not fs.isdir(root):
        raise ConfigError(f"{root}: not a directory")
    walk(root.rstrip("/") or "/", 0)
    return found


def store_files(fs: FileSystem, path: str, name: str | None = None) -> list[str]:
    """The files that make up the store at ``path``: every file under a store
    directory (an append log, an event journal), or, for a store file (a page
    store, a key-value store, a stream journal) or a queue ``name`` in a queue
    directory, the files named after it (``store.db``, ``store.db-journal``,
    ``store.db-sums``, ``s.jnl.lock``; ``orders.12``, ``orders.read.audit``)."""
    if fs.isdir(path) and name is None:
        out = []
        for entry in sorted(fs.listdir(path)):
            full = posixpath.join(path, entry)
            out.extend(store_files(fs, full) if fs.isdir(full) else [full])
        return out
    directory, base = (path, name) if name is not None else posixpath.split(path)
    return [posixpath.join(directory or ".", entry) for entry in sorted(fs.listdir(directory or "."))
            if entry == base or (entry.startswith(base) and entry[len(base):][:1] in ("-", "."))]


def disk_usage(fs: FileSystem, path: str, name: str | None = None) -> tuple[int, int]:
    """``(bytes, files)`` on disk of the store at ``path`` (see :func:`store_files`);
    a file that vanishes meanwhile (a rotated journal) counts for nothing."""
    total = count = 0
    for file in store_files(fs, path, name):
        try:
            total += fs.file_size(file)
        except FileNotFoundError:
            continue
        count += 1
    return total, count
