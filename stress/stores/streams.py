"""Stress adapter for the stream journal (``engine.streams``, journald format).

Workload: open streams, write self-describing payloads to them (several streams
interleaved), close (EOS, durable on return) or abort them.  The journal is small
(64 pages of 512 bytes) so that longer runs wrap it.

Oracle (issue 9: "closed streams complete and byte-identical, aborted never complete"):

* a stream whose ``close()`` returned reads back complete with exactly the bytes
  written to it, unless the journal may have wrapped since (a wrap starts the file
  over at page 1, so everything before it is gone at once);
* a stream reads as complete only if its close was acknowledged or in flight, and
  then with exactly its bytes;
* an aborted stream never reads as complete;
* ``verify()`` passes after recovery;
* the writer's open reports (``journal.recovery``) only the repairs a crash can call
  for, and a second open after it reports none (recovery finishes its work).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import EngineError
from engine.fs import FileSystem, OsFileSystem, make_dirs
from engine.streams import StreamJournal, read_streams
from stress.core import (
    MIN_PAYLOAD,
    Op,
    Session,
    Step,
    StoreAdapter,
    Violation,
    count_read,
    first_difference,
    payload,
    split_payloads,
)

PAGE = 512
PAGES = 64

#: What a stream journal's open may repair (its RecoveryReport's kinds): a torn
#: transaction cut (zeroed), streams a dead writer left open aborted (undone).
OPEN_REPAIRS = frozenset({"cut", "undone"})


def _path(root: str) -> str:
    return root.rstrip("/") + "/journal"


class StreamsSession(Session):
    def __init__(self, fs: FileSystem, root: str) -> None:
        self.journal = StreamJournal.open(_path(root), size=PAGE * PAGES, page_size=PAGE, sync_delay=0.0, fs=fs)
        self.open: list[Any] = []

    def _pick(self, k: int) -> Any:
        return self.open[k % len(self.open)] if self.open else None

    def run(self, op: Op) -> Any:
        kind = op[0]
        wraps = self.journal.wraps
        if kind == "open":
            stream = self.journal.open_stream(f"s{op[1]}")
            self.open.append(stream)
            return ("open", stream.ident.decode(), wraps)
        stream = self._pick(op[1])
        if stream is None:
            return None
        ident = stream.ident.decode()
        if kind == "write":
            stream.write(payload(0, op[2], op[3]))
            return ("write", ident, self.journal.wraps)
        self.open.remove(stream)
        if kind == "close":
            stream.close()
            return ("close", ident, self.journal.wraps)
        stream.abort()
        return ("abort", ident, self.journal.wraps)

    def close(self) -> None:
        self.journal.close()


@dataclass
class StreamsModel:
    """What a recovered journal held: complete streams' data, aborted idents."""

    complete: dict[str, bytes] = field(default_factory=dict)
    aborted: set[str] = field(default_factory=set)


class StreamsAdapter(StoreAdapter):
    name = "streams"
    module = "engine.streams"
    checksummed = True
    concurrent_readers = True
    # The journal is preallocated: once created it never needs more space, so real
    # ENOSPC can only hit its creation.
    enospc_room = 16 * 1024

    def workload(self, rng: random.Random, n: int) -> list[Op]:
        ops: list[Op] = []
        for _ in range(n):
            r = rng.random()
            if r < 0.25:
                ops.append(("open", rng.randrange(2**40)))
            elif r < 0.7:
                ops.append(("write", rng.randrange(8), rng.randrange(2**40), rng.randint(MIN_PAYLOAD, 700)))
            elif r < 0.9:
                ops.append(("close", rng.randrange(8)))
            else:
                ops.append(("abort", rng.randrange(8)))
        return ops

    def is_write(self, op: Op) -> bool:
        return op[0] in ("close", "abort")  # open and write only buffer in memory

    def prepare(self, fs: FileSystem, root: str) -> None:
        make_dirs(fs, root)

    def store_exists(self, fs: FileSystem, root: str) -> bool:
        return fs.exists(_path(root))

    def session(self, fs: FileSystem, root: str) -> Session:
        return StreamsSession(fs, root)

    def empty_model(self) -> Any:
        return StreamsModel()

    def _read(self, fs: FileSystem, root: str) -> tuple[list[Any], int]:
        journal = StreamJournal.open(_path(root), create=False, fs=fs)
        try:
            odd = [str(a) for a in journal.recovery.actions if a.kind not in OPEN_REPAIRS]
            if odd:
                raise Violation(f"opening the stream journal reported repairs it never makes: {odd}")
            journal.verify()
            wraps = journal.wraps
        finally:
            journal.close()
        with StreamJournal.open(_path(root), create=False, fs=fs) as again:
            if again.recovery.repaired:
                raise Violation(f"a second open after recovery repaired again: {again.recovery.summary()}")
        return list(read_streams(_path(root), fs)), wraps

    def check(self, fs: FileSystem, root: str, base: Any, acked: list[Step], inflight: Op | None) -> Any:
        if not fs.exists(_path(root)):
            if base.complete or any(s.result and s.result[0] == "close" for s in acked):
                raise Violation("the journal file is gone although streams were closed")
            return StreamsModel()
        streams, recovery_wraps = self._read(fs, root)  # an EngineError here fails the run
        written: dict[str, list[bytes]] = {}
        closed_at: dict[str, int] = {}  # ident -> position in acked of its close
        aborted = set(base.aborted)
        last_wraps = 0
        wrap_after: list[int] = []  # acked positions where the wrap counter grew
        for i, step in enumerate(acked):
            if step.result is None:
                continue
            kind, ident, wraps = step.result
            if wraps > last_wraps:
                wrap_after.append(i)
                last_wraps = wraps
            if kind == "write":
                written.setdefault(ident, []).append(payload(0, step.op[2], step.op[3]))
            elif kind == "close":
                closed_at[ident] = i
            elif kind == "abort":
                aborted.add(ident)
        # Anything may be gone if a wrap happened (or may have) after it was closed.
        inflight_may_wrap = inflight is not None and inflight[0] != "open"

        def may_be_gone(position: int) -> bool:
            return inflight_may_wrap or recovery_wraps > 0 or any(w > position for w in wrap_after)

        found: dict[str, Any] = {}
        for st in streams:
            ident = st.ident.decode(errors="replace")
            if st.complete:
                if ident in found and found[ident].complete:
                    raise Violation(f"stream {ident} reads complete twice")
                found[ident] = st
        model = StreamsModel(aborted=aborted)
        for ident, st in found.items():
            if ident in aborted:
                raise Violation(f"aborted stream {ident} reads as complete")
            if ident in base.complete:
                expected = base.complete[ident]
            elif ident in closed_at:
                expected = b"".join(written.get(ident, []))
            elif inflight is not None and inflight[0] == "close":
                expected = b"".join(written.get(ident, []))  # the close in flight may have landed
            else:
                raise Violation(f"stream {ident} reads complete but was never closed")
            if st.data != expected:
                raise Violation(
                    f"stream {ident} reads complete with {len(st.data)} bytes that differ from the "
                    f"{len(expected)} bytes written (first difference at {first_difference(st.data, expected)})"
                )
            model.complete[ident] = st.data
        for ident, position in closed_at.items():
            if ident not in found and not may_be_gone(position):
                raise Violation(f"stream {ident} was closed (op {position} acknowledged) but does not read complete")
        for ident in base.complete:
            if ident not in found and not may_be_gone(-1):
                raise Violation(f"stream {ident}, complete after the previous recovery, is gone")
        return model

    def snapshot(self, fs: FileSystem, root: str) -> Any:
        # A reader, not the writer: a damaged file must be reported by read_streams
        # itself, and opening the writer would repair (cut) the tail first.
        return [(s.number, s.ident, s.start_offset, s.data, s.status) for s in read_streams(_path(root), fs)]

    def damage_is_truncation(self, clean: Any, damaged: Any) -> bool:
        # A cut journal loses whole transactions at its end: the streams that are
        # complete in the damaged copy are complete and identical in the clean one.
        clean_complete = {s[0]: s for s in clean if s[4] == "complete"}
        return all(clean_complete.get(s[0]) == s for s in damaged if s[4] == "complete")

    def reader_loop(self, root: str, stop: Callable[[], bool]) -> str | None:
        fs = OsFileSystem()
        path = _path(root)
        while not stop():
            try:
                streams = list(read_streams(path, fs))
            except FileNotFoundError:
                time.sleep(0.01)
                continue
            except EngineError as exc:
                # A live journal reads as what is committed: a transaction being
                # written (or a new lap) is never damage.
                return f"a reader of the live journal failed: {type(exc).__name__}: {exc}"
            for st in streams:
                if st.complete and st.data and split_payloads(st.data) is None:
                    return f"stream {st.ident!r} reads complete but its data is not whole payloads"
            count_read()
            time.sleep(0.005)
        return None


ADAPTER = StreamsAdapter()
