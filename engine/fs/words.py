"""Shared 32-bit words that processes sleep on and wake: a futex over a file.

Why: the queue's producers in several processes let one of them fsync for all
(the others' bytes written before it are covered).  The others must sleep until
that fsync ends and then all wake at once.  A file lock cannot do that: its
waiters are woken one by one, each takes the lock, looks and lets it go, and on
a two-core machine that hand-off cost more than the fsyncs it saved.  A futex
wakes every sleeper with one system call.

How: a small file's first bytes are mapped shared (``mmap``); each word is a
futex (Linux's ``futex(2)`` through :mod:`ctypes`, shared between processes
because the mapping is).  The contents mean nothing after a restart and are
never fsynced; a word holds whatever its users agree on (see
:mod:`engine.queue.shared`).

Two implementations behind one face, chosen by the file handle
(:meth:`engine.fs.FileHandle.map_words`):

* :class:`MappedWords`: the real OS on Linux x86-64 and arm64;
* :class:`FileWords`: any other handle (the crash simulator, the fault
  injector) or platform: the words are read and written through the handle, and
  a sleeper looks again every 50 µs to 1 ms.  Slower, the same behaviour.
"""

from __future__ import annotations

import ctypes
import functools
import io
import mmap
import platform
import struct
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Protocol

#: One word: u32, little-endian (the mapped words are native, which is the same on
#: every platform :class:`MappedWords` runs on).  Two words at an even index make
#: one u64 (:meth:`SharedWords.get64`), also read and written whole.
WORD = struct.Struct("<I")
DOUBLE = struct.Struct("<Q")
assert WORD.size == 4 and DOUBLE.size == 2 * WORD.size

_FUTEX_WAIT = 0
_FUTEX_WAKE = 1
_WAKE_ALL = 0x7FFFFFFF
#: futex(2)'s system call number where :class:`MappedWords` runs.
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine().lower())


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _load_syscall() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux") or _SYS_FUTEX is None or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_long
    call.argtypes = [
        ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32,
    ]
    return call


#: Chosen once for the process, at import.
_SYSCALL = _load_syscall()
HAVE_FUTEX = _SYSCALL is not None


class SharedWords(ABC):
    """``count`` u32 words shared by every process that maps the same file."""

    count: int

    def _check(self, index: int) -> None:
        if not 0 <= index < self.count:
            raise IndexError(f"word {index} of {self.count}")

    @abstractmethod
    def get(self, index: int) -> int:
        """The word's value now."""

    @abstractmethod
    def set(self, index: int, value: int) -> None:
        """Store ``value`` (mod 2**32) in the word."""

    def _check64(self, index: int) -> None:
        if index % 2 or not 0 <= index < self.count - 1:
            raise IndexError(f"u64 at word {index} of {self.count} (an even index, two words)")

    @abstractmethod
    def get64(self, index: int) -> int:
        """The u64 held by words ``index`` and ``index + 1`` (``index`` even)."""

    @abstractmethod
    def set64(self, index: int, value: int) -> None:
        """Store the u64 ``value`` in words ``index`` and ``index + 1`` at once."""

    def add64(self, index: int, delta: int) -> int:
        """Add ``delta`` to the u64 at ``index`` (mod 2**64) and return the new
        value: a load and a store, not atomic (for a word only its caller stores
        meanwhile, e.g. under a lock)."""
        value = (self.get64(index) + delta) & 0xFFFFFFFFFFFFFFFF
        self.set64(index, value)
        return value

    def loader64(self, index: int) -> Callable[[], int]:
        """A function of no arguments that loads the u64 at ``index`` (as
        :meth:`get64`): what a hot path holds to look at a word."""
        self._check64(index)
        return functools.partial(self.get64, index)

    def _check_bytes(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.count * WORD.size:
            raise IndexError(f"bytes {offset}..{offset + size} of {self.count * WORD.size}")

    @abstractmethod
    def read_bytes(self, offset: int, size: int) -> bytes:
        """``size`` bytes of the words from byte ``offset`` as they are now (a
        record several words long; nothing makes it atomic: its users check it,
        e.g. with a checksum, as the queue's state record does)."""

    @abstractmethod
    def write_bytes(self, offset: int, data: bytes) -> None:
        """Store ``data`` at byte ``offset`` of the words."""

    @abstractmethod
    def wait(self, index: int, expected: int, timeout: float) -> None:
        """Sleep while the word holds ``expected``, at most ``timeout`` seconds.
        May return early for no reason: callers look at what they wait for again."""

    @abstractmethod
    def wake(self, index: int) -> None:
        """Wake every process (and thread) sleeping on the word."""

    @abstractmethod
    def close(self) -> None:
        """Unmap; the words must not be used after."""


class MappedWords(SharedWords):
    """The words mapped shared from an open file descriptor, futexes for the sleeps."""

    def __init__(self, fd: int, count: int) -> None:
        self.count = count
        self._map = mmap.mmap(fd, count * WORD.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        # Aligned u32 and u64 loads and stores: each is one instruction on the
        # 64-bit platforms this runs on, never torn.
        self._words = (ctypes.c_uint32 * count).from_buffer(self._map)
        self._doubles = (ctypes.c_uint64 * (count // 2)).from_buffer(self._map)
        self._base = ctypes.addressof(self._words)

    def get(self, index: int) -> int:
        self._check(index)
        return int(self._words[index])

    def set(self, index: int, value: int) -> None:
        self._check(index)
        self._words[index] = value & 0xFFFFFFFF

    def get64(self, index: int) -> int:
        self._check64(index)
        return int(self._doubles[index // 2])

    def set64(self, index: int, value: int) -> None:
        self._check64(index)
        self._doubles[index // 2] = value & 0xFFFFFFFFFFFFFFFF

    def add64(self, index: int, delta: int) -> int:
        self._check64(index)
        doubles = self._doubles
        value = doubles[index // 2] = (doubles[index // 2] + delta) & 0xFFFFFFFFFFFFFFFF
        return value

    def read_bytes(self, offset: int, size: int) -> bytes:
        self._check_bytes(offset, size)
        return self._map[offset : offset + size]

    def write_bytes(self, offset: int, data: bytes) -> None:
        self._check_bytes(offset, len(data))
        self._map[offset : offset + len(data)] = data

    def wait(self, index: int, expected: int, timeout: float) -> None:
        self._check(index)
        if timeout <= 0:
            return
        seconds = int(timeout)
        spec = _Timespec(seconds, int((timeout - seconds) * 1e9))
        # Returns at a wake, at the timeout, at a signal, or at once when the word
        # no longer holds ``expected`` (no wake can be lost between a look and the
        # sleep).  Every outcome is "look again", so the result is not examined.
        assert _SYSCALL is not None
        _SYSCALL(_SYS_FUTEX, self._base + index * WORD.size, _FUTEX_WAIT, expected & 0xFFFFFFFF,
                 ctypes.addressof(spec), None, 0)

    def wake(self, index: int) -> None:
        self._check(index)
        assert _SYSCALL is not None
        _SYSCALL(_SYS_FUTEX, self._base + index * WORD.size, _FUTEX_WAKE, _WAKE_ALL, None, None, 0)

    def close(self) -> None:
        if self._map.closed:
            return
        del self._words, self._doubles  # the mapping cannot close while ctypes holds a view of it
        self._map.close()


class ReadMappedWords(SharedWords):
    """The words mapped read-only (a handle opened for reading: a reader that
    only watches words another process sets); loads, no stores, no sleeps."""

    def __init__(self, fd: int, count: int) -> None:
        self.count = count
        self._map = mmap.mmap(fd, count * WORD.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        # Native aligned loads through memoryviews (ctypes needs a writable buffer).
        self._words = memoryview(self._map).cast("I")
        self._doubles = memoryview(self._map).cast("Q")

    def get(self, index: int) -> int:
        self._check(index)
        return int(self._words[index])

    def set(self, index: int, value: int) -> None:
        raise io.UnsupportedOperation("words mapped read-only")

    def get64(self, index: int) -> int:
        self._check64(index)
        return int(self._doubles[index // 2])

    def set64(self, index: int, value: int) -> None:
        raise io.UnsupportedOperation("words mapped read-only")

    def loader64(self, index: int) -> Callable[[], int]:
        self._check64(index)
        # The memoryview's own item load, bound once: no Python frame per look.
        return functools.partial(self._doubles.__getitem__, index // 2)

    def read_bytes(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.count * WORD.size:
            self._check_bytes(offset, size)  # (raises; the check inline: a reader's ring, once per commit)
        return self._map[offset : offset + size]

    def write_bytes(self, offset: int, data: bytes) -> None:
        raise io.UnsupportedOperation("words mapped read-only")

    def wait(self, index: int, expected: int, timeout: float) -> None:
        raise io.UnsupportedOperation("words mapped read-only")

    def wake(self, index: int) -> None:
        raise io.UnsupportedOperation("words mapped read-only")

    def close(self) -> None:
        if self._map.closed:
            return
        self._words.release()
        self._doubles.release()
        self._map.close()


class WordFile(Protocol):
    """What :class:`FileWords` needs of a file: positioned reads and writes.

    :class:`engine.fs.FileHandle` is one; naming the two methods here instead of
    importing it keeps ``engine.fs.words`` below ``engine.fs.base`` (which maps
    its words through this module), so the two do not import each other."""

    def read_at(self, offset: int, size: int) -> bytes: ...

    def write_at(self, offset: int, data: bytes) -> None: ...


class FileWords(SharedWords):
    """The words read and written through a file handle; sleeps poll."""

    #: How long a sleeper waits before it first looks again, and at most.
    FIRST_LOOK = 0.00005
    LONGEST_LOOK = 0.001

    def __init__(self, handle: WordFile, count: int) -> None:
        self.count = count
        self._handle = handle

    def _load(self, index: int, layout: struct.Struct) -> int:
        raw = self._handle.read_at(index * WORD.size, layout.size)
        return int(layout.unpack(raw)[0]) if len(raw) == layout.size else 0  # short file: zeros

    def _store(self, index: int, layout: struct.Struct, value: int) -> None:
        self._handle.write_at(index * WORD.size, layout.pack(value & ((1 << 8 * layout.size) - 1)))

    def get(self, index: int) -> int:
        self._check(index)
        return self._load(index, WORD)

    def set(self, index: int, value: int) -> None:
        self._check(index)
        self._store(index, WORD, value)

    def get64(self, index: int) -> int:
        self._check64(index)
        return self._load(index, DOUBLE)

    def set64(self, index: int, value: int) -> None:
        self._check64(index)
        self._store(index, DOUBLE, value)

    def read_bytes(self, offset: int, size: int) -> bytes:
        self._check_bytes(offset, size)
        raw = self._handle.read_at(offset, size)
        return raw + bytes(size - len(raw))  # short file: zeros

    def write_bytes(self, offset: int, data: bytes) -> None:
        self._check_bytes(offset, len(data))
        self._handle.write_at(offset, data)

    def wait(self, index: int, expected: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pause = self.FIRST_LOOK
        while self.get(index) == expected & 0xFFFFFFFF:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(pause, left))
            pause = min(pause * 2, self.LONGEST_LOOK)

    def wake(self, index: int) -> None:
        self._check(index)  # the sleepers look by themselves

    def close(self) -> None:
        pass
