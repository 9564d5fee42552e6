"""The crash simulator's scratch words: shared memory outside every crash image.

:meth:`engine.fs.FileHandle.map_scratch_words` gives words that every handle of a
file shares and that hold nothing durable: never synced, never read as the
file's bytes, meaningless after a restart (the page store lock's change count
and ring, :class:`engine.fs.GatedLock`).  On the OS they are the file's first
bytes mapped shared, and after a power loss the file may hold any of the values
stored there, torn anywhere, or nothing; the engine never trusts what it finds
there after a restart (a process only compares the words with what it saw in
them itself), and ``tests/pages/test_pages_gate_crash.py`` opens stores whose
gate holds such debris.

So the simulator keeps them out of its model: :class:`ScratchMemory` holds each
inode's words in memory, a store through them is not an operation of the trace,
and a crash loses them whole (a crash image's file holds what its recorded
writes left, and :meth:`stress.simfs.CrashState.fs` starts with no words).  Were
they ordinary writes, every store would be one more unsynced write of the file
at every later crash point, multiplying the states to enumerate for nothing
(what the ``sim`` attack then could no longer check exhaustively).  Tests see
the words through :meth:`stress.simfs.SimFS.scratch_words`.
"""

from __future__ import annotations

import threading

from engine.fs.words import DOUBLE, WORD, SharedWords


class ScratchMemory:
    """Every simulated inode's scratch words (bytes, little-endian), by inode;
    guarded by the simulator's lock."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._woken = threading.Condition(lock)
        self._words: dict[int, bytearray] = {}

    def map(self, ino: int, count: int) -> SharedWords:
        """``count`` words of inode ``ino``, made (zeros) if it had fewer."""
        with self._lock:
            memory = self._words.setdefault(ino, bytearray())
            if len(memory) < count * WORD.size:
                memory.extend(bytes(count * WORD.size - len(memory)))  # only ever grows, as a mapped file
            return SimWords(self, memory, count, writable=True)

    def watch(self, ino: int, count: int) -> SharedWords | None:
        """``count`` words of inode ``ino`` for loads, or None while nobody made them."""
        with self._lock:
            memory = self._words.get(ino)
            if memory is None or len(memory) < count * WORD.size:
                return None
            return SimWords(self, memory, count, writable=False)

    def peek(self, ino: int) -> bytes:
        """Inode ``ino``'s words now (b"": none made)."""
        with self._lock:
            return bytes(self._words.get(ino, b""))

    # -- for SimWords ---------------------------------------------------------------
    def load(self, memory: bytearray, offset: int, size: int) -> bytes:
        with self._lock:
            return bytes(memory[offset : offset + size])

    def store(self, memory: bytearray, offset: int, data: bytes) -> None:
        with self._lock:
            memory[offset : offset + len(data)] = data

    def wait(self, memory: bytearray, index: int, expected: int, timeout: float) -> None:
        with self._woken:
            if self.load(memory, index * WORD.size, WORD.size) == WORD.pack(expected & 0xFFFFFFFF):
                self._woken.wait(timeout)

    def wake(self) -> None:
        with self._woken:
            self._woken.notify_all()


class SimWords(SharedWords):
    """One mapping of an inode's scratch words (see the module docstring)."""

    def __init__(self, memory: ScratchMemory, words: bytearray, count: int, *, writable: bool) -> None:
        self.count = count
        self._memory = memory
        self._bytes = words
        self._writable = writable
        self._closed = False

    def _usable(self, store: bool) -> None:
        if self._closed:
            raise ValueError("scratch words used after close")
        if store and not self._writable:
            raise OSError("scratch words watched read-only")

    def get(self, index: int) -> int:
        self._check(index)
        self._usable(False)
        return int(WORD.unpack(self._memory.load(self._bytes, index * WORD.size, WORD.size))[0])

    def set(self, index: int, value: int) -> None:
        self._check(index)
        self._usable(True)
        self._memory.store(self._bytes, index * WORD.size, WORD.pack(value & 0xFFFFFFFF))

    def get64(self, index: int) -> int:
        self._check64(index)
        self._usable(False)
        return int(DOUBLE.unpack(self._memory.load(self._bytes, index * WORD.size, DOUBLE.size))[0])

    def set64(self, index: int, value: int) -> None:
        self._check64(index)
        self._usable(True)
        self._memory.store(self._bytes, index * WORD.size, DOUBLE.pack(value & 0xFFFFFFFFFFFFFFFF))

    def read_bytes(self, offset: int, size: int) -> bytes:
        self._check_bytes(offset, size)
        self._usable(False)
        return self._memory.load(self._bytes, offset, size)

    def write_bytes(self, offset: int, data: bytes) -> None:
        self._check_bytes(offset, len(data))
        self._usable(True)
        self._memory.store(self._bytes, offset, bytes(data))

    def wait(self, index: int, expected: int, timeout: float) -> None:
        self._check(index)
        self._usable(True)
        if timeout > 0:
            self._memory.wait(self._bytes, index, expected, timeout)

    def wake(self, index: int) -> None:
        self._check(index)
        self._usable(True)
        self._memory.wake()

    def close(self) -> None:
        self._closed = True
