"""Stress adapter for the queue (``engine.queue``, libkestrel journal format).

Workload: puts of self-describing payloads, gets (open reads) on the default
reader, confirms and aborts of open reads in any order, explicit checkpoints.
``sync="always"`` (an acknowledged put is durable), small journal files (1 KiB) so
that files rotate and are retired, and no background checkpoints (interval of an
hour) so that what is checkpointed is exactly what the workload asked for.

Oracle (issue 9: "nothing confirmed and checkpointed comes back; everything
acknowledged and not confirmed does; ids unique and increasing"):

* the items the default reader delivers after recovery have unique, increasing ids,
  and each is an item that was put (acknowledged, or the put in flight) with
  exactly its bytes;
* every acknowledged put is delivered unless it was confirmed and a checkpoint was
  acknowledged after the confirm;
* no confirmed-and-checkpointed item is delivered;
* ids of new puts are above every id the store ever handed out;
* ``verify()`` passes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import LockedError
from engine.fs import FileSystem, OsFileSystem, make_dirs, probe_lock
from engine.queue import Queue
from stress.core import MIN_PAYLOAD, Op, Session, Step, StoreAdapter, Violation, count_read, payload, payload_ok

NAME = "jobs"
OPTIONS: dict[str, Any] = {"sync": "always", "journal_size": 1024, "checkpoint_interval": 3600.0}


class QueueSession(Session):
    def __init__(self, fs: FileSystem, root: str) -> None:
        self.queue = Queue.open(root, NAME, fs=fs, **OPTIONS)
        self.reader = self.queue.reader("")
        self.open: list[int] = []

    def run(self, op: Op) -> Any:
        kind = op[0]
        if kind == "put":
            return ("put", self.queue.put(payload(0, op[1], op[2])))
        if kind == "get":
            item = self.reader.get(timeout=0)
            if item is None:
                return ("get", None)
            self.open.append(item.id)
            return ("get", item.id)
        if kind == "checkpoint":
            self.queue.checkpoint()
            return ("checkpoint",)
        if not self.open:
            return None
        xid = self.open.pop(op[1] % len(self.open))
        if kind == "confirm":
            self.reader.confirm(xid)
            return ("confirm", xid)
        self.reader.abort(xid)
        return ("abort", xid)

    def close(self) -> None:
        self.queue.close()


@dataclass
class QueueModel:
    """What a recovered queue delivers: id -> data, and the highest id ever seen."""

    items: dict[int, bytes] = field(default_factory=dict)
    max_id: int = 0


#: What a queue's open may repair (its RecoveryReport's kinds): a torn tail cut, a
#: half-created file's header rebuilt, stray temporaries removed, lost ids skipped
#: (reset), reader heads clamped (reset) or done ids outside the journal dropped.
OPEN_REPAIRS = frozenset({"cut", "rebuilt", "removed", "reset", "dropped"})


def read_queue(fs: FileSystem, root: str) -> list[tuple[int, bytes]]:
    """Open the queue, verify it, and list what the default reader delivers.

    The reads are left open and the reader closed without a checkpoint, so this
    changes nothing the next writer would see (open reads are never journaled).
    """
    queue = Queue.open(root, NAME, fs=fs, **OPTIONS)
    try:
        odd = [str(a) for a in queue.recovery.actions if a.kind not in OPEN_REPAIRS]
        if odd:
            raise Violation(f"opening the queue reported repairs it never makes: {odd}")
        queue.verify()
        reader = queue.reader("")
        out = []
        while True:
            item = reader.get(timeout=0)
            if item is None:
                break
            out.append((item.id, item.data))
        reader.close(checkpoint_first=False)
    finally:
        queue.close()
    return out


READER_PREFIX = "stress-r"


class QueueAdapter(StoreAdapter):
    name = "queue"
    module = "engine.queue"
    concurrent_readers = True

    def workload(self, rng: random.Random, n: int) -> list[Op]:
        ops: list[Op] = []
        for _ in range(n):
            r = rng.random()
            if r < 0.4:
                ops.append(("put", rng.randrange(2**40), rng.randint(MIN_PAYLOAD, 300)))
            elif r < 0.65:
                ops.append(("get",))
            elif r < 0.8:
                ops.append(("confirm", rng.randrange(8)))
            elif r < 0.88:
                ops.append(("abort", rng.randrange(8)))
            else:
                ops.append(("checkpoint",))
        return ops

    def is_write(self, op: Op) -> bool:
        return op[0] in ("put", "checkpoint")

    def prepare(self, fs: FileSystem, root: str) -> None:
        make_dirs(fs, root)

    def session(self, fs: FileSystem, root: str) -> Session:
        return QueueSession(fs, root)

    def empty_model(self) -> Any:
        return QueueModel()

    def check(self, fs: FileSystem, root: str, base: Any, acked: list[Step], inflight: Op | None) -> Any:
        if not fs.exists(root):
            if acked or base.items:
                raise Violation("the queue directory is gone")
            return QueueModel()
        delivered = read_queue(fs, root)
        known = dict(base.items)  # id -> data of every item that may be delivered
        must: set[int] = set(base.items)
        confirmed_pending: set[int] = set()  # confirmed, no checkpoint acknowledged since
        gone: set[int] = set()  # confirmed and checkpointed
        max_id = base.max_id
        for step in acked:
            if step.result is None:
                continue
            kind = step.result[0]
            if kind == "put":
                xid = step.result[1]
                if xid <= max_id:
                    raise Violation(f"put returned id {xid}, not above the highest id so far {max_id}")
                max_id = xid
                known[xid] = payload(0, step.op[1], step.op[2])
                must.add(xid)
            elif kind == "confirm":
                confirmed_pending.add(step.result[1])
            elif kind == "checkpoint":
                gone |= confirmed_pending
                confirmed_pending.clear()
        inflight_data = payload(0, inflight[1], inflight[2]) if inflight is not None and inflight[0] == "put" else None
        ids = [xid for xid, _ in delivered]
        if ids != sorted(set(ids)):
            raise Violation(f"delivered ids are not unique and increasing: {ids[:50]}")
        seen = set()
        new_max = max_id
        for xid, data in delivered:
            seen.add(xid)
            if xid in gone:
                raise Violation(f"item {xid} was confirmed and checkpointed but is delivered again")
            if xid in known:
                if data != known[xid]:
                    raise Violation(f"item {xid} is delivered with {len(data)} bytes that differ from what was put")
            elif inflight_data is not None and xid > max_id and data == inflight_data:
                new_max = max(new_max, xid)
            else:
                raise Violation(f"item {xid} ({len(data)} bytes, whole payload: {payload_ok(data)}) was never put")
        missing = sorted((must - confirmed_pending - gone) - seen)
        if missing:
            raise Violation(f"acknowledged, unconfirmed items are lost: {missing[:20]} (of {len(missing)})")
        return QueueModel(items=dict(delivered), max_id=max(new_max, max(ids, default=0)))

    def snapshot(self, fs: FileSystem, root: str) -> Any:
        return read_queue(fs, root)

    def damage_is_truncation(self, clean: Any, damaged: Any) -> bool:
        # The newest file's torn tail is cut: the last items go, the rest is unchanged.
        return list(damaged) == list(clean)[: len(damaged)]

    def prepare_readers(self, fs: FileSystem, root: str, count: int) -> None:
        """Create fanout readers ``stress-r<i>`` for the reader processes.

        The default reader is held open meanwhile, so that the new readers start at
        the tail instead of taking over the default reader's backlog (the first
        named reader would, by the fanout rule), which the oracle reads.
        """
        queue = Queue.open(root, NAME, fs=fs, **OPTIONS)
        try:
            queue.reader("")
            for i in range(count):
                queue.reader(f"{READER_PREFIX}{i}")
        finally:
            queue.close()

    def reader_loop(self, root: str, stop: Callable[[], bool]) -> str | None:
        """A fanout reader in its own process: get + confirm everything, forever.

        Whatever it gets must be a whole payload, and ids must increase strictly
        (this reader never aborts, so nothing is delivered twice), across crashes
        and restarts of the writer.
        """
        fs = OsFileSystem()
        reader = None
        for i in range(16):
            name = f"{READER_PREFIX}{i}"
            if probe_lock(fs, f"{root}/{NAME}.rlock.{name}"):
                continue  # another reader process has it (opening would compete for it)
            try:
                reader = Queue.open_reader(root, NAME, name, fs=fs, checkpoint_interval=0.05)
            except LockedError:
                continue
            if reader.sharing():  # taken meanwhile: this loop wants a name of its own
                reader.close()
                reader = None
                continue
            break
        if reader is None:
            return "no free stress reader name"
        last = 0
        try:
            while not stop():
                item = reader.get(timeout=0.05)
                if item is None:
                    continue
                if item.id <= last:
                    return f"fanout reader got id {item.id} after {last}"
                if not payload_ok(item.data):
                    return f"fanout reader got item {item.id} whose data is not a whole payload"
                last = item.id
                reader.confirm(item.id)
                count_read()
        finally:
            reader.close()
        return None


ADAPTER = QueueAdapter()
