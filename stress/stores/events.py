"""Stress adapter for the event journal (``engine.events``, file-journal format).

Workload: atomic batches of 1 to 5 events for three persistence ids (each batch
continues its id's sequence by one) and ``delete_to`` at random points.
``sync="always"``.

Oracle (issue 9: "batches whole or absent, sequence numbers contiguous"):

* per id, replay yields contiguous sequence numbers from ``lowest`` to ``highest``
  with exactly the payloads written;
* ``highest`` is a batch boundary: the end of an acknowledged batch, or of the
  batch in flight for that id (never part of a batch);
* every acknowledged batch is there (``highest`` never goes backwards);
* ``lowest`` is right after the last acknowledged ``delete_to`` (or the one in
  flight), and nothing else disappears;
* ``verify()`` passes; readers beside the writer see only whole, contiguous batches;
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
from engine.events import EventJournal
from engine.fs import FileSystem, OsFileSystem, make_dirs
from stress.core import MIN_PAYLOAD, Op, Session, Step, StoreAdapter, Violation, count_read, payload, payload_ok

IDS = ("alpha", "beta", "gamma")

#: What an event journal's open may repair (its RecoveryReport's kinds): a torn or
#: uncommitted tail cut, a chain tip's link and the data length reset, meta entries
#: rebuilt from the chains, a stray meta.tmp removed.
OPEN_REPAIRS = frozenset({"cut", "reset", "rebuilt", "removed"})


class EventsSession(Session):
    def __init__(self, fs: FileSystem, root: str) -> None:
        self.journal = EventJournal.open(root, sync="always", fs=fs)

    def run(self, op: Op) -> Any:
        pid = IDS[op[1] % len(IDS)]
        highest = self.journal.highest_sequence_nr(pid)
        if op[0] == "write":
            events = [(highest + 1 + i, payload(0, tag, size)) for i, (tag, size) in enumerate(op[2])]
            self.journal.write(pid, events)
            return ("write", pid, highest + 1, highest + len(events))
        lowest = self.journal.lowest_sequence_nr(pid)
        to = lowest - 1 + int(op[2] * (highest - lowest + 2))
        self.journal.delete_to(pid, to)
        return ("delete", pid, to)

    def close(self) -> None:
        self.journal.close()


@dataclass
class IdModel:
    events: dict[int, bytes] = field(default_factory=dict)
    lowest: int = 1
    highest: int = 0


@dataclass
class EventsModel:
    ids: dict[str, IdModel] = field(default_factory=dict)


IdState = tuple[int, int, list[tuple[int, bytes]]]


def read_journal(fs: FileSystem, root: str, *, writer: bool = True) -> dict[str, IdState]:
    """Every id's (lowest, highest, replayed events), after recovery and verify.

    The writer's open must report only repairs it can make, and reopening after
    it must find nothing more to repair.
    """
    journal = EventJournal.open(root, sync="always", fs=fs) if writer else EventJournal.open_reader(root, fs=fs)
    try:
        odd = [str(a) for a in journal.recovery.actions if a.kind not in OPEN_REPAIRS]
        if odd:
            raise Violation(f"opening the event journal reported repairs it never makes: {odd}")
        journal.verify()
        out = {}
        for pid in journal.persistence_ids():
            events = [(e.sequence_nr, e.payload) for e in journal.replay(pid)]
            out[pid] = (journal.lowest_sequence_nr(pid), journal.highest_sequence_nr(pid), events)
    finally:
        journal.close()
    if writer:
        with EventJournal.open(root, sync="always", fs=fs) as again:
            if again.recovery.repaired:
                raise Violation(f"a second open after recovery repaired again: {again.recovery.summary()}")
    return out


class EventsAdapter(StoreAdapter):
    name = "events"
    module = "engine.events"
    concurrent_readers = True

    def workload(self, rng: random.Random, n: int) -> list[Op]:
        ops: list[Op] = []
        for _ in range(n):
            k = rng.randrange(len(IDS))
            if rng.random() < 0.85:
                batch = tuple((rng.randrange(2**40), rng.randint(MIN_PAYLOAD, 200)) for _ in range(rng.randint(1, 5)))
                ops.append(("write", k, batch))
            else:
                ops.append(("delete", k, rng.random()))
        return ops

    def prepare(self, fs: FileSystem, root: str) -> None:
        make_dirs(fs, root)

    def session(self, fs: FileSystem, root: str) -> Session:
        return EventsSession(fs, root)

    def empty_model(self) -> Any:
        return EventsModel()

    def check(self, fs: FileSystem, root: str, base: Any, acked: list[Step], inflight: Op | None) -> Any:
        found = read_journal(fs, root)
        model: dict[str, IdModel] = {
            pid: IdModel(dict(m.events), m.lowest, m.highest) for pid, m in base.ids.items()
        }
        boundaries: dict[str, set[int]] = {pid: {m.highest} for pid, m in model.items()}
        for step in acked:
            kind, pid = step.result[0], step.result[1]
            m = model.setdefault(pid, IdModel())
            boundaries.setdefault(pid, {0})
            if kind == "write":
                first, last = step.result[2], step.result[3]
                if first != m.highest + 1:
                    raise Violation(f"{pid}: batch acknowledged from {first}, after highest {m.highest}")
                for i, (tag, size) in enumerate(step.op[2]):
                    m.events[first + i] = payload(0, tag, size)
                m.highest = last
                boundaries[pid].add(last)
            else:
                m.lowest = max(m.lowest, min(step.result[2], m.highest) + 1)
        in_pid = IDS[inflight[1] % len(IDS)] if inflight is not None else None
        result = EventsModel()
        for pid in set(found) | set(model):
            m = model.get(pid, IdModel())
            lowest, highest, events = found.get(pid, (1, 0, []))
            extra: dict[int, bytes] = {}
            allowed_highest = {m.highest}
            if inflight is not None and pid == in_pid and inflight[0] == "write":
                for i, (tag, size) in enumerate(inflight[2]):
                    extra[m.highest + 1 + i] = payload(0, tag, size)
                allowed_highest.add(m.highest + len(inflight[2]))
            if highest not in allowed_highest:
                raise Violation(
                    f"{pid}: highest sequence number {highest}, expected {sorted(allowed_highest)} "
                    f"(a batch is whole or absent; acknowledged batches survive)"
                )
            seqs = [s for s, _ in events]
            if seqs != list(range(lowest, highest + 1)):
                raise Violation(f"{pid}: replay yields {seqs[:20]}, not {lowest}..{highest} contiguous")
            may_delete = inflight is not None and pid == in_pid and inflight[0] == "delete"
            if lowest < m.lowest or (lowest > m.lowest and not may_delete):
                raise Violation(f"{pid}: lowest live sequence number {lowest}, expected {m.lowest}")
            for seq, data in events:
                expected = m.events.get(seq, extra.get(seq))
                if data != expected:
                    raise Violation(f"{pid}: event {seq} reads back {len(data)} bytes that differ from what was "
                                    f"written (whole payload: {payload_ok(data)})")
            result.ids[pid] = IdModel(dict(events), lowest, highest)
        return result

    def snapshot(self, fs: FileSystem, root: str) -> Any:
        return read_journal(fs, root, writer=False)

    def damage_is_truncation(self, clean: Any, damaged: Any) -> bool:
        # Cutting the data file loses whole batches at its end: each id keeps a prefix.
        for pid, (_lo, _hi, events) in damaged.items():
            c = clean.get(pid)
            if c is None or events != c[2][: len(events)]:
                return False
        return True

    def reader_loop(self, root: str, stop: Callable[[], bool]) -> str | None:
        fs = OsFileSystem()
        while not stop():
            try:
                found = read_journal(fs, root, writer=False)
            except (EngineError, FileNotFoundError):
                time.sleep(0.01)
                continue
            for pid, (lowest, highest, events) in found.items():
                seqs = [s for s, _ in events]
                if seqs != list(range(lowest, highest + 1)):
                    return f"reader: {pid} replays {seqs[:20]}, not {lowest}..{highest}"
                for seq, data in events:
                    if not payload_ok(data):
                        return f"reader: {pid} event {seq} is not a whole payload"
            count_read()
            time.sleep(0.005)
        return None


ADAPTER = EventsAdapter()
