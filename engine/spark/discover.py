"""Finding the stores under a data directory (for ``engine pipeline``).

Walks the tree (not following symlinks, at most :data:`MAX_DEPTH` levels) and
classifies what it finds by the files' own markers: log segments
(``<20 digits>.log``) or a sink manifest, queue journals (the libkestrel writer
magic), journald files (``journald``), event journals (``meta`` + ``data``) and
page stores (``ENGPAGES``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.fs import FileSystem, resolve
from engine.spark import logfiles

MAX_DEPTH = 6
QUEUE_WRITER_MAGIC = bytes([0x27, 0x64, 0x26, 0x03])
JOURNALD_MAGIC = b"journald"
PAGES_MAGIC = b"ENGPAGES"


@dataclass
class Found:
    """Stores found under a directory, by kind (paths)."""

    logs: list[str] = field(default_factory=list)  # log directories or sink datasets
    queues: list[str] = field(default_factory=list)  # directories holding queue files
    streams: list[str] = field(default_factory=list)  # journald files
    events: list[str] = field(default_factory=list)  # event journal directories
    pages: list[str] = field(default_factory=list)  # page store files

    @property
    def total(self) -> int:
        return len(self.logs) + len(self.queues) + len(self.streams) + len(self.events) + len(self.pages)


def _head(fs: FileSystem, path: str, n: int = 16) -> bytes:
    try:
        with fs.open(path) as h:
            return h.read_at(0, n)
    except OSError:
        return b""


def _is_pages(head: bytes) -> bool:
    return head[:8] == PAGES_MAGIC


def discover(root: str, fs: FileSystem | None = None) -> Found:
    """Every store under ``root``."""
    fs = resolve(fs)
    found = Found()

    def walk(path: str, depth: int) -> None:
        names = sorted(fs.listdir(path))
        if logfiles.MANIFEST in names or any(logfiles.SEGMENT_RE.match(n) for n in names):
            found.logs.append(path)
            return  # a log directory (or sink dataset) holds nothing else of interest
        if "meta" in names and "data" in names and _head(fs, logfiles.join(path, "data"), 4) == b"AKFD":
            found.events.append(path)
            return
        has_queue = False
        for name in names:
            full = logfiles.join(path, name)
            if fs.isdir(full):
                if depth < MAX_DEPTH and not name.startswith(("_", ".")):
                    walk(full, depth + 1)
                continue
            head = _head(fs, full)
            if head[:4] == QUEUE_WRITER_MAGIC and name.rpartition(".")[2].isdigit():
                has_queue = True
            elif head[:8] == JOURNALD_MAGIC:
                found.streams.append(full)
            elif _is_pages(head):
                found.pages.append(full)
        if has_queue:
            found.queues.append(path)

    if not fs.isdir(root):
        from engine.errors import ConfigError

        raise ConfigError(f"{root}: not a directory")
    walk(root.rstrip("/") or "/", 0)
    return found
