"""Many producers on one queue: processes against threads, side by side.

    python3 -m benchmarks.queue_mp            # 3 rounds; writes benchmarks/results/queue_mp.json
    python3 -m benchmarks.queue_mp --rounds 5
    python3 -m benchmarks.queue_mp --quick    # 3 rounds, fewer items

For 1, 2, 4 and 8 producers, ``put`` of 100-byte items into ONE queue from that
many processes (each its own ``Queue.open``, forked before engine opens
anything) and from that many threads of one process (one ``Queue``), with
``sync="always"`` (every put durable on return: the group commit across
processes against the one across threads) and with a 50 ms sync period.  Each
run is a fresh queue on the real disk (``ENGINE_BENCH_DIR`` or ``./.bench``);
the workers open the queue, wait at a barrier, and the clock runs from the
barrier to the last worker's end (the final sync of the periodic mode
included).  Processes and threads alternate run by run, which goes first
alternating round by round; figures are the medians of the rounds, and the
ratios medians of per-round ratios (processes / threads of the same count; N
processes / 1 process of the same round).

Then 1, 2 and 4 consumer processes sharing one reader name (competing consumers,
``Queue.open_reader`` in each) drain a queue filled beforehand: with no work per
item (the cost of the claims), and with 1 ms of work (a sleep) per item; from the
barrier to the last confirm.

With ``sync="always"`` it also counts the disk's flush requests during each run
(``/sys/dev/block/<device>/stat``, Linux; none where that file has no such
field): flushes per put say how many puts each fsync covered, within a process
and across processes (the file system's journal folds concurrent fsyncs into
one commit).  The disk is shared with whatever else runs on the machine, so the
count is an upper bound.

``--slow-fsync-ms MS`` simulates a slow disk (every fdatasync sleeps MS ms
first) and runs the ``sync="always"`` producers only: the case where the fsync,
not the CPU, limits a producer.

The target (issue 20): 4 producer processes with ``sync="always"`` put at least
2x as fast as one.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import Row, Target, bench_dir, report

ITEM = b"m" * 100
COUNTS = (1, 2, 4, 8)
RESULTS = os.path.join(os.path.dirname(__file__), "results", "queue_mp.json")


def _disk_flushes(directory: str) -> int | None:
    """Flush requests completed by the disk holding ``directory`` so far (the
    16th field of its block-device stat file, Linux 5.5+), or None."""
    dev = os.stat(directory).st_dev
    try:
        with open(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat") as fh:
            fields = fh.read().split()
    except OSError:
        return None
    return int(fields[15]) if len(fields) >= 17 else None


def _slow_fsyncs(seconds: float) -> None:
    """Every fdatasync / fsync of the real file system in this process (and in
    the producer processes forked from it) sleeps ``seconds`` first."""
    from engine.fs.osfs import OsFileHandle

    real = OsFileHandle._raw_sync

    def slowed(self: OsFileHandle, data_only: bool) -> None:
        time.sleep(seconds)
        real(self, data_only)

    OsFileHandle._raw_sync = slowed  # type: ignore[method-assign]


def _put_loop(directory: str, sync: Any, count: int, ready: Any) -> None:
    from engine.queue import Queue

    q = Queue.open(directory, "bench", sync=sync, checkpoint_interval=3600)
    ready.wait()
    for _ in range(count):
        q.put(ITEM)
    q.close()  # the periodic mode's last sync counts


def _timed(start: Callable[[Any], list[Any]], finish: Callable[[list[Any]], None], parties: int) -> float:
    """Seconds from the barrier (every worker open) to the last worker's end."""
    ready = mp.get_context("fork").Barrier(parties + 1)
    workers = start(ready)
    ready.wait()
    began = time.perf_counter()
    finish(workers)
    return time.perf_counter() - began


def run_processes(directory: str, sync: Any, producers: int, per_producer: int) -> float:
    """Items/s of ``producers`` processes each putting ``per_producer`` items."""
    ctx = mp.get_context("fork")

    def start(ready: Any) -> list[Any]:
        procs = [ctx.Process(target=_put_loop, args=(directory, sync, per_producer, ready)) for _ in range(producers)]
        for p in procs:
            p.start()
        return procs

    def finish(procs: list[Any]) -> None:
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise RuntimeError(f"a producer process failed ({p.exitcode})")

    return producers * per_producer / _timed(start, finish, producers)


def run_threads(directory: str, sync: Any, producers: int, per_producer: int) -> float:
    """Items/s of ``producers`` threads of this process sharing one ``Queue``."""
    from engine.queue import Queue

    q = Queue.open(directory, "bench", sync=sync, checkpoint_interval=3600)

    def start(ready: Any) -> list[Any]:
        def work() -> None:
            ready.wait()
            for _ in range(per_producer):
                q.put(ITEM)

        threads = [threading.Thread(target=work) for _ in range(producers)]
        for t in threads:
            t.start()
        return threads

    def finish(threads: list[Any]) -> None:
        for t in threads:
            t.join()
        q.close()

    seconds = _timed(start, finish, producers)
    return producers * per_producer / seconds


def _consume(directory: str, work: float, ready: Any, results: Any) -> None:
    from engine.queue import Queue

    reader = Queue.open_reader(directory, "bench", "w", checkpoint_interval=0.1)
    ready.wait()
    count, last = 0, time.monotonic()
    while (item := reader.get(timeout=0.3)) is not None:
        if work:
            time.sleep(work)
        reader.confirm(item.id)
        count, last = count + 1, time.monotonic()
    reader.close()
    results.put((count, last))


def run_consumers(directory: str, consumers: int, items: int, work: float) -> float:
    """Items/s of ``consumers`` processes sharing the reader name ``w`` (competing)
    over ``items`` put beforehand, each item taking ``work`` seconds (a sleep):
    from the barrier (every consumer open) to the last confirm."""
    from engine.queue import Queue

    with Queue.open(directory, "bench", sync="never", checkpoint_interval=3600) as q:
        q.reader("w")
        q.put_many([ITEM] * items)
    ctx = mp.get_context("fork")
    ready, results = ctx.Barrier(consumers + 1), ctx.Queue()
    procs = [ctx.Process(target=_consume, args=(directory, work, ready, results)) for _ in range(consumers)]
    for p in procs:
        p.start()
    ready.wait()
    began = time.monotonic()
    done = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    if sum(count for count, _ in done) < items:
        raise RuntimeError("competing consumers lost items")
    return items / (max(last for _, last in done) - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer items per run")
    parser.add_argument("--slow-fsync-ms", type=float, default=0.0, metavar="MS",
                        help="a slow disk, simulated: sleep MS ms before every fdatasync "
                             "(sync='always' producers only; writes no JSON)")
    args = parser.parse_args()
    if args.slow_fsync_ms > 0:
        _slow_fsyncs(args.slow_fsync_ms / 1000)
    scale = 0.3 if args.quick else 1.0
    modes: list[tuple[str, Any, int]] = [
        ("always", "always", int(6400 * scale)),
        ("sync 50 ms", 0.05, int(120_000 * scale)),
    ]
    if args.slow_fsync_ms > 0:
        modes = [("always", "always", int(1600 * scale))]
    figures: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    scaling: dict[str, list[float]] = {}
    flushes: dict[str, list[float]] = {}
    one = 1.0
    started = time.time()
    for round_no in range(args.rounds):
        for label, sync, total in modes:
            for n in COUNTS:
                per = max(1, total // n)
                kinds = [("processes", run_processes), ("threads", run_threads)]
                if round_no % 2:
                    kinds.reverse()
                got = {}
                for kind, fn in kinds:
                    with bench_dir("queue-mp-") as directory:
                        before = _disk_flushes(directory)
                        got[kind] = fn(directory, sync, n, per)
                        after = _disk_flushes(directory)
                    figures.setdefault(f"{label}: {n} {kind}", []).append(got[kind])
                    if sync == "always" and before is not None and after is not None:
                        flushes.setdefault(f"{label}: {n} {kind}: disk flushes per put", []).append(
                            (after - before) / (n * per))
                ratios.setdefault(f"{label}: {n}", []).append(got["processes"] / got["threads"])
                if n == 1:
                    one = got["processes"]
                else:  # against 1 process of the same round (the disk's rate swings by minutes)
                    scaling.setdefault(f"{label}: {n} processes / 1 process", []).append(got["processes"] / one)
                print(f"round {round_no + 1}: {label}, {n} producers: processes {got['processes']:,.0f}  "
                      f"threads {got['threads']:,.0f} items/s", flush=True)
    rows = []
    for name, values in figures.items():
        rows.append(Row(name, statistics.median(values), "items/s", f"median of {len(values)}"))
    for name, values in ratios.items():
        rows.append(Row(f"{name} processes / threads", statistics.median(values), "x",
                        f"median of paired runs ({min(values):.2f}-{max(values):.2f})"))
    for name, values in scaling.items():
        rows.append(Row(name, statistics.median(values), "x",
                        f"median of per-round ratios ({min(values):.2f}-{max(values):.2f})"))
    for name, values in flushes.items():
        rows.append(Row(name, statistics.median(values), "flushes", f"median of {len(values)} (lower is better)"))
    consumed: dict[str, list[float]] = {}
    for round_no in range(0 if args.slow_fsync_ms > 0 else args.rounds):
        for work, total in ((0.0, int(20_000 * scale)), (0.001, int(2_000 * scale))):
            for n in (1, 2, 4):
                with bench_dir("queue-mp-") as directory:
                    rate = run_consumers(directory, n, total, work)
                label = f"consumers, {'no work' if not work else '1 ms of work'}: {n} processes"
                consumed.setdefault(label, []).append(rate)
                print(f"round {round_no + 1}: {label}: {rate:,.0f} items/s", flush=True)
    for name, values in consumed.items():
        rows.append(Row(name, statistics.median(values), "items/s", f"median of {len(values)}"))
    load = os.getloadavg()[0]
    print(f"load average (1 min) at the end: {load:.2f}; {time.time() - started:.0f} s")
    four = statistics.median(scaling["always: 4 processes / 1 process"])
    targets = [Target("always: 4 processes", "always: 1 processes", 2.0, ratio=four,
                      how="median of per-round ratios: 4 producer processes against one, same round")]
    report("engine.Queue: producers in processes vs threads (100-byte items, one queue)", rows,
           targets=targets, json_path=None if args.quick or args.slow_fsync_ms > 0 else RESULTS)


if __name__ == "__main__":
    main()
