"""What every attack needs to know about a store: the adapter interface and its helpers.

The six attacks (``stress.attack_sim``, ``attack_kill``, ``attack_io``,
``attack_damage``, ``attack_full``, ``attack_paths``) are written once, against
:class:`StoreAdapter`; what differs per store beyond the adapter (its read paths,
CLI commands, checksum coverage, how to drain it) is listed in
:mod:`stress.readpaths` and :mod:`stress.drain`.  Each store
contributes one adapter in ``stress/stores/<store>.py`` that says

* how to generate a workload: a list of *symbolic* operations (plain tuples, so a
  workload can be pickled, printed, sent to a child process and shrunk by deleting
  operations; an operation that no longer makes sense after shrinking, such as
  "confirm the oldest open read" when nothing is open, is a no-op);
* how to run it (:meth:`StoreAdapter.session` opens the store; ``Session.run(op)``
  performs one operation and returns a small picklable result, such as an item id);
* the oracle (:meth:`StoreAdapter.check`): reopen the store after a crash, read back
  everything, and decide whether what is there is allowed given the operations that
  were acknowledged and the one that was in flight.  It returns the *model* of what
  it found, so that a black-box loop of crash, recover, continue can go on from it;
* how to read a store completely (:meth:`StoreAdapter.snapshot`), used to compare a
  damaged copy against the clean one.

Payloads are self-describing (:func:`payload`/:func:`payload_ok`): a reader process,
which cannot know what the writer acknowledged, can still tell garbage from data.
"""

from __future__ import annotations

import hashlib
import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from engine.fs import FileSystem

Op = tuple[Any, ...]


class Violation(AssertionError):
    """A store broke its contract.  ``detail`` says what, precisely."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)


@dataclass
class Step:
    """One operation as the workload ran it: the op and what it returned."""

    op: Op
    result: Any = None


class Session(ABC):
    """An open store plus the session state a workload needs (open reads, ...)."""

    @abstractmethod
    def run(self, op: Op) -> Any:
        """Perform ``op``; return a picklable result (it is recorded as acknowledged)."""

    @abstractmethod
    def close(self) -> None:
        """Close the store cleanly (errors propagate)."""

    def abandon(self) -> None:
        """Drop the store after a fault without caring about errors."""
        try:
            self.close()
        except Exception:  # a store that failed may fail to close too
            pass


class StoreAdapter(ABC):
    """How the attacks drive one store; see the module docstring."""

    #: Short name used on the command line (``--store``).
    name: str = ""
    #: The package that must be importable for the adapter to run.
    module: str = ""
    #: Every byte of the format is covered by a check code, so every damage must be
    #: detected (a typed error or a reported truncation).  A store whose checksums
    #: cover only some files says which in :data:`stress.readpaths.COVERAGE`; damage
    #: elsewhere that reads back changed is counted as undetectable by the format.
    checksummed: bool = False
    #: Whether reader processes may run beside the writer (attack 2).
    concurrent_readers: bool = False
    #: Free bytes left to the store on the small tmpfs of the real-ENOSPC attack.
    enospc_room: int = 96 * 1024

    # -- workload -------------------------------------------------------------------
    @abstractmethod
    def workload(self, rng: random.Random, n: int) -> list[Op]:
        """``n`` random symbolic operations."""

    def is_write(self, op: Op) -> bool:
        """Whether ``op`` changes the store (after a failed fsync it must be refused)."""
        return True

    # -- running --------------------------------------------------------------------
    @abstractmethod
    def prepare(self, fs: FileSystem, root: str) -> None:
        """Create what must exist before the first open (parent directories)."""

    def store_exists(self, fs: FileSystem, root: str) -> bool:
        """Whether a store (or the debris of creating one) is there: any file in ``root``."""
        return fs.isdir(root) and bool(fs.listdir(root))

    @abstractmethod
    def session(self, fs: FileSystem, root: str) -> Session:
        """Open (or create) the store below ``root``."""

    # -- the oracle -----------------------------------------------------------------
    def empty_model(self) -> Any:
        """The model of a store nobody has written to."""
        return None

    @abstractmethod
    def check(self, fs: FileSystem, root: str, base: Any, acked: list[Step], inflight: Op | None) -> Any:
        """Reopen the store, check its contract; return the model of what was found.

        ``base`` is the model recovered before this run (``empty_model()`` for a fresh
        store), ``acked`` the operations acknowledged since then, in order, and
        ``inflight`` the operation that had started but not returned (it may or may
        not have taken effect).  Raise :class:`Violation` on any breach, including a
        failing ``verify()``.
        """

    # -- damage ---------------------------------------------------------------------
    @abstractmethod
    def snapshot(self, fs: FileSystem, root: str) -> Any:
        """Open the store read-only if possible and return everything it holds
        (comparable with ``==``).  Raises EngineError when it finds damage."""

    def damage_is_truncation(self, clean: Any, damaged: Any) -> bool:
        """Whether ``damaged`` is what cutting off a tail of ``clean`` gives."""
        return False

    # -- readers (attack 2) ---------------------------------------------------------
    def prepare_readers(self, fs: FileSystem, root: str, count: int) -> None:
        """Set up what ``count`` reader processes need (the store exists, no writer runs)."""
        return None

    def reader_loop(self, root: str, stop: Any) -> str | None:
        """Read ``root`` concurrently with a writer until ``stop()`` is true.

        Return ``None`` if every read was consistent, or a description of the first
        inconsistency; call :func:`count_read` after each consistent pass.  Only
        called when :attr:`concurrent_readers` is true.
        """
        return None


# -- reader passes (counted so that a run can show its readers really read) --------

_reader_passes = 0


def count_read() -> None:
    """Record one complete, consistent pass of a reader over the store."""
    global _reader_passes
    _reader_passes += 1


def reads_counted() -> int:
    """How many passes :func:`count_read` recorded in this process."""
    return _reader_passes


# -- self-describing payloads -------------------------------------------------------

_TAG = b"P"


def payload(seed: int, index: int, size: int) -> bytes:
    """Deterministic bytes that name themselves: ``P<index>:<size>:<digest8>:`` + filler.

    A reader that sees the bytes can check they are whole and unaltered without
    knowing what the writer did.
    """
    head = _TAG + f"{index}:{size}:".encode()
    filler_len = max(0, size - len(head) - 9)
    filler = _filler(seed, index, filler_len)
    digest = hashlib.blake2b(head + filler, digest_size=4).hexdigest().encode()
    return head + digest + b":" + filler


def _filler(seed: int, index: int, n: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.blake2b(f"{seed}/{index}/{counter}".encode(), digest_size=32).digest()
        counter += 1
    return bytes(out[:n])


def payload_ok(data: bytes) -> bool:
    """Whether ``data`` is one whole, unaltered :func:`payload`."""
    try:
        if not data.startswith(_TAG):
            return False
        index_s, size_s, digest, _rest = data[1:].split(b":", 3)
        head = _TAG + index_s + b":" + size_s + b":"
        filler = data[len(head) + 9 :]
        return hashlib.blake2b(head + filler, digest_size=4).hexdigest().encode() == digest
    except ValueError:
        return False


# -- reported truncations ------------------------------------------------------------


@dataclass
class WarningCapture:
    """Warnings logged under the ``engine`` logger while a block ran."""

    records: list[logging.LogRecord] = field(default_factory=list)

    @property
    def reported(self) -> bool:
        return bool(self.records)

    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


class _Collect(logging.Handler):
    def __init__(self, capture: WarningCapture) -> None:
        super().__init__(level=logging.WARNING)
        self.capture = capture

    def emit(self, record: logging.LogRecord) -> None:
        self.capture.records.append(record)


@contextmanager
def capture_warnings() -> Iterator[WarningCapture]:
    """Collect what the stores report (torn tails cut off, repairs) while the block runs."""
    capture = WarningCapture()
    handler = _Collect(capture)
    logger = logging.getLogger("engine")
    old_propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False  # keep a run of thousands of crash states quiet
    try:
        yield capture
    finally:
        logger.removeHandler(handler)
        logger.propagate = old_propagate


def describe_ops(ops: list[Op], limit: int = 60) -> str:
    """A workload as Python source, short enough to paste into a test."""
    shown = [_short(op) for op in ops[:limit]]
    more = f", ... {len(ops) - limit} more" if len(ops) > limit else ""
    return "[" + ", ".join(shown) + more + "]"


def _short(op: Op) -> str:
    parts = []
    for part in op:
        if isinstance(part, bytes) and len(part) > 16:
            parts.append(f"<{len(part)} bytes>")
        else:
            parts.append(repr(part))
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def split_payloads(data: bytes) -> list[bytes] | None:
    """Cut a concatenation of :func:`payload` values apart; None if it is not one."""
    out = []
    pos = 0
    while pos < len(data):
        try:
            _index, size_s, _rest = data[pos + 1 : pos + 64].split(b":", 2)
            size = int(size_s)
        except ValueError:
            return None
        piece = data[pos : pos + size]
        if size <= 0 or len(piece) != size or not payload_ok(piece):
            return None
        out.append(piece)
        pos += size
    return out


#: The smallest size :func:`payload` keeps exactly (header and digest fit).
MIN_PAYLOAD = 40


def first_difference(a: bytes, b: bytes) -> int:
    """The first offset where ``a`` and ``b`` differ (the shorter length if one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
