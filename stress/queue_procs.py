"""Queue producers and consumers in real processes that join, leave and die,
judged by their recorded histories.

``python -m stress.queue_procs --seconds 60 --seed 1`` (``python -m stress
--store queue --seconds N`` runs it too, and ``tests/queue/test_queue_history.py``
a few seconds of it).  Producer processes open one queue (``sync="always"``,
small journal files so that they rotate and retire) and put self-describing
items, one at a time or a few with ``put_many``; consumer processes read it with
``Queue.open_reader``: several share each reader name (competing consumers) and
there are two names (fanout).  A consumer gets, holds up to three items, then
confirms or aborts one, now and then checkpoints explicitly.

At random moments (``--interval`` seconds apart on average) the parent makes
one of: a producer or a consumer *joins* (a new process), a running one *leaves*
(told on its stdin, it closes cleanly and exits), or one is *killed* (SIGKILL;
half the time a replacement joins at once).  Every process logs what it invoked
and what came back (``stress/history.py``); the parent logs starts, kills (before
the signal) and exits.  At the end every child still running is killed, the
queue is reopened and every reader name drained (logged too), ``verify()`` runs,
and ``stress/checker.py`` judges the whole history.

:func:`compete` is the issue-27 case of competing consumers with no crash:
items in a queue, three processes start at once on one reader name, each
``get(timeout=0.2)``, sleeps 1 ms, confirms, and stops after an idle spell.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from stress.checker import Verdict, check
from stress.history import HistoryLog, digest, load_dir

QUEUE = "q"
OPTIONS = {"sync": "always", "journal_size": 4096, "checkpoint_interval": 0.05, "pin_warning": None}
READERS = {"a": 3, "b": 2}  # reader name -> most consumers sharing it at once
ROOT = str(Path(__file__).resolve().parents[1])


# -- the children ------------------------------------------------------------------
def _told_to_leave() -> threading.Event:
    """Set when the parent writes ``leave`` on stdin (or closes it)."""
    leave = threading.Event()

    def listen() -> None:
        for line in sys.stdin:
            if line.strip() == "leave":
                break
        leave.set()

    threading.Thread(target=listen, daemon=True).start()
    return leave


def _producer(directory: str, log: HistoryLog, seed: int) -> None:
    from engine.queue import Queue

    leave = _told_to_leave()
    rng = random.Random(seed)
    log.log("open", "invoke", role="producer")
    q = Queue.open(directory, QUEUE, **OPTIONS)  # type: ignore[arg-type]
    log.log("open", "ok", role="producer")
    n = 0
    while not leave.is_set():
        batch = 1 if rng.random() < 0.8 else rng.randint(2, 4)
        payloads = [f"{log.proc}:{n + k}:".encode() + rng.randbytes(rng.randrange(300)) for k in range(batch)]
        log.log("put", "invoke", items=[[n + k, digest(p)] for k, p in enumerate(payloads)])
        ids = q.put_many(payloads) if batch > 1 else [q.put(payloads[0])]
        log.log("put", "ok", ids=ids)
        n += batch
        if rng.random() < 0.3:
            time.sleep(rng.random() * 0.004)
    log.log("close", "invoke")
    q.close()
    log.log("close", "ok")


def _consumer(directory: str, log: HistoryLog, reader: str, seed: int) -> None:
    from engine.queue import Queue

    leave = _told_to_leave()
    rng = random.Random(seed)
    log.log("open", "invoke", role="consumer", reader=reader)
    r = Queue.open_reader(directory, QUEUE, reader, poll_interval=0.002, checkpoint_interval=0.05)
    log.log("open", "ok", role="consumer", reader=reader)
    held: list[int] = []
    hold = rng.randint(1, 3)
    while not leave.is_set():
        item = r.get(timeout=0.05)
        if item is not None:
            log.log("get", "ok", reader=reader, id=item.id, digest=digest(item.data), errors=item.error_count)
            held.append(item.id)
        if held and (len(held) >= hold or item is None):
            xid = held.pop(rng.randrange(len(held)))
            what = "confirm" if rng.random() < 0.85 else "abort"
            log.log(what, "invoke", reader=reader, id=xid)
            done = r.confirm(xid) if what == "confirm" else r.abort(xid)
            log.log(what, "ok", reader=reader, id=xid, n=done)
            hold = rng.randint(1, 3)
        if rng.random() < 0.03:
            log.log("checkpoint", "invoke", reader=reader)
            r.checkpoint()
            log.log("checkpoint", "ok", reader=reader)
    log.log("close", "invoke", reader=reader)
    r.close()
    log.log("close", "ok", reader=reader)


def _worker(directory: str, log: HistoryLog, reader: str, idle: float) -> None:
    """The issue's competing consumer: get(timeout=0.2), 1 ms of work, confirm;
    stop after ``idle`` seconds without an item."""
    from engine.queue import Queue

    log.log("open", "invoke", role="consumer", reader=reader)
    r = Queue.open_reader(directory, QUEUE, reader)
    log.log("open", "ok", role="consumer", reader=reader)
    last = time.monotonic()
    while time.monotonic() - last < idle:
        item = r.get(timeout=0.2)
        if item is None:
            continue
        last = time.monotonic()
        log.log("get", "ok", reader=reader, id=item.id, digest=digest(item.data), errors=item.error_count)
        time.sleep(0.001)
        log.log("confirm", "invoke", reader=reader, id=item.id)
        done = r.confirm(item.id)
        log.log("confirm", "ok", reader=reader, id=item.id, n=done)
    log.log("close", "invoke", reader=reader)
    r.close()
    log.log("close", "ok", reader=reader)


def child_main(args: list[str]) -> int:
    """``python -m stress.queue_procs ROLE DIR LOG PROC READER EXTRA``: a child
    (``EXTRA``: its seed, or a worker's idle seconds)."""
    role, directory, path, proc, reader, extra = args[:6]
    with HistoryLog(path, proc) as log:
        if role == "producer":
            _producer(directory, log, int(extra))
        elif role == "consumer":
            _consumer(directory, log, reader, int(extra))
        else:
            _worker(directory, log, reader, float(extra))
    return 0


# -- the parent --------------------------------------------------------------------
@dataclass
class Child:
    proc: str
    role: str  # "producer" or "consumer"
    reader: str
    process: subprocess.Popen[str]
    err: IO[bytes]
    log: Path
    leaving_since: float | None = None

    def joined(self) -> bool:
        """Whether it has logged anything yet (its open, first)."""
        try:
            return self.log.stat().st_size > 0
        except FileNotFoundError:
            return False


class Run:
    """The parent of one run: starts, tells to leave, kills and reaps children,
    logging each in ``parent.jsonl`` of the log directory."""

    def __init__(self, directory: str, logdir: str) -> None:
        self.directory = directory
        self.logdir = Path(logdir)
        self.log = HistoryLog(self.logdir / "parent.jsonl", "parent")
        self.children: list[Child] = []
        self.started = 0

    def start(self, role: str, reader: str, extra: str) -> Child:
        """Start a child: ``role`` producer, consumer or worker (see
        :func:`child_main`), ``extra`` its seed (the worker's: its idle seconds)."""
        self.started += 1
        proc = f"p{self.started}" if role == "producer" else f"c{self.started}.{reader}"
        err = open(self.logdir / f"{proc}.err", "w+b")  # noqa: SIM115 (closed when reaped)
        process = subprocess.Popen(
            [sys.executable, "-m", "stress.queue_procs", role, self.directory, str(self.logdir / f"{proc}.jsonl"),
             proc, reader, extra],
            cwd=ROOT, stdin=subprocess.PIPE if role != "worker" else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=err, text=True,
        )
        self.log.log("start", "info", victim=proc, child_pid=process.pid)
        child = Child(proc, "consumer" if role == "worker" else role, reader, process, err,
                      self.logdir / f"{proc}.jsonl")
        self.children.append(child)
        return child

    def leave(self, child: Child) -> None:
        child.leaving_since = time.monotonic()
        assert child.process.stdin is not None
        try:
            child.process.stdin.write("leave\n")
            child.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it is gone already: the next reap sees it

    def kill(self, child: Child) -> None:
        # Logged before the signal: the child holds nothing after it died, which is
        # some time after this moment (the checker relies on that order).
        self.log.log("kill", "info", victim=child.proc, child_pid=child.process.pid)
        child.process.kill()
        child.process.wait()
        self._reaped(child)

    def reap(self, stuck: float = 30.0) -> None:
        """Log the children that exited; kill one that was told to leave
        ``stuck`` seconds ago and is still there."""
        for child in list(self.children):
            if child.process.poll() is not None:
                self._reaped(child)
            elif child.leaving_since is not None and time.monotonic() - child.leaving_since > stuck:
                self.kill(child)

    def _reaped(self, child: Child) -> None:
        child.err.seek(0)
        tail = child.err.read()[-2000:].decode(errors="replace")
        child.err.close()
        if child.process.stdin is not None:
            try:
                child.process.stdin.close()
            except OSError:
                pass
        self.log.log("exit", "info", victim=child.proc, status=child.process.returncode, stderr=tail)
        self.children.remove(child)

    def live(self, role: str | None = None, reader: str | None = None) -> list[Child]:
        return [c for c in self.children if c.leaving_since is None and (role is None or c.role == role)
                and (reader is None or c.reader == reader)]

    def stop(self) -> None:
        """Kill every child still there."""
        self.reap()
        for child in list(self.children):
            self.kill(child)

    def drain(self, readers: list[str], options: dict[str, object]) -> None:
        """Reopen the queue, drain every reader name (each logged as ``drain.NAME``)
        and verify the queue."""
        from engine.queue import Queue

        with Queue.open(self.directory, QUEUE, **options) as q:  # type: ignore[arg-type]
            for name in readers:
                with HistoryLog(self.logdir / f"drain.{name}.jsonl", f"drain.{name}") as log:
                    log.log("open", "ok", role="drain", reader=name)
                    r = q.reader(name)
                    while (item := r.get(timeout=0)) is not None:
                        log.log("get", "ok", reader=name, id=item.id, digest=digest(item.data),
                                errors=item.error_count)
                        log.log("confirm", "invoke", reader=name, id=item.id)
                        log.log("confirm", "ok", reader=name, id=item.id, n=r.confirm(item.id))
            try:
                q.verify()
            except Exception as exc:  # a finding: the checker reports it
                self.log.log("verify", "fail", error=f"{type(exc).__name__}: {exc}")
            else:
                self.log.log("verify", "ok")

    def close(self) -> None:
        self.log.close()


def _create_readers(directory: str, readers: list[str], options: dict[str, object]) -> None:
    from engine.queue import Queue

    with Queue.open(directory, QUEUE, **options) as q:  # type: ignore[arg-type]
        for name in readers:
            q.reader(name).close()  # created at the tail, before any put: they see everything


def run(directory: str, logdir: str, seconds: float, seed: int, *, producers: int = 3,
        readers: dict[str, int] | None = None, interval: float = 0.25) -> Verdict:
    """Run producers (at most ``producers`` at once) and consumers (at most
    ``readers[name]`` per reader name) that join, leave and are killed for
    ``seconds``; drain, verify, and judge the history (logs in ``logdir``)."""
    readers = dict(READERS if readers is None else readers)
    names = sorted(readers)
    _create_readers(directory, names, OPTIONS)
    rng = random.Random(seed)
    parent = Run(directory, logdir)
    try:
        parent.start("producer", "", str(rng.randrange(2**32)))
        for name in names:
            for _ in range(min(2, readers[name])):
                parent.start("consumer", name, str(rng.randrange(2**32)))
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, rng.expovariate(1 / interval)))
            parent.reap()
            _step(parent, rng, producers, readers)
        parent.stop()
        parent.drain(names, OPTIONS)
    finally:
        for child in list(parent.children):
            parent.kill(child)
        parent.close()
    return check(load_dir(logdir))


def _step(parent: Run, rng: random.Random, producers: int, readers: dict[str, int]) -> None:
    """One random event: a join, a leave or a kill (half the time followed by a
    join of the same role)."""
    choices: list[tuple[str, str, float]] = []
    count = len(parent.live("producer"))
    if count < producers:
        choices.append(("join", "", 3.0 if count == 0 else 1.0))
    for name, most in readers.items():
        count = len(parent.live("consumer", name))
        if count < most:
            choices.append(("join", name, 3.0 if count == 0 else 1.0))
    if parent.live():
        choices += [("leave", "", 1.2), ("kill", "", 1.5)]
    what, reader, _ = rng.choices(choices, weights=[w for _, _, w in choices])[0]
    if what == "join":
        role = "consumer" if reader else "producer"
        parent.start(role, reader, str(rng.randrange(2**32)))
        return
    # Mostly a child that has joined (logged its open): a kill while Python
    # starts proves little; now and then one that is still starting or opening.
    joined = [c for c in parent.live() if c.joined()]
    child = rng.choice(joined if joined and rng.random() < 0.8 else parent.live())
    if what == "leave":
        parent.leave(child)
        return
    parent.kill(child)
    if rng.random() < 0.5:
        parent.start(child.role, child.reader, str(rng.randrange(2**32)))


def compete(directory: str, logdir: str, items: int = 2000, consumers: int = 3, idle: float = 1.0,
            timeout: float = 300.0) -> Verdict:
    """The issue's competing consumers, no crash: ``items`` put, then ``consumers``
    processes started at once on the reader name ``w`` (see :func:`_worker`);
    drained and judged like a run."""
    from engine.queue import Queue

    _create_readers(directory, ["w"], {})
    with HistoryLog(Path(logdir) / "p0.jsonl", "p0") as log:
        log.log("open", "invoke", role="producer")
        with Queue.open(directory, QUEUE) as q:
            log.log("open", "ok", role="producer")
            for first in range(0, items, 100):
                payloads = [f"p0:{n}:".encode() for n in range(first, min(items, first + 100))]
                log.log("put", "invoke", items=[[first + k, digest(p)] for k, p in enumerate(payloads)])
                log.log("put", "ok", ids=q.put_many(payloads))
            log.log("close", "invoke")
        log.log("close", "ok")
    parent = Run(directory, logdir)
    try:
        for _ in range(consumers):
            parent.start("worker", "w", str(idle))
        deadline = time.monotonic() + timeout
        while parent.children and time.monotonic() < deadline:
            time.sleep(0.05)
            parent.reap()
        parent.stop()
        parent.drain(["w"], {})
    finally:
        for child in list(parent.children):
            parent.kill(child)
        parent.close()
    return check(load_dir(logdir))


def summary(verdict: Verdict) -> str:
    """One line of the counts."""
    c: Counter[str] = verdict.counts
    return (f"{c['starts']} processes started, {c['joins']} joins ({c['producer joins']} producers, "
            f"{c['consumer joins']} consumers), "
            f"{c['leaves']} leaves, {c['kills']} kills, {c['puts']} acknowledged puts, {c['deliveries']} deliveries "
            f"({c['confirms']} confirms, {c['aborts']} aborts), {len(verdict.violations)} violation(s)")


def run_checked(seconds: float, seed: int) -> Verdict:
    """One run with the default cast, in a scratch directory (``python -m stress``
    calls this)."""
    with tempfile.TemporaryDirectory(prefix="stress-queue-procs-") as scratch:
        os.mkdir(f"{scratch}/q")
        os.mkdir(f"{scratch}/logs")
        return run(f"{scratch}/q", f"{scratch}/logs", seconds, seed)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("producer", "consumer", "worker"):
        return child_main(args)
    parser = argparse.ArgumentParser(prog="python -m stress.queue_procs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--producers", type=int, default=3, help="most producers at once")
    parser.add_argument("--interval", type=float, default=0.25, help="mean seconds between joins, leaves and kills")
    parser.add_argument("--compete", type=int, default=0, metavar="ITEMS",
                        help="instead: the competing-consumer case with this many items")
    parser.add_argument("--keep-logs", default=None, metavar="DIR", help="write the logs here (kept)")
    ns = parser.parse_args(args)
    with tempfile.TemporaryDirectory(prefix="stress-queue-procs-") as scratch:
        logdir = ns.keep_logs or f"{scratch}/logs"
        os.makedirs(logdir, exist_ok=True)
        os.mkdir(f"{scratch}/q")
        started = time.monotonic()
        if ns.compete:
            verdict = compete(f"{scratch}/q", logdir, ns.compete)
        else:
            verdict = run(f"{scratch}/q", logdir, ns.seconds, ns.seed, producers=ns.producers, interval=ns.interval)
        took = time.monotonic() - started
    print(f"queue processes: seed {ns.seed}, {took:.1f} s: {summary(verdict)}")
    for kind, count in sorted(verdict.kinds().items()):
        print(f"  {kind}: {count}")
    for violation in verdict.violations[:20]:
        print("VIOLATION:", violation)
    return 1 if verdict.violations else 0


if __name__ == "__main__":
    sys.exit(main())
