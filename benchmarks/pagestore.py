"""Page store benchmark: ``python3 -m benchmarks.pagestore [--quick]``.

Side by side in one run, on the same disk:

* durable one-page (4 KiB) update transactions: engine PageStore vs sqlite3
  (WAL, synchronous=FULL, one 4 KiB blob updated per transaction) vs LMDB (sync
  on) vs the format's floor (``benchmarks/floor/pages_tx.c``: the commit's bytes as
  one O_DSYNC write, the checkpoints as the store takes them, nothing else), in
  interleaved slices; the target (>= 1.0x sqlite3 in every paired round) is
  checked on the lowest per-round ratio;
* 100-page (400 KiB) transactions in MB/s of page data against their floor (the
  journal's before and after images, the checkpoint's page, checksum and flag
  writes and its syncs, in C) and the disk's sequential write rate, alternating
  round by round; the bytes the engine and the floor wrote are compared;
* recovery of a crashed journal of about 100 MB (20 MB with ``--quick``): the
  time of ``PageStore.open`` (scan, redo, store fsync, journal reset) against
  reading the journal file once, both from a cold page cache (and the warm read).

Results: ``benchmarks/results/pagestore.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import lmdb

from benchmarks import floor
from benchmarks.common import (
    Row,
    Target,
    bench_dir,
    drop_files,
    median,
    paired_ratios,
    raw_append_fsync_rate,
    raw_sequential_write_mb_s,
    report,
)
from benchmarks.floor.stores import pages_args
from engine.pages import PageStore, journal_path

PAGE = 4096
#: pwritev's flag for a write synced by itself (Linux); elsewhere write + fdatasync.
DSYNC: int | None = getattr(os, "RWF_DSYNC", None)
RESULTS = os.path.join(os.path.dirname(__file__), "results", "pagestore.json")


def _payloads() -> tuple[bytes, bytes]:
    a = os.urandom(PAGE)
    return a, a[::-1]


Step = Callable[[float], "int | tuple[int, float]"]


def _loop(body: Callable[[int], None]) -> Step:
    """A timed slice runner: call ``body(i)`` until ``seconds`` pass; returns the count."""
    state = {"i": 0}

    def step(seconds: float) -> int:
        deadline = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < deadline:
            body(state["i"])
            state["i"] += 1
            n += 1
        return n

    return step


def setup_pagestore(directory: str) -> tuple[Step, Callable[[], None]]:
    store = PageStore.open(os.path.join(directory, "one.db"), page_size=PAGE)
    data = _payloads()
    with store.transaction() as tx:
        page = tx.allocate()

    def body(i: int) -> None:
        with store.transaction() as tx:
            tx.write(page, 0, data[i & 1])

    return _loop(body), store.close


def setup_raw_commit(directory: str) -> tuple[Step, Callable[[], None]]:
    """The disk's ceiling for engine's commit: a bare loop writing one transaction's
    bytes (8,255: header, one whole-page MODIFY with both images, COMPLETE) as one
    range into reused space, then fdatasync; rewinds every 4 MiB like the journal."""
    path = os.path.join(directory, "raw-commit.bin")
    size = 25 + 17 + 2 * PAGE + 21
    per_file = (4 << 20) // size
    buf = os.urandom(size)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, os.urandom(20 + per_file * size), 0)  # the blocks exist, as in a reused journal
    os.fsync(fd)

    def body(i: int) -> None:
        os.pwrite(fd, buf, 20 + (i % per_file) * size)
        os.fdatasync(fd)

    return _loop(body), lambda: os.close(fd)


def setup_sqlite(directory: str) -> tuple[Step, Callable[[], None]]:
    con = sqlite3.connect(os.path.join(directory, "one.sqlite"), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
    data = _payloads()
    con.execute("INSERT INTO t VALUES (1, ?)", (data[0],))

    def body(i: int) -> None:
        con.execute("UPDATE t SET v = ? WHERE id = 1", (data[i & 1],))

    return _loop(body), con.close


def setup_lmdb(directory: str) -> tuple[Step, Callable[[], None]]:
    env = lmdb.open(os.path.join(directory, "one.lmdb"), map_size=64 << 20, sync=True)
    data = _payloads()

    def body(i: int) -> None:
        with env.begin(write=True) as txn:
            txn.put(b"k", data[i & 1])

    return _loop(body), env.close


def interleaved(
    contenders: dict[str, Step], rounds: int, slice_s: float, warmup_s: float
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Rates measured in alternating slices, so that load from other processes on
    the shared machine hits every contender alike; each first runs ``warmup_s``
    (files reach their steady size: SQLite's WAL and engine's journal wrap around).
    Returns the rate over all slices and the per-round rates (for paired ratios).
    A step returns its count, or (count, seconds) when it times itself (a floor
    program: its start-up is not its work)."""
    for step in contenders.values():
        step(warmup_s)
    counts = dict.fromkeys(contenders, 0)
    times = dict.fromkeys(contenders, 0.0)
    per_round: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        # Forward, then backward: no contender always runs right after the same one
        # (measured here: one store's rate moved 10% with its place in a fixed order).
        for name in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            got = contenders[name](slice_s)
            elapsed = time.perf_counter() - start
            if isinstance(got, tuple):
                got, elapsed = got
            counts[name] += got
            times[name] += elapsed
            per_round[name].append(got / elapsed if elapsed else 0.0)
    return {name: counts[name] / times[name] for name in contenders}, per_round


def setup_floor_commit(directory: str) -> tuple[Step, Callable[[], None]]:
    """The floor of one-page commits (``pages_tx``, C): each slice runs it for the
    slice's time, continuing where the previous slice left the journal."""
    state = {"tx": 0}

    def step(seconds: float) -> tuple[int, float]:
        res = floor.run("pages_tx", pages_args(directory, 1, 1, 0, int(seconds * 1000), final=False,
                                               start_tx=state["tx"]))
        state["tx"] = res.extra["next_tx"]
        return res.ops, res.seconds

    return step, lambda: None  # type: ignore[return-value]


def bench_100_pages(directory: str, rounds: int, megabytes: int, use_floor: bool) -> dict[str, list[float]]:
    """Per-round MB/s (page data) of 100-page update transactions of the engine and
    of their floor, and of sequential writes, in alternating order round by round.

    Fair volumes: in every round each side writes ``megabytes`` of page data (the
    transactions end with a checkpoint, as PageStore.checkpoint() does, so the
    store's writes and syncs are paid); the engine and the floor cycle over the
    same 1,000 pages, so their checkpoints write the same pages.  The bytes each
    wrote (the kernel's count) are kept: they must be equal.
    """
    path = os.path.join(directory, "hundred.db")
    blobs = [os.urandom(PAGE) for _ in range(8)]
    store = PageStore.open(path, page_size=PAGE)
    with store.transaction() as tx:
        pages = [tx.allocate() for _ in range(1000)]
    store.checkpoint()
    per_round = -(-megabytes * (1 << 20) // (100 * PAGE))  # transactions per round
    per_round = -(-per_round // 10) * 10  # whole cycles over the 1,000 pages
    state = {"count": 0}
    out: dict[str, list[float]] = {"engine": [], "floor": [], "seq": [], "engine_bytes": [], "floor_bytes": []}

    def engine_round() -> None:
        wchar0 = floor.io_counts()[1]
        start = time.perf_counter()
        for _ in range(per_round):
            count = state["count"]
            base = (count * 100) % 1000
            with store.transaction() as tx:
                for i in range(100):
                    tx.write(pages[base + i], 0, blobs[(count + i) & 7])
            state["count"] = count + 1
        store.checkpoint()
        out["engine"].append(per_round * 100 * PAGE / (1 << 20) / (time.perf_counter() - start))
        out["engine_bytes"].append(floor.io_counts()[1] - wchar0)

    def floor_round() -> None:
        res = floor.run("pages_tx", pages_args(directory, 100, 1000, per_round, 0, final=True))
        out["floor"].append(per_round * 100 * PAGE / (1 << 20) / res.seconds)
        out["floor_bytes"].append(res.wchar)

    engine_round()  # warm-up: the journal reaches its steady size (not counted)
    if use_floor:
        floor_round()
    for key in out:
        out[key].clear()
    for r in range(rounds):
        order = [engine_round, floor_round] if use_floor else [engine_round]
        for fn in order if r % 2 == 0 else order[::-1]:
            fn()
        out["seq"].append(raw_sequential_write_mb_s(directory, megabytes=megabytes))
    store.close()
    return out


_CRASHER = textwrap.dedent(
    """
    import os, sys
    from engine.pages import PageStore
    path, megabytes = sys.argv[1], int(sys.argv[2])
    store = PageStore.open(path, page_size=4096, checkpoint_bytes=1 << 40)
    with store.transaction() as tx:
        pages = [tx.allocate() for _ in range(1000)]
    blobs = [os.urandom(4096) for _ in range(8)]
    n = 0
    while store.journal_size < megabytes << 20:
        with store.transaction() as tx:
            for i in range(100):
                tx.write(pages[(n * 100 + i) % 1000], 0, blobs[(n + i) & 7])
        n += 1
    os._exit(0)  # crash: no checkpoint, the journal keeps every transaction
    """
)


def _read_once(path: str) -> float:
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
    return time.perf_counter() - start


def bench_recovery(directory: str, megabytes: int) -> dict[str, float]:
    """Recovery of a crashed journal of ``megabytes`` against reading it once.

    Both from a cold page cache (the files synced, then dropped from the cache):
    the read is then the disk's, as recovery's own read of the journal is.  The
    warm read (the file in the page cache) is reported beside it.  Returns seconds
    (``recovery``, ``read_cold``, ``read_warm``) and the journal's ``bytes``.
    """
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "crashed.db")
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", _CRASHER, path, str(megabytes)], check=True, env=env)
    jpath = journal_path(path)
    size = os.path.getsize(jpath)
    drop_files([jpath])
    read_cold = _read_once(jpath)
    read_warm = _read_once(jpath)
    drop_files([os.path.join(directory, name) for name in os.listdir(directory)])
    start = time.perf_counter()
    store = PageStore.open(path)
    recovery = time.perf_counter() - start
    redone = store.recovery.total("redone")
    store.close()
    with open(jpath, "rb") as f:
        assert redone > 0 and f.read(20) == b"JRNL" + bytes(16)  # recovered and reset
    shutil.rmtree(directory, ignore_errors=True)
    return {"recovery": recovery, "read_cold": read_cold, "read_warm": read_warm, "bytes": size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short runs, 20 MB recovery journal")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    targets: list[Target] = []
    missing = floor.available("pages_tx")
    floor_name = "floor: pages_tx (C)"
    with bench_dir("pagestore-") as directory:
        raw = raw_append_fsync_rate(directory, record_size=2 * PAGE, seconds=1.0 if args.quick else 2.0)
        rows.append(Row("raw append+fdatasync (8 KiB)", raw, "ops/s", "growing file: a metadata commit each"))
        closers = []
        steps: dict[str, Step] = {}
        contenders: list[tuple[str, Callable[[str], tuple[Step, Callable[[], None]]]]] = [
            ("engine PageStore 1-page tx", setup_pagestore),
            ("sqlite3 WAL FULL 4 KiB blob", setup_sqlite),
            ("LMDB sync 4 KiB value", setup_lmdb),
        ]
        if missing is None:
            contenders.append((f"{floor_name} 1-page tx", setup_floor_commit))
        for name, setup in contenders:
            step, close = setup(directory)
            steps[name] = step
            closers.append(close)
        rounds = 6 if args.quick else 10
        rates, per_round = interleaved(steps, rounds, slice_s=0.4, warmup_s=1.0 if args.quick else 2.0)
        for close in closers:
            close()
        for name, rate in rates.items():
            note = f"{rounds} interleaved slices of 0.4 s"
            if name.startswith("floor"):
                note = "the format's I/O only (C), amortised checkpoints; " + note
            rows.append(Row(name, rate, "tx/s", note))
        one = "engine PageStore 1-page tx"
        vs_sqlite = paired_ratios(per_round[one], per_round["sqlite3 WAL FULL 4 KiB blob"])
        met_rounds = sum(r >= 1.0 for r in vs_sqlite)
        targets.append(
            Target(one, "sqlite3 WAL FULL 4 KiB blob", 1.0, min(vs_sqlite),
                   how=f"lowest of {rounds} paired rounds (median {median(vs_sqlite):.2f}x; {met_rounds} met)")
        )
        if missing is None:
            vs_floor = paired_ratios(per_round[one], per_round[f"{floor_name} 1-page tx"])
            next(row for row in rows if row.name == one).note += f"; engine / floor median {median(vs_floor):.2f}x"
        volume = 64 if args.quick else 256
        hrounds = 5 if args.quick else 7
        hundred = bench_100_pages(directory, hrounds, volume, missing is None)
        seq = median(hundred["seq"])
        eng = median(hundred["engine"])
        seq_note = f"{volume} MB, 1 MiB writes + one fsync; median of {hrounds}"
        rows.append(Row("raw sequential write", seq, "MB/s", seq_note))
        rows.append(
            Row("engine PageStore 100-page tx", eng, "MB/s",
                f"{volume} MB of page data per round + checkpoint; median of {hrounds}; {eng / seq:.2f}x sequential")
        )
        if missing is None:
            flo = median(hundred["floor"])
            ratios = paired_ratios(hundred["engine"], hundred["floor"])
            same = hundred["floor_bytes"][-1] / hundred["engine_bytes"][-1] if hundred["engine_bytes"][-1] else 0.0
            rows.append(
                Row(f"{floor_name} 100-page tx", flo, "MB/s",
                    f"journal (both images) + checkpoint, I/O only; {flo / seq:.2f}x sequential"
                    f" (paired {median(paired_ratios(hundred['floor'], hundred['seq'])):.2f}x);"
                    f" bytes written floor / engine {same:.3f}")
            )
            targets.append(
                Target("engine PageStore 100-page tx", f"{floor_name} 100-page tx", 0.85, median(ratios),
                       how=f"median of {hrounds} paired rounds, {min(ratios):.2f}-{max(ratios):.2f}x")
            )
        else:
            rows.append(Row(f"{floor_name} 100-page tx", 0.0, "MB/s", floor.NOT_BUILT))
        megabytes = 20 if args.quick else 100
        recs = [bench_recovery(os.path.join(directory, f"rec{i}"), megabytes) for i in range(1 if args.quick else 3)]
        rec = median([r["recovery"] for r in recs])
        read_once = median([r["read_cold"] for r in recs])
        warm = median([r["read_warm"] for r in recs])
        size = int(recs[0]["bytes"])
        rec_note = f"{size / (1 << 20):.0f} MB journal, cold cache; median of {len(recs)}"
        rows.append(Row("recovery of crashed journal", rec, "s", rec_note))
        rows.append(Row("read that journal once", read_once, "s", f"cold cache; median of {len(recs)}"))
        rows.append(Row("read that journal once (warm)", warm, "s", f"page cache; recovery = {rec / warm:.1f}x this"))
        ratios_rec = [r["recovery"] / r["read_cold"] for r in recs]
        targets.append(Target("recovery of crashed journal", "read that journal once", 2.0, median(ratios_rec),
                              at_most=True, how=f"median of {len(recs)}, cold cache"))
    title = "page store: durable transactions" + (" (quick)" if args.quick else "")
    result = report(title, rows, baseline="sqlite3 WAL FULL 4 KiB blob", targets=targets, json_path=RESULTS)
    ratio = rec / read_once if read_once else float("inf")
    print(f"recovery of a {size / (1 << 20):.0f} MB journal: {rec:.2f} s = {ratio:.1f}x reading it once (cold),"
          f" {rec / warm:.1f}x (warm)")
    result["recovery_ratio_to_read"] = ratio
    result["recovery_runs"] = recs
    result["hundred_page_rounds"] = hundred
    result["one_page_rounds"] = per_round
    with open(RESULTS, "w", encoding="utf-8") as out:
        json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
