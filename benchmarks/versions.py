"""Two versions of engine, paired: ``python3 -m benchmarks.versions REV --store S``.

Measures this working tree's ``engine`` against the one at git revision ``REV``
on every store's main workloads (``S`` in queue, pages, applog, events, streams,
or ``all``).  ``REV`` is checked out with ``git worktree`` into a scratch
directory (its C extensions built there with ``setup.py build_ext --inplace``
when a compiler is at hand: they are optional, and each tree's are reported).

For ``--rounds`` rounds, every measure runs once per version, each time in a
FRESH process whose ``PYTHONPATH`` is that version's tree, on a fresh directory
of the real disk (``ENGINE_BENCH_DIR`` or ``./.bench``, not tmpfs); which
version goes first alternates round by round.  Per measure it prints both
medians and the median of the per-round ratios (this tree / ``REV``): on this
machine the disk's rate swings between minutes, so only ratios taken side by
side in the same minute carry.  ``--quick`` is a short run (3 rounds, smaller
workloads); ``--json`` writes ``benchmarks/results/versions-<store>.json``.

The measures use only public API that exists in both the old and the new code:

* queue: ``put`` of 100-byte items with a 50 ms sync period (the final sync on
  close included); ``reader.get`` + ``confirm`` of them; ``put`` with
  ``sync="always"`` from 8 threads (group commit);
* pages: one-page durable commits; 100-page durable transactions over 1,000
  pages and a final checkpoint (MB/s of page data);
* applog: ``append`` with ``sync="never"``; ``append_many`` of 4 KiB records in
  batches of 100 with a 50 ms sync period (MB/s); random ``get(i)``;
* events: one-event durable ``write`` (``sync="always"``) across 100 ids; full
  ``replay`` of 1,000 ids of 50 events each;
* streams: 4 threads each opening, writing (16 KiB in 4 KiB writes) and closing
  streams (a close is durable), in streams per second.

This module is also the worker: ``versions.py --worker MEASURE DIR AMOUNT``
(started with ``python -P`` so that only the tree on ``PYTHONPATH`` supplies
``engine``) imports nothing but the standard library and that ``engine``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

STORES = ("queue", "pages", "applog", "events", "streams")
ITEM = b"i" * 100  # the 100-byte item/record of the queue and applog measures
PAGE = 4096


# -- the measures (run in the worker process) ---------------------------------------------


def _queue_put(directory: str, n: int) -> float:
    """Items/s of ``put`` with a 50 ms sync period, the closing sync included."""
    from engine import Queue

    q = Queue.open(directory, "bench", sync=0.05)
    start = time.perf_counter()
    for _ in range(n):
        q.put(ITEM)
    q.close()
    return n / (time.perf_counter() - start)


def _queue_get_confirm(directory: str, n: int) -> float:
    """Items/s of ``reader.get`` + ``confirm`` of ``n`` items put beforehand."""
    from engine import Queue

    q = Queue.open(directory, "bench", sync=0.05)
    for _ in range(n):
        q.put(ITEM)
    reader = q.reader()
    got = 0
    start = time.perf_counter()
    while True:
        item = reader.get(timeout=0)
        if item is None:
            break
        reader.confirm(item.id)
        got += 1
    elapsed = time.perf_counter() - start
    q.close()
    if got != n:
        raise RuntimeError(f"got {got} of {n} items")
    return got / elapsed


def _queue_put_always_8(directory: str, n: int) -> float:
    """Items/s of durable puts (``sync="always"``) from 8 threads."""
    from engine import Queue

    q = Queue.open(directory, "bench", sync="always")
    return _threaded(8, n, lambda _k, _i: q.put(ITEM), q.close)


def _pages_commit_one(directory: str, n: int) -> float:
    """Durable one-page (4 KiB) commits per second."""
    from engine.pages import PageStore

    store = PageStore.open(os.path.join(directory, "versions.db"), page_size=PAGE)
    blobs = [os.urandom(PAGE) for _ in range(8)]
    with store.transaction() as tx:
        page = tx.allocate()
    start = time.perf_counter()
    for i in range(n):
        with store.transaction() as tx:
            tx.write(page, 0, blobs[i & 7])
    elapsed = time.perf_counter() - start
    store.close()
    return n / elapsed


def _pages_tx_hundred(directory: str, n: int) -> float:
    """MB/s of page data in ``n`` durable 100-page transactions cycling over 1,000
    pages, and the checkpoint after them."""
    from engine.pages import PageStore

    store = PageStore.open(os.path.join(directory, "versions.db"), page_size=PAGE)
    blobs = [os.urandom(PAGE) for _ in range(8)]
    with store.transaction() as tx:
        pages = [tx.allocate() for _ in range(1000)]
    store.checkpoint()
    start = time.perf_counter()
    for t in range(n):
        base = (t * 100) % 1000
        with store.transaction() as tx:
            for i in range(100):
                tx.write(pages[base + i], 0, blobs[(t + i) & 7])
    store.checkpoint()
    elapsed = time.perf_counter() - start
    store.close()
    return n * 100 * PAGE / (1 << 20) / elapsed


def _applog_append(directory: str, n: int) -> float:
    """Records/s of ``append`` (100 bytes) with ``sync="never"``, close included."""
    from engine import AppendLog

    log = AppendLog.open(os.path.join(directory, "log"), sync="never")
    start = time.perf_counter()
    for _ in range(n):
        log.append(ITEM)
    log.close()
    return n / (time.perf_counter() - start)


def _applog_append_many(directory: str, n: int) -> float:
    """MB/s of ``append_many`` of 4 KiB records, batches of 100, 50 ms sync period."""
    from engine import AppendLog

    record = os.urandom(4096)
    batch = [record] * 100
    log = AppendLog.open(os.path.join(directory, "log"), sync=0.05)
    start = time.perf_counter()
    for _ in range(n):
        log.append_many(batch)
    log.close()
    return n * 100 * 4096 / (1 << 20) / (time.perf_counter() - start)


def _applog_get(directory: str, n: int) -> float:
    """Random ``get(i)`` per second over a log of 200,000 records."""
    from engine import AppendLog

    path = os.path.join(directory, "log")
    log = AppendLog.open(path, sync="never")
    for _ in range(200):
        log.append_many([ITEM] * 1000)
    log.close()
    log = AppendLog.open(path, sync="never")
    first, end = log.first_index, log.next_index
    rng = random.Random(1)
    picks = [rng.randrange(first, end) for _ in range(n)]
    get = log.get
    start = time.perf_counter()
    for i in picks:
        get(i)
    elapsed = time.perf_counter() - start
    log.close()
    return n / elapsed


def _events_write(directory: str, n: int) -> float:
    """Durable one-event writes per second (``sync="always"``), across 100 ids
    that exist beforehand."""
    from engine import EventJournal

    journal = EventJournal.open(os.path.join(directory, "journal"))
    ids = [f"id-{i:03d}" for i in range(100)]
    for pid in ids:
        journal.write(pid, [(1, ITEM)])
    highest = dict.fromkeys(ids, 1)
    start = time.perf_counter()
    for k in range(n):
        pid = ids[k % 100]
        highest[pid] += 1
        journal.write(pid, [(highest[pid], ITEM)])
    elapsed = time.perf_counter() - start
    journal.close()
    return n / elapsed


def _events_replay(directory: str, n: int) -> float:
    """Events/s of replaying every event of 1,000 ids (50 each, written in
    interleaved batches of 10), ``n`` passes over them all."""
    from engine import EventJournal

    path = os.path.join(directory, "journal")
    journal = EventJournal.open(path, sync="never")
    ids = [f"id-{i:04d}" for i in range(1000)]
    for round_ in range(5):
        for pid in ids:
            journal.write(pid, [(round_ * 10 + k + 1, ITEM) for k in range(10)])
    journal.close()
    journal = EventJournal.open(path, sync="never")
    count = 0
    start = time.perf_counter()
    for _ in range(n):
        for pid in ids:
            for _event in journal.replay(pid):
                count += 1
    elapsed = time.perf_counter() - start
    journal.close()
    if count != n * 50_000:
        raise RuntimeError(f"replayed {count} of {n * 50_000} events")
    return count / elapsed


def _streams_write_4(directory: str, n: int) -> float:
    """Streams/s from 4 threads, each stream opened, written (16 KiB in 4 KiB
    writes) and closed (durable on close)."""
    from engine import StreamJournal

    journal = StreamJournal.open(os.path.join(directory, "streams.jd"), size=128 << 20)
    chunk = os.urandom(4096)

    def one(k: int, i: int) -> None:
        with journal.open_stream(f"w-{k}-{i}") as stream:
            for _ in range(4):
                stream.write(chunk)

    return _threaded(4, n, one, journal.close)


def _threaded(threads: int, n: int, op: Callable[[int, int], object], close: Callable[[], None]) -> float:
    """Operations/s of ``n`` calls of ``op(thread, i)`` shared by ``threads``
    threads started together, ``close()`` included."""
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        barrier.wait()
        try:
            for i in range(n // threads):
                op(k, i)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    close()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return n // threads * threads / elapsed


@dataclass(frozen=True)
class Measure:
    """One workload: ``run(directory, amount)`` returns a rate in ``unit``
    (higher is better); ``amount`` (``quick`` for ``--quick``) is sized for
    about 0.5-1 s on the development machine when its disk is quiet (up to four
    times that when the shared disk is busy)."""

    store: str
    name: str
    unit: str
    run: Callable[[str, int], float]
    amount: int
    quick: int


MEASURES = (
    Measure("queue", "put (sync 50 ms)", "items/s", _queue_put, 600_000, 300_000),
    Measure("queue", "get+confirm", "items/s", _queue_get_confirm, 500_000, 250_000),
    Measure("queue", "put sync=always, 8 threads", "items/s", _queue_put_always_8, 15_000, 7_500),
    Measure("pages", "1-page durable commit", "commits/s", _pages_commit_one, 5_000, 2_500),
    Measure("pages", "100-page durable transaction", "MB/s", _pages_tx_hundred, 1_000, 500),
    Measure("applog", "append sync=never", "records/s", _applog_append, 3_000_000, 1_500_000),
    Measure("applog", "append_many 4 KiB (sync 50 ms)", "MB/s", _applog_append_many, 1_500, 750),
    Measure("applog", "random get", "gets/s", _applog_get, 400_000, 200_000),
    Measure("events", "durable write, 1 event", "writes/s", _events_write, 5_000, 2_500),
    Measure("events", "replay", "events/s", _events_replay, 80, 40),
    Measure("streams", "open/write/close, 4 threads", "streams/s", _streams_write_4, 6_000, 3_000),
)
BY_NAME = {f"{m.store}/{m.name}": m for m in MEASURES}


def _worker(key: str, directory: str, amount: int) -> int:
    """Run one measure in this (fresh) process and print its rate as JSON."""
    value = BY_NAME[key].run(directory, amount)
    print(json.dumps({"value": value}))
    return 0


# -- the driver (the parent process) -------------------------------------------------------


def _run(tree: str, key: str, scratch: str, amount: int) -> float:
    """One measure of the version in ``tree``, in a fresh process on a fresh directory."""
    directory = tempfile.mkdtemp(prefix="run-", dir=scratch)
    env = dict(os.environ, PYTHONPATH=tree)
    try:
        out = subprocess.run(
            [sys.executable, "-P", os.path.abspath(__file__), "--worker", key, directory, str(amount)],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if out.returncode != 0:
        raise SystemExit(f"{key} failed in {tree} (status {out.returncode}):\n{out.stderr[-3000:]}")
    value: float = json.loads(out.stdout.strip().splitlines()[-1])["value"]
    return value


def git(here: str, *args: str) -> str:
    return subprocess.run(["git", "-C", here, *args], check=True, capture_output=True, text=True).stdout.strip()


@contextmanager
def worktree_at(here: str, commit: str) -> Iterator[str]:
    """``commit`` of the repository at ``here`` checked out with ``git worktree``
    into a scratch directory (removed, and the worktree pruned, at the end)."""
    with tempfile.TemporaryDirectory(prefix="engine-versions-") as parent:
        tree = os.path.join(parent, "tree")
        git(here, "worktree", "add", "--detach", "--quiet", tree, commit)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", here, "worktree", "remove", "--force", tree], capture_output=True)
            subprocess.run(["git", "-C", here, "worktree", "prune"], capture_output=True)


def build_extensions(tree: str) -> str:
    """Build ``tree``'s optional C extensions in place; returns which it has."""
    built = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=tree, capture_output=True, text=True
    )
    if built.returncode != 0:
        print(f"note: building the C extensions of {tree} failed; it runs without them", file=sys.stderr)
    return extensions(tree)


def extensions(tree: str) -> str:
    found = sorted(p.split(os.sep)[-2] for p in glob.glob(os.path.join(tree, "engine", "*", "_native*.so")))
    return ", ".join(found) or "none"


def _ratio_spread(ratios: list[float]) -> str:
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--worker"]:
        return _worker(argv[1], argv[2], int(argv[3]))
    from benchmarks.common import bench_dir

    parser = argparse.ArgumentParser(
        prog="python3 -m benchmarks.versions",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("rev", help="the git revision to compare this working tree against (e.g. HEAD~1)")
    parser.add_argument("--store", choices=(*STORES, "all"), default="all")
    parser.add_argument("--rounds", type=int, default=None, help="paired rounds (default 7, 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a short run: 3 rounds, half-size workloads")
    parser.add_argument("--json", action="store_true", help="write benchmarks/results/versions-<store>.json")
    args = parser.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (3 if args.quick else 7)
    stores = STORES if args.store == "all" else (args.store,)
    measures = [m for m in MEASURES if m.store in stores]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    commit = git(here, "rev-parse", "--verify", f"{args.rev}^{{commit}}")
    head = git(here, "rev-parse", "HEAD")
    dirty = bool(git(here, "status", "--porcelain", "--untracked-files=no", "--", "engine"))
    this_label = f"this tree ({head[:9]}{' + changes' if dirty else ''})"
    results: dict[str, dict[str, list[float]]] = {f"{m.store}/{m.name}": {"rev": [], "this": []} for m in measures}
    with worktree_at(here, commit) as tree, bench_dir("versions-") as scratch:
        print(f"{args.rev} ({commit[:9]}) checked out in {tree}; building its C extensions ...", flush=True)
        ext_rev = build_extensions(tree)
        ext_this = extensions(here)
        print(f"C extensions: {args.rev}: {ext_rev}; this tree: {ext_this}", flush=True)
        roots = {"rev": tree, "this": here}
        for round_no in range(rounds):
            order = ("rev", "this") if round_no % 2 == 0 else ("this", "rev")
            for m in measures:
                key = f"{m.store}/{m.name}"
                amount = m.quick if args.quick else m.amount
                for version in order:
                    results[key][version].append(_run(roots[version], key, scratch, amount))
                got = results[key]
                print(f"round {round_no + 1}: {key}: {args.rev} {got['rev'][-1]:,.1f}  "
                      f"this {got['this'][-1]:,.1f} {m.unit}", flush=True)
    print()
    print(f"{rounds} rounds, {'quick' if args.quick else 'full'}; {args.rev} ({commit[:9]}) against {this_label}")
    header = f"{'measure':<46} {'unit':<10} {args.rev[:12]:>12} {'this':>12} {'this/' + args.rev[:8]:>14}  spread"
    print(header)
    rows = []
    for m in measures:
        key = f"{m.store}/{m.name}"
        got = results[key]
        ratios = [t / r for t, r in zip(got["this"], got["rev"], strict=True)]
        row = {
            "store": m.store,
            "measure": m.name,
            "unit": m.unit,
            "rev_values": got["rev"],
            "this_values": got["this"],
            "rev_median": statistics.median(got["rev"]),
            "this_median": statistics.median(got["this"]),
            "ratio_median": statistics.median(ratios),
            "ratios": ratios,
        }
        rows.append(row)
        print(f"{key:<46} {m.unit:<10} {row['rev_median']:>12,.1f} {row['this_median']:>12,.1f} "
              f"{row['ratio_median']:>13.3f}x  {_ratio_spread(ratios)}")
    if args.json:
        path = os.path.join(here, "benchmarks", "results", f"versions-{args.store}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            json.dump(
                {
                    "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "rev": args.rev,
                    "rev_commit": commit,
                    "this": this_label,
                    "rounds": rounds,
                    "quick": args.quick,
                    "c_extensions": {"rev": ext_rev, "this": ext_this},
                    "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                "system": platform.platform()},
                    "measures": rows,
                },
                out,
                indent=2,
            )
        print(f"written: {os.path.relpath(path, here)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
