"""Append-log benchmark: ``python3 -m benchmarks.applog [--quick]``.

Side by side in one run, 100-byte records:

* appends/s in each sync mode (``always`` with 1 and 8 threads, a 50 ms period,
  ``never``; ``append`` one at a time and ``append_many`` in batches of 1000)
  against queuelib's ``FifoDiskQueue.push`` and a raw framed-append loop (buffered
  file, no fsync) and a raw write+fdatasync loop;
* ``get(index)`` at random against sqlite3 ``SELECT ... WHERE rowid = ?``;
* ``between()`` lookups/s (first record at or after a random time) at 1 M and
  10 M records (``--quick``: 100 k and 1 M), which must differ by less than 1.5x.

Results: a table with ratios, ``benchmarks/results/applog.json``.

``--pair TREE`` instead compares this tree with another checkout (for example the
previous commit's, ``TREE`` on ``PYTHONPATH``), paired: each measure (``append``
of 100-byte records with ``sync="never"`` and a 50 ms period, ``append_many`` of
64 x 4 KiB records with a period, random ``get(i)``) runs in a fresh process,
alternately with either tree, ``--rounds`` times; it prints every ratio (this
tree / TREE) and their median, then the same for this tree's ``append`` against
the raw framed append loop.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from benchmarks import floor
from benchmarks.common import (
    Row,
    Target,
    bench_dir,
    median,
    paired_ratios,
    raw_append_fsync_rate,
    raw_framed_append_rate,
    raw_sequential_write_mb_s,
    report,
)
from benchmarks.floor.stores import applog_args
from engine.applog import AppendLog

RECORD = 100
PAYLOAD = os.urandom(RECORD)


def _rate(fn: Callable[[], int]) -> float:
    start = time.perf_counter()
    ops = fn()
    return ops / (time.perf_counter() - start)


_RUN = [0]


def bench_append(root: str, sync: object, n: int, *, many: bool) -> float:
    """Records/s of ``append`` (or ``append_many`` in batches of 1000) into a fresh
    log, closing (the final sync) included."""
    _RUN[0] += 1
    path = os.path.join(root, f"append-{_RUN[0]}")
    log = AppendLog.open(path, sync=sync)

    def run() -> int:
        if many:
            batch = [PAYLOAD] * 1000
            for _ in range(n // 1000):
                log.append_many(batch)
        else:
            append = log.append
            for _ in range(n):
                append(PAYLOAD)
        log.close()
        return n

    rate = _rate(run)
    shutil.rmtree(path)
    return rate


def best_of(rounds: int, measures: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Run every measure once per round, interleaved, and keep each one's best.

    The machine is shared: interleaving gives the measures the same conditions,
    and the best round is the one least disturbed by other load.
    """
    best = dict.fromkeys(measures, 0.0)
    for _ in range(rounds):
        for name, fn in measures.items():
            best[name] = max(best[name], fn())
    return best


def bench_append_always(root: str, threads: int, seconds: float) -> float:
    """Durable appends/s with ``sync="always"`` from ``threads`` threads."""
    _RUN[0] += 1
    path = os.path.join(root, f"always-{_RUN[0]}")
    log = AppendLog.open(path, sync="always")
    counts = [0] * threads
    deadline = time.perf_counter() + seconds

    def work(k: int) -> None:
        append = log.append
        while time.perf_counter() < deadline:
            append(PAYLOAD)
            counts[k] += 1

    start = time.perf_counter()
    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    log.close()
    shutil.rmtree(path)
    return sum(counts) / elapsed


def bench_queuelib(root: str, n: int) -> float:
    from queuelib import FifoDiskQueue

    _RUN[0] += 1
    path = os.path.join(root, f"queuelib-{_RUN[0]}")
    q = FifoDiskQueue(path)

    def run() -> int:
        push = q.push
        for _ in range(n):
            push(PAYLOAD)
        q.close()
        return n

    rate = _rate(run)
    shutil.rmtree(path, ignore_errors=True)
    return rate


def build_log(path: str, n: int, per_time: int = 100) -> AppendLog:
    """A log of ``n`` records, built with append_many in sync="never" mode; every
    ``per_time`` consecutive records share a time (times 1000 ns apart)."""
    log = AppendLog.open(path, sync="never")
    batch = [PAYLOAD] * per_time
    t = 1_000_000
    for _ in range(n // per_time):
        log.append_many(batch, time_ns=t)
        t += 1000
    log.close()
    return AppendLog.open(path, sync="never")


def bench_get(log: AppendLog, n: int, lookups: int) -> float:
    rng = random.Random(1)
    keys = [rng.randrange(n) for _ in range(lookups)]
    get = log.get

    def run() -> int:
        for k in keys:
            get(k)
        return lookups

    return _rate(run)


def build_sqlite(root: str, n: int) -> sqlite3.Connection:
    db = sqlite3.connect(os.path.join(root, f"sqlite-{n}.db"))
    db.execute("CREATE TABLE t (data BLOB)")
    db.executemany("INSERT INTO t (data) VALUES (?)", ((PAYLOAD,) for _ in range(n)))
    db.commit()
    return db


def bench_sqlite_get(db: sqlite3.Connection, n: int, lookups: int) -> float:
    rng = random.Random(1)
    keys = [rng.randrange(1, n + 1) for _ in range(lookups)]

    def run() -> int:
        execute = db.execute
        for k in keys:
            execute("SELECT data FROM t WHERE rowid = ?", (k,)).fetchone()
        return lookups

    return _rate(run)


def bench_between(log: AppendLog, n: int, lookups: int, per_time: int = 100) -> float:
    """Lookups/s of ``between(t0, t1)``'s first record, random t0."""
    rng = random.Random(2)
    span = (n // per_time) * 1000
    starts = [1_000_000 + rng.randrange(span) for _ in range(lookups)]

    def run() -> int:
        between = log.between
        for t0 in starts:
            next(iter(between(start_ns=t0, end_ns=t0 + 10_000)), None)
        return lookups

    return _rate(run)


#: One measure in a fresh process (``python -c SCRIPT NAME``; prints records or
#: lookups per second).  A string, not a function of this module: it must run
#: against the other tree's ``engine`` too.
PAIRED_SCRIPT = r"""
import os, random, shutil, sys, tempfile, time
from engine.applog import AppendLog
which = sys.argv[1]
root = tempfile.mkdtemp(prefix="engine-bench-applog-pair-")
P100, P4K = os.urandom(100), os.urandom(4096)
def rate(fn):
    start = time.perf_counter()
    n = fn()
    return n / (time.perf_counter() - start)
try:
    if which == "raw":
        # benchmarks.common.raw_framed_append_rate's loop (the tree does not matter)
        import struct
        n = 300_000
        def run():
            with open(root + "/raw", "ab") as out:
                write, pack = out.write, struct.Struct("<II").pack
                for i in range(n):
                    write(pack(100, i))
                    write(P100)
            return n
    elif which.startswith("append"):
        log = AppendLog.open(root + "/l", sync="never" if which == "append-never" else 0.05)
        n = 300_000
        def run():
            append = log.append
            for _ in range(n):
                append(P100)
            log.close()
            return n
    elif which == "many-4k":
        log = AppendLog.open(root + "/l", sync=0.05)
        batch, n = [P4K] * 64, 64 * 1000
        def run():
            for _ in range(n // 64):
                log.append_many(batch)
            log.close()
            return n
    else:
        log = AppendLog.open(root + "/l", sync="never")
        n = 300_000
        for _ in range(n // 100):
            log.append_many([P100] * 100)
        log.close()
        log = AppendLog.open(root + "/l", sync="never")
        keys = [random.Random(1).randrange(n) for _ in range(200_000)]
        get = log.get
        for k in keys[:20_000]:
            get(k)
        def run():
            for k in keys:
                get(k)
            return len(keys)
    print(round(rate(run)))
finally:
    shutil.rmtree(root, ignore_errors=True)
"""
PAIRED_MEASURES = ("append-never", "append-period", "many-4k", "get")


def paired(other: str, rounds: int) -> None:
    """Each measure alternately with this tree and ``other``, in fresh processes;
    print the ratios (this / other) and their median.  Then ``append`` of this
    tree against the raw framed append loop, alternately, in fresh processes
    (the benchmark's own target: ``append`` with a period >= 0.8x the raw loop)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def once(tree: str, name: str) -> float:
        env = {**os.environ, "PYTHONPATH": tree}
        out = subprocess.run([sys.executable, "-c", PAIRED_SCRIPT, name], env=env, cwd="/", check=True,
                             capture_output=True, text=True)
        return float(out.stdout.strip())

    for name in PAIRED_MEASURES:
        ratios = []
        for _ in range(rounds):
            old, new = once(other, name), once(here, name)
            ratios.append(new / old)
            print(f"{name}: {other} {old:,.0f}/s, this tree {new:,.0f}/s, ratio {new / old:.3f}", flush=True)
        print(f"{name}: median ratio {statistics.median(ratios):.3f} over {rounds} rounds", flush=True)
    against: dict[str, list[float]] = {"append-period": [], "append-never": []}
    for _ in range(rounds):
        raw = once(here, "raw")
        for name, ratios in against.items():
            new = once(here, name)
            ratios.append(new / raw)
            print(f"{name} vs raw loop: raw {raw:,.0f}/s, this tree {new:,.0f}/s, ratio {new / raw:.3f}", flush=True)
    for name, ratios in against.items():
        print(f"{name} vs raw loop: median ratio {statistics.median(ratios):.3f} over {rounds} rounds", flush=True)


BIG = 4096


def big_append_pair(root: str, rounds: int, batches: int, use_floor: bool) -> dict[str, list[float]]:
    """``append_many`` of 4 KiB records in batches of 1,000 with a 50 ms sync period
    (open untimed; ``batches`` batches, then close: every record durable) against
    the applog_append floor and the disk's sequential write (as many MB), in
    alternating order round by round; MB/s of record data, and the bytes the engine
    and the floor wrote (the kernel's count).  The volume stays in one segment."""
    data = os.urandom(BIG)
    batch = [data] * 1000
    mb = batches * 1000 * BIG / (1 << 20)
    out: dict[str, list[float]] = {"engine": [], "floor": [], "seq": [], "eb": [], "fb": []}
    for r in range(rounds):
        path = os.path.join(root, f"big-{r}")

        def engine(path: str = path) -> None:
            log = AppendLog.open(path, sync=0.05)
            wchar0 = floor.io_counts()[1]
            start = time.perf_counter()
            for _ in range(batches):
                log.append_many(batch)
            log.close()
            out["engine"].append(mb / (time.perf_counter() - start))
            out["eb"].append(floor.io_counts()[1] - wchar0)
            shutil.rmtree(path)

        def floor_side(r: int = r) -> None:
            base = os.path.join(root, f"floor-{r}")
            res = floor.run("applog_append", applog_args(base, BIG, 1000, batches))
            out["floor"].append(mb / res.seconds)
            out["fb"].append(res.wchar)
            for ext in (".log", ".crc", ".idx"):
                os.unlink(base + ext)

        sides: list[Callable[[], None]] = [engine, floor_side] if use_floor else [engine]
        for fn in sides if r % 2 == 0 else sides[::-1]:
            fn()
        out["seq"].append(raw_sequential_write_mb_s(root, megabytes=max(1, int(mb))))
    return out


def paired_get(log: AppendLog, n: int, db: sqlite3.Connection, rows: int, lookups: int, rounds: int) -> list[float]:
    """Per-round ratios of random ``get(i)`` over ``n`` records to sqlite3's select by
    rowid over ``rows`` rows, alternating order round by round."""
    ratios = []
    for r in range(rounds):
        if r % 2 == 0:
            ours = bench_get(log, n, lookups)
            theirs = bench_sqlite_get(db, rows, lookups)
        else:
            theirs = bench_sqlite_get(db, rows, lookups)
            ours = bench_get(log, n, lookups)
        ratios.append(ours / theirs)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (CI)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; each measure keeps its best")
    parser.add_argument("--pair", metavar="TREE", help="compare with the engine checkout at TREE (paired)")
    args = parser.parse_args()
    if args.pair:
        paired(args.pair, args.rounds)
        return
    quick = args.quick
    n_append = 100_000 if quick else 300_000
    seconds = 0.5 if quick else 1.5
    small, large = (100_000, 1_000_000) if quick else (1_000_000, 10_000_000)
    lookups = 10_000 if quick else 30_000
    raw = "raw framed append loop (no fsync)"
    get_small, get_large = f"get(index), {small:,} records", f"get(index), {large:,} records"
    sql = f"sqlite3 select by rowid, {small:,} rows"
    btw_small, btw_large = f"between() lookup, {small:,} records", f"between() lookup, {large:,} records"
    results: dict[str, float] = {}
    with bench_dir("engine-bench-applog-") as root:
        results.update(
            best_of(
                args.rounds,
                {
                    raw: lambda: raw_framed_append_rate(root, RECORD, n_append),
                    "queuelib FifoDiskQueue.push": lambda: bench_queuelib(root, n_append),
                    "append sync=0.05s": lambda: bench_append(root, 0.05, n_append, many=False),
                    "append_many sync=0.05s (x1000)": lambda: bench_append(root, 0.05, n_append, many=True),
                    "append sync=never": lambda: bench_append(root, "never", n_append, many=False),
                    "append_many sync=never (x1000)": lambda: bench_append(root, "never", n_append, many=True),
                },
            )
        )
        results.update(
            best_of(
                max(1, args.rounds - 1),
                {
                    "raw write+fdatasync loop": lambda: raw_append_fsync_rate(root, RECORD, seconds),
                    "append sync=always, 1 thread": lambda: bench_append_always(root, 1, seconds),
                    "append sync=always, 8 threads": lambda: bench_append_always(root, 8, seconds),
                },
            )
        )
        log_small = build_log(os.path.join(root, "small"), small)
        log_large = build_log(os.path.join(root, "large"), large)
        db = build_sqlite(root, small)
        results.update(
            best_of(
                args.rounds + 2,
                {
                    get_small: lambda: bench_get(log_small, small, lookups),
                    sql: lambda: bench_sqlite_get(db, small, lookups),
                    get_large: lambda: bench_get(log_large, large, lookups),
                    btw_small: lambda: bench_between(log_small, small, lookups),
                    btw_large: lambda: bench_between(log_large, large, lookups),
                },
            )
        )
        db_large = build_sqlite(root, large)
        sql_large = f"sqlite3 select by rowid, {large:,} rows"
        results[sql_large] = bench_sqlite_get(db_large, large, lookups)
        get_ratios = paired_get(log_large, large, db_large, large, lookups, 5)
        log_small.close()
        log_large.close()
        db.close()
        db_large.close()
        missing = floor.available("applog_append")
        batches = 8 if quick else 14  # 33 / 58 MB: one 64 MiB segment
        big = big_append_pair(root, 5, batches, missing is None)

    order = [
        raw, "raw write+fdatasync loop", "queuelib FifoDiskQueue.push",
        "append sync=0.05s", "append_many sync=0.05s (x1000)", "append sync=never", "append_many sync=never (x1000)",
        "append sync=always, 1 thread", "append sync=always, 8 threads",
        get_small, get_large, sql, btw_small, btw_large,
    ]
    order.insert(order.index(sql) + 1, sql_large)
    rows = [Row(name, results[name]) for name in order]
    big_note = f"{batches} x 1,000 x 4 KiB, closed; median of 5 alternating rounds"
    big_name = "append_many 4 KiB sync=0.05s (x1000)"
    rows.append(Row("raw sequential write", median(big["seq"]), "MB/s", note=big_note))
    rows.append(Row(big_name, median(big["engine"]), "MB/s", note=big_note))
    if missing is None:
        same = big["fb"][-1] / big["eb"][-1] if big["eb"][-1] else 0.0
        vs_floor = median(paired_ratios(big["engine"], big["floor"]))
        floor_seq = median(paired_ratios(big["floor"], big["seq"]))
        rows.append(Row("floor: applog_append (C) 4 KiB", median(big["floor"]), "MB/s",
                        note=f"{big_note}; engine / floor {vs_floor:.2f}x; floor / sequential write {floor_seq:.2f}x;"
                        f" bytes written floor / engine {same:.3f}"))
    else:
        rows.append(Row("floor: applog_append (C) 4 KiB", 0.0, "MB/s", note=floor.NOT_BUILT))
    seq_ratios = paired_ratios(big["engine"], big["seq"])
    report(
        "append log (100-byte records; 4 KiB for the sequential-write target)" + (" --quick" if quick else ""),
        rows,
        baseline=raw,
        targets=[
            Target(big_name, "raw sequential write", 0.8, median(seq_ratios), how="median of 5 paired rounds"),
            ("append_many sync=0.05s (x1000)", raw, 0.8),
            ("append sync=0.05s", raw, 0.8),
            (get_small, sql, 2.0),
            Target(get_large, sql_large, 3.0, median(get_ratios),
                   how=f"median of 5 paired rounds, {min(get_ratios):.2f}-{max(get_ratios):.2f}x"),
            (btw_large, btw_small, 1 / 1.5),
        ],
        json_path=os.path.join(os.path.dirname(__file__), "results", "applog.json"),
    )


if __name__ == "__main__":
    main()
