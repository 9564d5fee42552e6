"""Readers in a process that is not the queue's writer (``Queue.open_reader``).

Such a reader finds new data by polling: when it has read everything, it waits
``poll_interval`` seconds (default 5 ms), then re-reads the newest writer file's
size and, if that file looks finished, re-lists the directory for a newer one.
This needs no inotify and works on any file system the writer can use; the cost is
up to one poll interval of latency and a stat per poll while idle.

The reader checkpoints its own file every ``checkpoint_interval`` seconds and on
close; the writer reads that file to decide which journal files it may delete.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from engine.errors import EngineError
from engine.fs import FileSystem, RecoveryReport
from engine.lifetime import close_when_dropped, keeper_of
from engine.queue import census, checkpoint, naming
from engine.queue.attach import attach_reader, reader_files
from engine.queue.compete import wait_round
from engine.queue.config import QueueConfig
from engine.queue.cursor import PollingSource
from engine.queue.reader import Item, Reader
from engine.queue.segments import Segment, earliest_id, find_tail
from engine.queue.shared import peek_facts, peek_tail

log = logging.getLogger("engine.queue")


class MovedItemSink(Protocol):
    """Where a remote reader moves items (error / expired): another queue's writer."""

    def put_moved(self, item: Item) -> int: ...

    def close(self) -> None: ...


#: Opens the writer of another queue of the same directory (``Queue.open``).
OpenQueue = Callable[..., MovedItemSink]


class RemoteReader(Reader):
    """A :class:`Reader` that owns its checkpoint thread and its punt queues.

    ``recovery`` says what attaching it clamped (empty when its file was clean).
    Dropped without :meth:`close` (or left open at exit), it is closed all the
    same, with a ResourceWarning: its thread holds its keeper (:mod:`engine.lifetime`).
    """

    def __init__(self, *args: Any, open_queue: OpenQueue, recovery: RecoveryReport, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recovery = recovery
        self._open_queue = open_queue
        self._stop = threading.Event()
        self._punt_queues: dict[str, MovedItemSink] = {}
        self.checkpoint_failure: BaseException | None = None
        self._keeper: RemoteReader = keeper_of(self)
        # (the keeper is this class's own object: engine.lifetime)
        self._thread = threading.Thread(target=self._keeper._loop, name=f"queue-reader-{self.name}", daemon=True)
        self._thread.start()
        # Dropped, or left open at exit: checkpointed and unlocked, with a ResourceWarning.
        what = f"reader {self.name!r} of queue {self.queue!r}"
        self._finalizer = close_when_dropped(self, self._keeper.close, self._keeper.background_threads, what)

    def background_threads(self) -> list[threading.Thread | None]:
        """The thread this reader runs (its checkpoints)."""
        return [self._thread]

    def _loop(self) -> None:
        """Checkpoint every interval; a failure is kept in ``checkpoint_failure``,
        logged once per run of failures, and retried (as the writer's loop)."""
        while wait_round(self._stop, self._config.checkpoint_interval):
            try:
                self.checkpoint()
            except (EngineError, OSError) as exc:
                if self.checkpoint_failure is None:
                    log.error(
                        "queue %s reader %r: checkpoint failed (retried every interval): %s", self.queue, self.name, exc
                    )
                self.checkpoint_failure = exc
                continue
            if self.checkpoint_failure is not None:
                log.warning("queue %s reader %r: checkpoints work again", self.queue, self.name)
                self.checkpoint_failure = None

    def punt_to(self, target: str, item: Item) -> None:
        """Move an item to another queue: this process opens that queue's writer."""
        other = self._punt_queues.get(target)
        if other is None:
            other = self._open_queue(self.directory, target, fs=self._fs, clock=self._clock, sync=self._config.sync)
            self._punt_queues[target] = other
        other.put_moved(item)

    def close(self, *, checkpoint_first: bool = True) -> None:
        """Stop the checkpoint thread, checkpoint, release the reader's lock and
        close the queues items were moved to."""
        self._finalizer.detach()
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        try:
            super().close(checkpoint_first=checkpoint_first)
        finally:
            for other in self._punt_queues.values():
                other.close()

    def __enter__(self) -> RemoteReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_remote_reader(
    directory: str,
    queue: str,
    name: str,
    *,
    fs: FileSystem,
    clock: Callable[[], float],
    config: QueueConfig,
    open_queue: OpenQueue,
) -> RemoteReader:
    """See :meth:`Queue.open_reader` (which passes itself as ``open_queue``)."""
    config.check_names(queue)
    naming.check_reader_name(queue, name)
    source = PollingSource(fs, directory, queue, config.poll_interval)
    segments: list[Segment] = source.segment_list(fresh=True)
    if not segments:
        raise EngineError(f"{directory}: queue {queue!r} has no writer files (open it with Queue.open first)")
    census.check_no_links(fs, directory, queue)
    tail = max(find_tail(fs, segments), peek_tail(fs, directory, queue))
    earliest = earliest_id(segments)
    window: int | None = checkpoint.crash_window(config.journal_size)
    if earliest is None:
        # No file holds an item: the reader files are the only record of the last
        # id (as for the writer's open, see engine.queue.recover).
        window = None
        tail, _ = checkpoint.highest_mentioned(fs, reader_files(fs, directory, queue).values(), tail, None)
    report = RecoveryReport(path=naming.join(directory, naming.reader_name(queue, name)))
    lost = census.newest_damage(fs, directory, queue, segments, peek_facts(fs, directory, queue))
    if lost is not None:  # (the producers' next open reports and repairs it too)
        report.add("reset", lost.path, 1, "files", detail=str(lost))
    lock, state = attach_reader(
        fs,
        directory,
        queue,
        name,
        tail=tail,
        earliest=earliest,
        stamp_ms=int(clock() * 1000),
        report=report,
        window=window,
    )
    report.log(log)
    holder: list[RemoteReader] = []

    def current_tail() -> int:
        return max(tail, holder[0].last_read_id) if holder else tail

    def punt(target: str, item: Item) -> None:
        holder[0].punt_to(target, item)

    reader = RemoteReader(
        name=name,
        queue=queue,
        directory=directory,
        fs=fs,
        source=source,
        state=state,
        config=config,
        lock=lock,
        clock=clock,
        punt=punt,
        tail=current_tail,
        open_queue=open_queue,
        recovery=report,
    )
    holder.append(reader._keeper)  # (its own keeper) the closures above must not keep ``reader`` alive
    if report.repaired:
        reader.mark_dirty()
    return reader
