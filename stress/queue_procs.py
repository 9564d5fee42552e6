"""Queue producers and consumers in real processes, SIGKILLed at random.

``python -m stress.queue_procs --seconds 60 --seed 1`` (also what
``tests/queue/test_queue_kill.py`` runs for a few seconds).  Producer processes
open one queue (``sync="always"``, small journal files so that they rotate and
retire) and put self-describing items, printing each id once ``put`` returned;
consumer processes read it with ``Queue.open_reader`` under fanout reader names
of their own, printing each item before they confirm it.  Every ``--interval``
seconds (on average) one child is killed with SIGKILL and started again.

At the end every child is killed, the queue is opened (its first producer runs
the recovery), each reader's remaining items are drained, and:

* every acknowledged put was delivered to every reader, with its payload;
* no id was ever seen with two payloads (ids unique across producers and kills);
* each consumer incarnation saw increasing ids;
* ``verify()`` passes.

A violation is printed and the exit status is 1.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

QUEUE = "q"
OPTIONS = {"sync": "always", "journal_size": 4096, "checkpoint_interval": 0.05}
ROOT = str(Path(__file__).resolve().parents[1])


def _producer(directory: str, tag: str) -> None:
    from engine.queue import Queue

    with Queue.open(directory, QUEUE, **OPTIONS) as q:  # type: ignore[arg-type]
        for i in range(1 << 62):
            data = f"{tag}-{i}"
            xid = q.put(data.encode())
            print("ack", xid, data, flush=True)


def _consumer(directory: str, reader: str) -> None:
    from engine.queue import Queue

    with Queue.open_reader(directory, QUEUE, reader, poll_interval=0.002, checkpoint_interval=0.05) as r:
        while True:
            item = r.get(timeout=1)
            if item is None:
                continue
            print("got", item.id, item.data.decode(), time.monotonic_ns(), flush=True)
            print("conf", item.id, "-", time.monotonic_ns(), flush=True)
            r.confirm(item.id)


@dataclass
class Child:
    kind: str  # "producer" or "consumer"
    name: str  # the producer's tag prefix, or the consumer's own name
    reader: str = ""  # a consumer's reader name (competing consumers share one)
    generation: int = 0
    process: subprocess.Popen[str] | None = None
    reader_thread: threading.Thread | None = None


@dataclass
class Outcome:
    acked: dict[int, str] = field(default_factory=dict)
    seen: dict[int, str] = field(default_factory=dict)  # every id any consumer saw, with its payload
    got: dict[str, set[int]] = field(default_factory=dict)  # reader -> ids delivered
    #: (reader, id) -> [start, end, consumer incarnation] of each time a consumer held it open
    held: dict[tuple[str, int], list[list[Any]]] = field(default_factory=dict)
    kills: int = 0
    violations: list[str] = field(default_factory=list)


def _start(child: Child, directory: str, outcome: Outcome, guard: threading.Lock) -> None:
    child.generation += 1
    arg = f"{child.name}g{child.generation}" if child.kind == "producer" else child.reader
    process = subprocess.Popen(
        [sys.executable, "-m", "stress.queue_procs", child.kind, directory, arg],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    child.process = process
    thread = threading.Thread(target=_collect, args=(child, process, outcome, guard), daemon=True)
    child.reader_thread = thread
    thread.start()


def _collect(child: Child, process: subprocess.Popen[str], outcome: Outcome, guard: threading.Lock) -> None:
    """Read one child's lines: acknowledged puts, delivered items."""
    assert process.stdout is not None
    last = 0
    me = f"{child.name}g{child.generation}"
    competing = child.reader != child.name
    for line in process.stdout:
        parts = line.split()
        if len(parts) < 3 or (parts[0] != "ack" and len(parts) != 4):
            continue  # a line cut by the kill
        what, xid, data = parts[0], int(parts[1]), parts[2]
        with guard:
            if what == "ack":
                outcome.acked[xid] = data
            elif what == "got":
                _note(outcome, child.reader, xid, data)
                outcome.held.setdefault((child.reader, xid), []).append([int(parts[3]), None, me])
                if xid <= last and not competing:  # a competing consumer gets others' items back later
                    outcome.violations.append(f"consumer {child.name} got id {xid} after {last}")
                last = xid
            else:
                for span in outcome.held.get((child.reader, xid), []):
                    if span[2] == me and span[1] is None:
                        span[1] = int(parts[3])


def _note(outcome: Outcome, reader: str, xid: int, data: str) -> None:
    before = outcome.seen.setdefault(xid, data)
    if before != data:
        outcome.violations.append(f"id {xid} seen as {before!r} and as {data!r}")
    outcome.got.setdefault(reader, set()).add(xid)


def run(directory: str, seconds: float, seed: int, producers: int = 3, consumers: int = 1,
        interval: float = 0.08, competing: int = 2) -> Outcome:
    """Run the children for ``seconds``, killing one every ``interval`` s on average:
    ``consumers`` fanout readers of their own, and ``competing`` consumers sharing
    the reader name ``w``."""
    from engine.queue import Queue

    rng = random.Random(seed)
    readers = [f"c{i}" for i in range(consumers)] + (["w"] if competing else [])
    with Queue.open(directory, QUEUE, **OPTIONS) as q:  # type: ignore[arg-type]
        for name in readers:
            q.reader(name)  # created at the tail, before any put: they see everything
    outcome = Outcome()
    guard = threading.Lock()
    children = [Child("producer", f"p{i}") for i in range(producers)]
    children += [Child("consumer", n, n) for n in readers if n != "w"]
    children += [Child("consumer", f"w{i}", "w") for i in range(competing)]
    deaths: dict[str, int] = {}
    for child in children:
        _start(child, directory, outcome, guard)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(rng.expovariate(1 / interval))
        child = rng.choice(children)
        assert child.process is not None
        # The moment of the signal: the child holds nothing after it has died, which
        # is some time between the signal and ``wait()`` returning; a time taken
        # after ``wait()`` would count another consumer's legitimate claim in
        # between as an overlap (seen on a loaded 2-core machine).
        deaths[f"{child.name}g{child.generation}"] = time.monotonic_ns()
        child.process.send_signal(signal.SIGKILL)
        child.process.wait()
        assert child.reader_thread is not None
        child.reader_thread.join()
        outcome.kills += 1
        _start(child, directory, outcome, guard)
    for child in children:
        assert child.process is not None and child.reader_thread is not None
        deaths[f"{child.name}g{child.generation}"] = time.monotonic_ns()
        child.process.send_signal(signal.SIGKILL)
        child.process.wait()
        child.reader_thread.join()
    _check_overlaps(outcome, deaths)
    _check(directory, outcome, readers)
    return outcome


def _check_overlaps(outcome: Outcome, deaths: dict[str, int]) -> None:
    """No item open in two live consumers at once: the times a consumer held an
    item (from its get to its confirm, or to the signal that killed it) never
    overlap."""
    for (reader, xid), spans in outcome.held.items():
        closed = sorted((start, end if end is not None else deaths.get(who, start), who) for start, end, who in spans)
        for (_s1, e1, w1), (s2, _e2, w2) in itertools.pairwise(closed):
            if s2 < e1:
                outcome.violations.append(f"reader {reader}: item {xid} open in {w1} and {w2} at once")


def _check(directory: str, outcome: Outcome, readers: list[str]) -> None:
    from engine.queue import Queue

    with Queue.open(directory, QUEUE, **OPTIONS) as q:  # type: ignore[arg-type]
        for name in readers:
            r = q.reader(name)
            while (item := r.get(timeout=0)) is not None:
                _note(outcome, name, item.id, item.data.decode())
                r.confirm(item.id)
        q.verify()
    for xid, data in sorted(outcome.acked.items()):
        if outcome.seen.get(xid) != data:
            outcome.violations.append(f"acknowledged put {xid} ({data}) delivered as {outcome.seen.get(xid)!r}")
        for name in readers:
            if xid not in outcome.got.get(name, set()):
                outcome.violations.append(f"acknowledged put {xid} never delivered to reader {name}")


def run_checked(seconds: float, seed: int) -> Outcome:
    """One run with the default cast, in a scratch directory (the stress suite's
    long mode calls this)."""
    with tempfile.TemporaryDirectory(prefix="stress-queue-procs-") as directory:
        return run(directory, seconds, seed, 3, 1, 0.08, 2)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("producer", "consumer"):
        (_producer if args[0] == "producer" else _consumer)(args[1], args[2])
        return 0
    parser = argparse.ArgumentParser(prog="python -m stress.queue_procs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=1, help="fanout readers, one process each")
    parser.add_argument("--competing", type=int, default=2, help="consumers sharing the reader name w")
    parser.add_argument("--interval", type=float, default=0.08, help="mean seconds between kills")
    ns = parser.parse_args(args)
    with tempfile.TemporaryDirectory(prefix="stress-queue-procs-") as directory:
        started = time.monotonic()
        outcome = run(directory, ns.seconds, ns.seed, ns.producers, ns.consumers, ns.interval, ns.competing)
        took = time.monotonic() - started
    print(
        f"queue processes: seed {ns.seed}; {outcome.kills} kills in {took:.1f} s; "
        f"{len(outcome.acked)} acknowledged puts, {len(outcome.seen)} ids delivered"
    )
    for violation in outcome.violations[:20]:
        print("VIOLATION:", violation)
    print(f"{len(outcome.violations)} violation(s)")
    return 1 if outcome.violations else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
