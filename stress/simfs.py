"""An in-memory file system that records every operation and enumerates crash states.

:class:`SimFS` implements engine's :class:`~engine.fs.FileSystem` seam.  A workload
runs against it with the real engine code; afterwards :meth:`SimFS.crash_states`
yields every distinct image the disk could hold had the power failed at any point
of the run.  Each image is reopened (again with the real engine code, through
:meth:`CrashState.fs` or on a real disk through :meth:`CrashState.materialize`) and
checked against the store's invariant.

The model is the one of the ALICE study (OSDI 2014) and LevelDB's fault-injection
environment, for a journaling file system in ordered mode:

* a file's contents up to its last ``fsync``/``fdatasync`` survive;
* the writes (and truncates) since then may be lost, kept as any prefix in issue
  order, or the last kept write may be *torn* at a 512- or 4096-byte boundary with
  zeros or garbage in the torn part;
* a write made durable by itself (``write_durable_at``, an ``O_DSYNC`` write)
  survives every crash after it returned, even where earlier unsynced writes of
  the file are lost (truncates before it survive too: the file system commits size
  changes in order); before it returned it is an ordinary unsynced write;
* a directory entry created, renamed or removed since the directory's last fsync
  may be undone (again any prefix of that directory's pending entry operations);
  a file's fsync does not make its name durable;
* a file whose name is not durable is gone, whatever was synced into it.

Crash points are the gaps between recorded operations: point ``k`` means the first
``k`` operations happened.  For each point the simulator takes the product of every
file's and directory's options.  When the total over all points is within
``limit`` every state is produced (exhaustive); otherwise the two extremes of
every point (nothing pending survived / everything did, whole) are always
included, however many points there are, and the rest of ``limit`` is a seeded
random sample.  States are deduplicated by a hash of their content, and
:attr:`SimFS.last_stats` counts what was explored.

The trace is a list of typed events (:mod:`stress.simevents`), one per operation.
Labels passed to :meth:`SimFS.mark` go into the trace too: a crash state's
``marks`` are the labels recorded before its crash point, which is how a test knows
what had been acknowledged when the power went.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import random
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.errors import LockedError
from engine.fs.base import FileHandle, FileSystem, OpenMode
from engine.fs.words import SharedWords
from stress.simchoices import rank, unrank
from stress.simevents import (
    Create,
    DurableWriteReturned,
    EntryOp,
    Event,
    FileOp,
    FsyncDir,
    Mark,
    Mkdir,
    Rename,
    Rmdir,
    Sync,
    Truncate,
    Unlink,
    Write,
)
from stress.simwords import ScratchMemory

# ---------------------------------------------------------------------------
# The model: what is current and what is durable, replayable from the trace.
# ---------------------------------------------------------------------------


def _parent(path: str) -> str:
    parent = os.path.dirname(path.rstrip("/"))
    return parent or "/"


def _norm(path: str) -> str:
    if not path.startswith("/"):
        path = "/" + path
    path = os.path.normpath(path)
    return "/" if path in ("/", "//") else path


@dataclass
class _Inode:
    durable: bytes = b""
    current: bytearray = field(default_factory=bytearray)
    # Writes and truncates since the last fsync, in issue order.
    pending: list[FileOp] = field(default_factory=list)
    # Indexes into ``pending`` of writes made durable by themselves (O_DSYNC):
    # they survive every crash although earlier pending operations may not.
    forced: set[int] = field(default_factory=set)
    mtime: int = 0


@dataclass(frozen=True)
class _Prefix:
    """Crash option of one file: the first ``keep`` pending operations landed."""

    keep: int


@dataclass(frozen=True)
class _Tear:
    """Crash option of one file: the pending operations before ``index`` landed,
    and the write ``index`` landed up to ``point`` (an absolute 512-aligned
    offset), with zeros or garbage in the rest of its range."""

    index: int
    point: int
    fill: Literal["zeros", "garbage"]


_FileOption = _Prefix | _Tear


class _Model:
    """File-system state as current and as durable; updated one event at a time."""

    def __init__(self) -> None:
        self.inodes: dict[int, _Inode] = {}
        self.names: dict[str, int] = {}
        self.dirs: set[str] = {"/"}
        self.durable_names: dict[str, int] = {}
        self.durable_dirs: set[str] = {"/"}
        self.pending_dirs: dict[str, list[EntryOp]] = {}
        self.marks: list[Any] = []
        self.clock = 0

    # -- events ---------------------------------------------------------------------
    def apply(self, event: Event) -> None:
        self.clock += 1
        match event:
            case Write(ino=ino) | Truncate(ino=ino):
                node = self.inodes[ino]
                _apply_file_op(node.current, event)
                node.pending.append(event)
                node.mtime = self.clock
            case Sync(ino=ino):
                node = self.inodes[ino]
                node.durable = bytes(node.current)
                node.pending.clear()
                node.forced.clear()
            case DurableWriteReturned(ino=ino):
                # The write just before made itself durable (``write_durable_at``).
                node = self.inodes[ino]
                node.forced.add(len(node.pending) - 1)
            case Create(path=path, ino=ino):
                self.inodes[ino] = _Inode(mtime=self.clock)
                self.names[path] = ino
                self._dir_op(_parent(path), event)
            case Rename(src=src, dst=dst, ino=ino):
                del self.names[src]
                self.names[dst] = ino
                self._dir_op(_parent(dst), event)
            case Unlink(path=path):
                del self.names[path]
                self._dir_op(_parent(path), event)
            case Mkdir(path=path):
                self.dirs.add(path)
                self._dir_op(_parent(path), event)
            case Rmdir(path=path):
                self.dirs.discard(path)
                self._dir_op(_parent(path), event)
            case FsyncDir(path=path):
                self._commit_dir(path)
            case Mark(label=label):
                self.marks.append(label)

    def _dir_op(self, directory: str, op: EntryOp) -> None:
        self.pending_dirs.setdefault(directory, []).append(op)

    def _commit_dir(self, directory: str) -> None:
        ops = self.pending_dirs.pop(directory, [])
        for op in ops:
            _apply_dir_op(self.durable_names, self.durable_dirs, op)
        # A rename is one journal transaction on ext4/xfs: fsyncing the source
        # directory commits it as well as fsyncing the destination.
        for other, other_ops in list(self.pending_dirs.items()):
            keep: list[EntryOp] = []
            for op in other_ops:
                if isinstance(op, Rename) and _parent(op.src) == directory:
                    _apply_dir_op(self.durable_names, self.durable_dirs, op)
                else:
                    keep.append(op)
            if keep:
                self.pending_dirs[other] = keep
            else:
                del self.pending_dirs[other]

    # -- crash options ----------------------------------------------------------------
    def option_axes(self) -> tuple[list[int], list[str], list[int]]:
        """(inode ids with pending writes, directories with pending ops, option counts)."""
        inos = sorted(i for i, node in self.inodes.items() if node.pending)
        dirs = sorted(self.pending_dirs)
        counts = [len(_file_options(self.inodes[i])) for i in inos]
        counts += [len(self.pending_dirs[d]) + 1 for d in dirs]
        return inos, dirs, counts

    def everything_choice(self, inos: list[int], dirs: list[str]) -> list[int]:
        """The choice on :meth:`option_axes` where every pending operation landed
        whole (the other extreme from all zeros, where none did)."""
        # _file_options lists the prefixes first: option k keeps k operations.
        return [len(self.inodes[i].pending) for i in inos] + [len(self.pending_dirs[d]) for d in dirs]

    def image(self, inos: list[int], dirs: list[str], choice: list[int]) -> tuple[dict[str, bytes], set[str], str]:
        """Materialise one crash image; returns (files, directories, description)."""
        names = dict(self.durable_names)
        directories = set(self.durable_dirs)
        notes: list[str] = []
        for d, pick in zip(dirs, choice[len(inos) :], strict=True):
            ops = self.pending_dirs[d]
            for op in ops[:pick]:
                _apply_dir_op(names, directories, op)
            if pick < len(ops):
                notes.append(f"{d}: {len(ops) - pick} of {len(ops)} entry ops undone")
        contents: dict[int, bytes] = {}
        for ino, pick in zip(inos, choice[: len(inos)], strict=True):
            node = self.inodes[ino]
            option = _file_options(node)[pick]
            contents[ino] = _realise(node, option)
            if option != _Prefix(len(node.pending)):
                notes.append(f"inode {ino}: {_describe_option(option, len(node.pending))}")
        files: dict[str, bytes] = {}
        for path, ino in names.items():
            if not _reachable(path, directories):
                continue
            data = contents.get(ino)
            files[path] = data if data is not None else self.inodes[ino].durable
        directories = {d for d in directories if _reachable(d, directories) or d == "/"}
        return files, directories, "; ".join(notes) or "everything written survived"


def _apply_dir_op(names: dict[str, int], dirs: set[str], op: EntryOp) -> None:
    match op:
        case Create(path=path, ino=ino):
            names[path] = ino
        case Unlink(path=path):
            names.pop(path, None)
        case Rename(src=src, dst=dst, ino=ino):
            names.pop(src, None)
            names[dst] = ino
        case Mkdir(path=path):
            dirs.add(path)
        case Rmdir(path=path):
            dirs.discard(path)


def _reachable(path: str, dirs: set[str]) -> bool:
    parent = _parent(path)
    while parent != "/":
        if parent not in dirs:
            return False
        parent = _parent(parent)
    return True


def _tear_points(offset: int, length: int) -> list[int]:
    """512-aligned absolute offsets strictly inside a write, thinned to a few."""
    first = (offset // 512 + 1) * 512
    points = list(range(first, offset + length, 512))
    if len(points) <= 4:
        return points
    big = [p for p in points if p % 4096 == 0]
    chosen = {points[0], points[-1]}
    if big:
        chosen.update({big[0], big[-1]})
    return sorted(chosen)


def _file_options(node: _Inode) -> list[_FileOption]:
    """Every way the unsynced tail of one file may have reached the disk: the
    prefixes first (option ``k`` keeps ``k`` operations), then the tears."""
    options: list[_FileOption] = [_Prefix(k) for k in range(len(node.pending) + 1)]
    for index, op in enumerate(node.pending):
        if not isinstance(op, Write) or index in node.forced:
            continue
        for point in _tear_points(op.offset, len(op.data)):
            options.append(_Tear(index, point, "zeros"))
            options.append(_Tear(index, point, "garbage"))
    return options


def _describe_option(option: _FileOption, total: int) -> str:
    if isinstance(option, _Prefix):
        return f"kept {option.keep} of {total} unsynced writes"
    return f"write {option.index + 1} of {total} torn at {option.point} ({option.fill})"


def _garbage(length: int, seed: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < length:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:length])


def _realise(node: _Inode, option: _FileOption) -> bytes:
    data = bytearray(node.durable)
    keep = option.keep if isinstance(option, _Prefix) else option.index  # a tear keeps the writes before it
    for op in node.pending[:keep]:
        _apply_file_op(data, op)
    if isinstance(option, _Tear):
        torn = node.pending[option.index]
        assert isinstance(torn, Write)  # only writes are torn (see _file_options)
        cut = option.point - torn.offset
        rest = len(torn.data) - cut
        filler = bytes(rest) if option.fill == "zeros" else _garbage(rest, option.point)
        _apply_file_op(data, Write(torn.ino, torn.offset, torn.data[:cut] + filler))
        keep += 1
    if node.forced:
        # Self-synced writes survive whatever came before them was lost; so do
        # truncates before them (the journal commits size changes in order).
        last = max(node.forced)
        for index in range(keep, len(node.pending)):
            op = node.pending[index]
            if index in node.forced or (isinstance(op, Truncate) and index < last):
                _apply_file_op(data, op)
    return bytes(data)


def _apply_file_op(data: bytearray, op: FileOp) -> None:
    if isinstance(op, Write):
        if len(data) < op.offset:
            data.extend(bytes(op.offset - len(data)))
        data[op.offset : op.offset + len(op.data)] = op.data
    elif op.size < len(data):
        del data[op.size :]
    else:
        data.extend(bytes(op.size - len(data)))


# ---------------------------------------------------------------------------
# Crash states
# ---------------------------------------------------------------------------


@dataclass
class CrashState:
    """One image the disk may hold after a power loss at point ``index``."""

    index: int
    files: dict[str, bytes]
    dirs: set[str]
    marks: list[Any]
    description: str
    last_event: str

    def fs(self) -> SimFS:
        """A fresh simulated file system holding exactly this image, all durable."""
        return SimFS.from_image(self.files, self.dirs)

    def materialize(self, root: str) -> None:
        """Write the image below the real directory ``root`` (test tool, not engine)."""
        for d in sorted(self.dirs):
            os.makedirs(os.path.join(root, d.lstrip("/")), exist_ok=True)
        for path, data in self.files.items():
            with open(os.path.join(root, path.lstrip("/")), "wb") as out:
                out.write(data)

    def describe(self) -> str:
        return (
            f"crash after operation {self.index} ({self.last_event}); {self.description}; "
            f"{len(self.marks)} acknowledged marks"
        )

    def digest(self) -> str:
        h = hashlib.sha256()
        for d in sorted(self.dirs):
            h.update(b"D" + d.encode() + b"\0")
        for path in sorted(self.files):
            h.update(b"F" + path.encode() + b"\0" + hashlib.sha256(self.files[path]).digest())
        return h.hexdigest()


@dataclass
class CrashStats:
    """What one :meth:`SimFS.crash_states` run explored."""

    operations: int = 0
    possible: int = 0
    generated: int = 0
    distinct: int = 0
    exhaustive: bool = True
    seed: int | None = None

    def __str__(self) -> str:
        mode = "exhaustive" if self.exhaustive else f"sampled, seed {self.seed}"
        return (
            f"{self.distinct} distinct crash states ({self.generated} generated of "
            f"{self.possible} possible, {mode}) over {self.operations} operations"
        )


def _describe_event(event: Event | None) -> str:
    return "start" if event is None else event.describe()[:80]


# ---------------------------------------------------------------------------
# The FileSystem implementation
# ---------------------------------------------------------------------------


class SimFileHandle(FileHandle):
    """A handle on a simulated inode (it survives unlink, like a real one)."""

    def __init__(self, fs: SimFS, path: str, ino: int, writable: bool) -> None:
        super().__init__(path, writable)
        self._fs = fs
        self._ino = ino
        self._lock_mode: str | None = None

    def _raw_read(self, offset: int, size: int) -> bytes:
        with self._fs._lock:
            return bytes(self._fs._model.inodes[self._ino].current[offset : offset + size])

    def _raw_write(self, offset: int, data: bytes) -> None:
        self._fs._record(Write(self._ino, offset, bytes(data)))

    def _raw_size(self) -> int:
        with self._fs._lock:
            return len(self._fs._model.inodes[self._ino].current)

    def _raw_truncate(self, size: int) -> None:
        self._fs._record(Truncate(self._ino, size))

    def _raw_sync(self, data_only: bool) -> None:
        self._fs._record(Sync(self._ino))

    def _raw_write_durable(self, offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        # Two events, so that a crash between them may still tear or lose the write.
        self._fs._record(Write(self._ino, offset, b"".join(parts)))
        self._fs._record(DurableWriteReturned(self._ino))

    def _raw_lock(self, exclusive: bool, blocking: bool) -> None:
        self._fs._take_lock(self, self._ino, exclusive, blocking)

    def _raw_unlock(self) -> None:
        self._fs._drop_lock(self, self._ino)

    supports_range_locks = True

    def _raw_lock_range(self, offset: int, length: int, exclusive: bool, blocking: bool) -> bool:
        return self._fs._take_range(self, self._ino, offset, length, exclusive, blocking)

    def _raw_unlock_range(self, offset: int, length: int) -> None:
        self._fs._drop_range(self, self._ino, offset, offset + length)

    def _raw_range_locked(self, offset: int, length: int, exclusive: bool) -> bool:
        return self._fs._range_conflict(self, self._ino, offset, offset + length, exclusive)

    # Scratch words: memory outside the trace and every crash image (stress.simwords).
    def _raw_map_scratch_words(self, count: int) -> SharedWords:
        return self._fs.scratch.map(self._ino, count)

    def _raw_watch_scratch_words(self, count: int) -> SharedWords | None:
        return self._fs.scratch.watch(self._ino, count)

    def _raw_close(self) -> None:
        self._fs._drop_lock(self, self._ino)
        self._fs._drop_range(self, self._ino, 0, None)


class SimFS(FileSystem):
    """The crash simulator's in-memory :class:`FileSystem` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._lock_changed = threading.Condition(self._lock)
        self._model = _Model()
        self._trace: list[Event] = []
        self._next_ino = 1
        self._locks: dict[int, tuple[str, set[SimFileHandle]]] = {}
        #: Byte-range locks per inode: (holder, start, end, exclusive), like OFD locks.
        self._ranges: dict[int, list[tuple[SimFileHandle, int, int, bool]]] = {}
        self._base: tuple[dict[str, bytes], set[str]] = ({}, {"/"})
        self.last_stats: CrashStats | None = None
        #: The files' scratch words (FileHandle.map_scratch_words): no part of the model.
        self.scratch = ScratchMemory(self._lock)

    @classmethod
    def from_image(cls, files: dict[str, bytes], dirs: set[str]) -> SimFS:
        """A simulator whose starting state is the given image, already durable."""
        sim = cls()
        sim._base = (dict(files), set(dirs))
        sim._model = sim._new_model()
        sim._next_ino = len(files) + 1
        return sim

    def _new_model(self) -> _Model:
        """A model of the starting image (empty, or the one given to from_image)."""
        model = _Model()
        files, dirs = self._base
        model.dirs.update(dirs)
        model.durable_dirs.update(dirs)
        for ino, path in enumerate(sorted(files), start=1):
            model.inodes[ino] = _Inode(durable=files[path], current=bytearray(files[path]))
            model.names[path] = ino
            model.durable_names[path] = ino
        return model

    # -- recording ----------------------------------------------------------------------
    def _record(self, event: Event) -> None:
        with self._lock:
            self._model.apply(event)
            self._trace.append(event)

    def mark(self, label: Any) -> None:
        """Record that the workload got an acknowledgement (``label`` is yours)."""
        self._record(Mark(label))

    @property
    def trace(self) -> list[Event]:
        """Every operation so far (writes carry their bytes)."""
        with self._lock:
            return list(self._trace)

    def operation_count(self) -> int:
        with self._lock:
            return sum(1 for e in self._trace if not isinstance(e, Mark))

    # -- FileSystem --------------------------------------------------------------------
    def open(self, path: str, mode: OpenMode | str = OpenMode.READ) -> FileHandle:
        mode = OpenMode(mode)
        path = _norm(path)
        with self._lock:
            ino = self._model.names.get(path)
            if ino is not None and mode is OpenMode.NEW:
                raise FileExistsError(errno.EEXIST, "File exists", path)
            if path in self._model.dirs:
                raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
            if ino is None:
                if mode in (OpenMode.READ, OpenMode.WRITE):
                    raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
                if _parent(path) not in self._model.dirs:
                    raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
                ino = self._next_ino
                self._next_ino += 1
                self._record(Create(path, ino))
            return SimFileHandle(self, path, ino, writable=mode is not OpenMode.READ)

    def exists(self, path: str) -> bool:
        path = _norm(path)
        with self._lock:
            return path in self._model.names or path in self._model.dirs

    def isdir(self, path: str) -> bool:
        with self._lock:
            return _norm(path) in self._model.dirs

    def listdir(self, path: str) -> list[str]:
        path = _norm(path)
        with self._lock:
            if path not in self._model.dirs:
                raise FileNotFoundError(errno.ENOENT, "No such directory", path)
            names = [p for p in self._model.names if _parent(p) == path]
            names += [d for d in self._model.dirs if d != "/" and _parent(d) == path]
        return sorted(os.path.basename(p) for p in names)

    def file_size(self, path: str) -> int:
        path = _norm(path)
        with self._lock:
            ino = self._model.names.get(path)
            if ino is None:
                raise FileNotFoundError(errno.ENOENT, "No such file", path)
            return len(self._model.inodes[ino].current)

    def mtime_ns(self, path: str) -> int:
        path = _norm(path)
        with self._lock:
            ino = self._model.names.get(path)
            if ino is None:
                if path in self._model.dirs:
                    return 0
                raise FileNotFoundError(errno.ENOENT, "No such file", path)
            return self._model.inodes[ino].mtime

    def mkdir(self, path: str) -> None:
        path = _norm(path)
        with self._lock:
            if path in self._model.dirs or path in self._model.names:
                raise FileExistsError(errno.EEXIST, "File exists", path)
            if _parent(path) not in self._model.dirs:
                raise FileNotFoundError(errno.ENOENT, "No such directory", _parent(path))
            self._record(Mkdir(path))

    def rmdir(self, path: str) -> None:
        path = _norm(path)
        with self._lock:
            if path not in self._model.dirs:
                raise FileNotFoundError(errno.ENOENT, "No such directory", path)
            if self.listdir(path):
                raise OSError(errno.ENOTEMPTY, "Directory not empty", path)
            self._record(Rmdir(path))

    def rename(self, src: str, dst: str) -> None:
        src, dst = _norm(src), _norm(dst)
        with self._lock:
            if src not in self._model.names:
                raise FileNotFoundError(errno.ENOENT, "No such file", src)
            if _parent(dst) not in self._model.dirs:
                raise FileNotFoundError(errno.ENOENT, "No such directory", _parent(dst))
            self._record(Rename(src, dst, self._model.names[src]))

    def unlink(self, path: str) -> None:
        path = _norm(path)
        with self._lock:
            if path not in self._model.names:
                raise FileNotFoundError(errno.ENOENT, "No such file", path)
            self._record(Unlink(path))

    def fsync_dir(self, path: str) -> None:
        path = _norm(path)
        with self._lock:
            if path not in self._model.dirs:
                raise FileNotFoundError(errno.ENOENT, "No such directory", path)
            self._record(FsyncDir(path))

    # -- locks (advisory, per inode, like flock) --------------------------------------------
    def _take_lock(self, handle: SimFileHandle, ino: int, exclusive: bool, blocking: bool) -> None:
        want = "x" if exclusive else "s"
        with self._lock_changed:
            while True:
                mode, holders = self._locks.get(ino, ("", set()))
                others = holders - {handle}
                if not others or (want == "s" and mode == "s"):
                    holders = set(others) | {handle}
                    self._locks[ino] = (want if not others else mode, holders)
                    return
                if not blocking:
                    raise LockedError(f"{handle.path}: lock is held by another handle")
                self._lock_changed.wait()

    def _drop_lock(self, handle: SimFileHandle, ino: int) -> None:
        with self._lock_changed:
            entry = self._locks.get(ino)
            if entry is None or handle not in entry[1]:
                return
            holders = entry[1] - {handle}
            if holders:
                self._locks[ino] = (entry[0], holders)
            else:
                del self._locks[ino]
            self._lock_changed.notify_all()

    # -- byte-range locks (advisory, per handle, like Linux's OFD locks) ------------------------
    def _range_conflict(self, handle: SimFileHandle, ino: int, start: int, end: int, exclusive: bool) -> bool:
        with self._lock:
            return any(
                holder is not handle and lo < end and start < hi and (exclusive or held_x)
                for holder, lo, hi, held_x in self._ranges.get(ino, ())
            )

    def _take_range(
        self, handle: SimFileHandle, ino: int, offset: int, length: int, exclusive: bool, blocking: bool
    ) -> bool:
        end = offset + length
        with self._lock_changed:
            while self._range_conflict(handle, ino, offset, end, exclusive):
                if not blocking:
                    return False
                self._lock_changed.wait()
            self._drop_range(handle, ino, offset, end)  # a new lock replaces this handle's own there
            self._ranges.setdefault(ino, []).append((handle, offset, end, exclusive))
            return True

    def _drop_range(self, handle: SimFileHandle, ino: int, start: int, end: int | None) -> None:
        with self._lock_changed:
            kept: list[tuple[SimFileHandle, int, int, bool]] = []
            for holder, lo, hi, held_x in self._ranges.get(ino, ()):
                if holder is not handle or hi <= start or (end is not None and end <= lo):
                    kept.append((holder, lo, hi, held_x))
                    continue
                if lo < start:
                    kept.append((holder, lo, start, held_x))
                if end is not None and end < hi:
                    kept.append((holder, end, hi, held_x))
            if kept:
                self._ranges[ino] = kept
            else:
                self._ranges.pop(ino, None)
            self._lock_changed.notify_all()

    # -- snapshots -----------------------------------------------------------------------
    def scratch_words(self, path: str) -> bytes:
        """The scratch words of the file at ``path`` now (b"": none made); in no crash image."""
        with self._lock:
            return self.scratch.peek(self._model.names[_norm(path)])

    def snapshot(self) -> dict[str, bytes]:
        """Every file's current contents (what a clean shutdown would leave)."""
        with self._lock:
            return {p: bytes(self._model.inodes[i].current) for p, i in self._model.names.items()}

    def durable_image(self) -> CrashState:
        """The state a crash right now would leave if nothing unsynced survived."""
        with self._lock:
            model = self._model
            inos, dirs, counts = model.option_axes()
            files, directories, note = model.image(inos, dirs, [0] * len(counts))
            return CrashState(len(self._trace), files, directories, list(model.marks), note, "now")

    # -- crash enumeration -----------------------------------------------------------------
    def crash_states(
        self, limit: int = 2000, seed: int | None = None, points: Iterable[int] | None = None
    ) -> Iterator[CrashState]:
        """Yield distinct crash images of the run so far (see the module docstring).

        Exhaustive when the number of possible states is at most ``limit``; else
        both extremes of every crash point (so more than ``limit`` states when
        there are more than ``limit // 2`` points) plus random draws with ``seed``
        up to ``limit`` in all (random if ``None``; the seed used is in
        :attr:`last_stats`).  ``points`` restricts the crash points considered
        (``len(sim.trace)`` is "right now")."""
        only = None if points is None else set(points)
        with self._lock:
            trace = list(self._trace)
        stats = CrashStats(operations=sum(1 for e in trace if not isinstance(e, Mark)))
        # Pass 1: how many options each crash point has, and which two of them are
        # its extremes (nothing pending survived: option 0; everything did).
        counts_per_point: list[int] = []
        extremes: dict[int, set[int]] = {}
        model = self._new_model()
        for k in range(len(trace) + 1):
            if k:
                model.apply(trace[k - 1])
            if only is not None and k not in only:
                counts_per_point.append(0)
                continue
            if only is None and k < len(trace) and isinstance(trace[k], Mark):
                # A mark changes no file: the images here equal those right after the
                # mark, which carry more acknowledgements (a stricter check).
                counts_per_point.append(0)
                continue
            inos, dirs, counts = model.option_axes()
            counts_per_point.append(math.prod(counts))
            extremes[k] = {0, rank(model.everything_choice(inos, dirs), counts)}
        stats.possible = sum(counts_per_point)
        wanted: dict[int, set[int]] = {}
        if stats.possible <= limit:
            for k, n in enumerate(counts_per_point):
                if n:
                    wanted[k] = set(range(n))
        else:
            # Both extremes of every crash point, always (even past ``limit``);
            # then random draws up to ``limit`` states in all.
            stats.exhaustive = False
            stats.seed = seed if seed is not None else random.SystemRandom().randrange(2**32)
            rng = random.Random(stats.seed)
            wanted = {k: set(picks) for k, picks in extremes.items()}
            budget = limit - sum(map(len, wanted.values()))
            open_points = sorted(k for k, picks in wanted.items() if counts_per_point[k] > len(picks))
            while budget > 0 and open_points:
                k = rng.choice(open_points)
                wanted[k].add(rng.randrange(counts_per_point[k]))
                budget -= 1  # a repeat draw costs budget too, so the loop is bounded
                if len(wanted[k]) >= counts_per_point[k]:
                    open_points.remove(k)
        # Pass 2: realise the chosen states.
        seen: set[str] = set()
        model = self._new_model()
        self.last_stats = stats
        for k in range(len(trace) + 1):
            if k:
                model.apply(trace[k - 1])
            picks = wanted.get(k)
            if not picks:
                continue
            inos, dirs, counts = model.option_axes()
            for combo in sorted(picks):
                choice = unrank(combo, counts)
                files, directories, note = model.image(inos, dirs, choice)
                state = CrashState(
                    k, files, directories, list(model.marks), note, _describe_event(trace[k - 1] if k else None)
                )
                stats.generated += 1
                digest = state.digest() + repr(len(model.marks))
                if digest in seen:
                    continue
                seen.add(digest)
                stats.distinct += 1
                yield state
