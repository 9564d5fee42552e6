"""Key-value store benchmark: engine.kv against sqlite3, LMDB and diskcache, side by side.

    python3 -m benchmarks.kv [--quick] [--keys N] [--rounds R] [--reader-seconds S] [--dir DIR]
                             [--only STORES] [--load-only]

N keys of 16 random bytes with 100-byte values (1,000,000; ``--quick``:
200,000), loaded in transactions of 1,000.  Then, for every store:

* random gets of loaded keys;
* full ordered scans, and range scans of 10,000 keys from a random loaded key;
* random puts (half overwrites with new values, half new keys) in durable transactions of 1,000;
* durable single puts (overwrites with new values), each its own transaction, synced before it returns;
* gets in 4 reader processes (each its own read-only handle) while this process
  commits durable single puts: as fast as it can (each store's writer commits at
  its own rate, so a faster writer gives its readers more commits to take), and
  paced at one fixed rate the same for every store (``--reader-pace``, default
  100 commits/s, which every store's writer sustains here), so both sides'
  readers take the same commits; the commits per second each writer achieved are
  reported beside its readers' gets; how much each reader's RSS grows from
  opening the store to its last get is the memory row;
* file size on disk after the load and after deleting keys (in transactions of
  1,000); for engine also after ``compact()``.

Every phase runs on the four stores (all open at once) in ``R`` paired rounds
(default 5): a slice of the phase on each store in turn, the order rotating from
round to round, so the shared machine's swings (the disk's sync rate varies
several-fold between minutes) land on every store alike.  A store's rate is the
median of its rounds; a ratio is the median of the rounds' ratios.

Durability settings: engine defaults (one fdatasync per commit); sqlite3 a
``WITHOUT ROWID`` table with a BLOB primary key, ``journal_mode=WAL``,
``synchronous=FULL``; LMDB (py-lmdb) with ``sync=True``; diskcache ``Cache``
with ``sqlite_synchronous=2`` (FULL) and ``transact()`` for batches (its range
scan is a SQL range query on its own table: it has no ordered range API).
Results go to ``benchmarks/results/kv.json`` and ``kv-run.md`` (1 M keys;
``kv-200k.*`` for 200,000 and so on); the notes in ``kv.md`` quote them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from benchmarks.common import median, paired_ratios
from engine.kv import KV

RESULTS = os.path.join(os.path.dirname(__file__), "results")
SCAN = 10_000
VALUE = 100


def _du(path: str) -> int:
    """Bytes on disk (allocated blocks) of a file or every file in a directory."""
    paths = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    return sum(os.stat(p).st_blocks * 512 for p in paths if os.path.exists(p))


class Store:
    name = ""

    def __init__(self, root: str) -> None:
        self.root = root

    def put_batch(self, pairs: list[tuple[bytes, bytes]]) -> None:
        raise NotImplementedError

    def put_one(self, key: bytes, value: bytes) -> None:
        raise NotImplementedError

    def get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def scan(self, start: bytes, n: int) -> int:
        raise NotImplementedError

    def scan_all(self) -> int:
        """Every key in order (a full ordered scan); returns the count."""
        raise NotImplementedError

    @staticmethod
    def reader(root: str) -> tuple[Callable[[bytes], Any], Callable[[], None]]:
        """In another process: (get, close) of a read-only handle on the store at ``root``."""
        raise NotImplementedError

    def delete_batch(self, keys: list[bytes]) -> None:
        raise NotImplementedError

    def size(self) -> int:
        return _du(self.root)

    def close(self) -> None:
        raise NotImplementedError


class EngineStore(Store):
    name = "engine.kv"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        os.makedirs(root)
        self.kv = KV.open(os.path.join(root, "bench.kv"))

    def put_batch(self, pairs: list[tuple[bytes, bytes]]) -> None:
        with self.kv.transaction() as tx:
            for k, v in pairs:
                tx[k] = v

    def put_one(self, key: bytes, value: bytes) -> None:
        self.kv[key] = value

    def get(self, key: bytes) -> bytes | None:
        return self.kv[key]

    def scan(self, start: bytes, n: int) -> int:
        return sum(1 for _ in islice(self.kv.items(start), n))

    def scan_all(self) -> int:
        return sum(1 for _ in self.kv.items())

    @staticmethod
    def reader(root: str) -> tuple[Callable[[bytes], Any], Callable[[], None]]:
        reader = KV.open_reader(os.path.join(root, "bench.kv"))
        return reader.get, reader.close

    def delete_batch(self, keys: list[bytes]) -> None:
        with self.kv.transaction() as tx:
            for k in keys:
                del tx[k]

    def compact(self) -> None:
        self.kv.compact()

    def close(self) -> None:
        self.kv.close()


class SqliteStore(Store):
    name = "sqlite3"

    def __init__(self, root: str) -> None:
        super().__init__(root)
        os.makedirs(root)
        self.db = sqlite3.connect(os.path.join(root, "bench.sqlite"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")

    def put_batch(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", pairs)
        self.db.execute("COMMIT")

    def put_one(self, key: bytes, value: bytes) -> None:
        self.db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))

    def get(self, key: bytes) -> bytes | None:
        row = self.db.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def scan(self, start: bytes, n: int) -> int:
        return len(self.db.execute("SELECT k, v FROM kv WHERE k >= ? ORDER BY k LIMIT ?", (start, n)).fetchall())

    def scan_all(self) -> int:
        return sum(1 for _ in self.db.execute("SELECT k, v FROM kv ORDER BY k"))

    @staticmethod
    def reader(root: str) -> tuple[Callable[[bytes], Any], Callable[[], None]]:
        db = sqlite3.connect(os.path.join(root, "bench.sqlite"), isolation_level=None)

        def get(key: bytes) -> Any:
            row = db.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
            return None if row is None else row[0]

        return get, db.close

    def delete_batch(self, keys: list[bytes]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("DELETE FROM kv WHERE k = ?", [(k,) for k in keys])
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.close()


class LmdbStore(Store):
    name = "lmdb"

    def __init__(self, root: str) -> None:
        import lmdb

        super().__init__(root)
        os.makedirs(root)
        self.env = lmdb.open(root, map_size=8 << 30, sync=True, metasync=True)

    def put_batch(self, pairs: list[tuple[bytes, bytes]]) -> None:
        with self.env.begin(write=True) as txn:
            for k, v in pairs:
                txn.put(k, v)

    def put_one(self, key: bytes, value: bytes) -> None:
        with self.env.begin(write=True) as txn:
            txn.put(key, value)

    def get(self, key: bytes) -> bytes | None:
        with self.env.begin() as txn:
            return txn.get(key)  # type: ignore[no-any-return]

    def scan(self, start: bytes, n: int) -> int:
        with self.env.begin() as txn, txn.cursor() as cur:
            if not cur.set_range(start):
                return 0
            return sum(1 for _ in islice(cur.iternext(), n))

    def scan_all(self) -> int:
        with self.env.begin() as txn, txn.cursor() as cur:
            cur.first()
            return sum(1 for _ in cur.iternext())

    @staticmethod
    def reader(root: str) -> tuple[Callable[[bytes], Any], Callable[[], None]]:
        import lmdb

        env = lmdb.open(root, map_size=8 << 30, readonly=True)

        def get(key: bytes) -> Any:
            with env.begin() as txn:
                return txn.get(key)

        return get, env.close

    def delete_batch(self, keys: list[bytes]) -> None:
        with self.env.begin(write=True) as txn:
            for k in keys:
                txn.delete(k)

    def close(self) -> None:
        self.env.close()


class DiskcacheStore(Store):
    name = "diskcache"

    def __init__(self, root: str) -> None:
        import diskcache  # type: ignore[import-untyped]

        super().__init__(root)
        self.cache = diskcache.Cache(root, sqlite_synchronous=2, size_limit=1 << 40, cull_limit=0)

    def put_batch(self, pairs: list[tuple[bytes, bytes]]) -> None:
        with self.cache.transact():
            for k, v in pairs:
                self.cache.set(k, v)

    def put_one(self, key: bytes, value: bytes) -> None:
        self.cache.set(key, value)

    def get(self, key: bytes) -> bytes | None:
        return self.cache.get(key)  # type: ignore[no-any-return]

    def scan(self, start: bytes, n: int) -> int:
        sql = self.cache._sql
        rows = sql("SELECT key, value FROM Cache WHERE key >= ? ORDER BY key LIMIT ?", (start, n)).fetchall()
        return len(rows)

    def scan_all(self) -> int:
        return sum(1 for _ in self.cache._sql("SELECT key, value FROM Cache ORDER BY key"))

    @staticmethod
    def reader(root: str) -> tuple[Callable[[bytes], Any], Callable[[], None]]:
        import diskcache

        cache = diskcache.Cache(root)
        return cache.get, cache.close

    def delete_batch(self, keys: list[bytes]) -> None:
        with self.cache.transact():
            for k in keys:
                self.cache.delete(k)

    def close(self) -> None:
        self.cache.close()


STORES: list[type[Store]] = [EngineStore, SqliteStore, LmdbStore, DiskcacheStore]
ENGINE = EngineStore.name


@dataclass
class Result:
    name: str
    #: rates per round, by operation (round i of every store ran back to back)
    rounds: dict[str, list[float]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    #: growth of the resident set (MiB) of each reader process, opened to done, over every round
    reader_rss: list[float] = field(default_factory=list)

    def rate(self, op: str) -> float:
        return median(self.rounds.get(op, []))


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _rss_mib() -> float:
    """This process's resident set now (MiB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / (1 << 20)


def _reader_child(kind: str, root: str, keys: list[bytes], ready: Any, start: Any, stop: Any, out: Any) -> None:
    """One reader process: random gets of ``keys`` from ``start`` until ``stop``;
    puts (gets done, RSS growth in MiB from before opening the store to the end)."""
    rss0 = _rss_mib()
    get, close = {s.__name__: s for s in STORES}[kind].reader(root)
    rng = random.Random(os.getpid())
    sample = [keys[rng.randrange(len(keys))] for _ in range(20_000)]
    get(sample[0])
    ready.set()
    start.wait()
    done = 0
    while not stop.is_set():
        for k in sample[:1000]:
            get(k)
        done += 1000
        sample = sample[1000:] + sample[:1000]
    close()
    out.put((done, _rss_mib() - rss0))


def readers_round(
    store: Store, keys: list[bytes], value: bytes, seconds: float, procs: int, pace: float | None = None
) -> tuple[float, float, list[float]]:
    """Gets per second of ``procs`` reader processes while this process commits
    single durable puts to ``store`` (as fast as it can, or ``pace`` commits per
    second: commit i due at i / pace seconds, a writer behind catching up back to
    back); the commits per second it achieved; each reader's RSS growth (MiB)."""
    ctx = mp.get_context("spawn")
    ready = [ctx.Event() for _ in range(procs)]
    start, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    children = [
        ctx.Process(target=_reader_child, args=(type(store).__name__, store.root, keys, r, start, stop, out))
        for r in ready
    ]
    for c in children:
        c.start()
    for r in ready:
        if not r.wait(120):
            raise SystemExit(f"{store.name}: a reader process did not start")
    rng = random.Random(11)
    commits = 0
    t0 = time.perf_counter()
    start.set()
    while (now := time.perf_counter()) - t0 < seconds:
        if pace is not None and t0 + commits / pace > now:
            time.sleep(min(t0 + commits / pace, t0 + seconds) - now)
            continue
        store.put_one(keys[rng.randrange(len(keys))], rng.randbytes(VALUE))  # a new value each commit
        commits += 1
    stop.set()
    elapsed = time.perf_counter() - t0
    got = [out.get(timeout=60) for _ in children]
    for c in children:
        c.join()
    return sum(n for n, _ in got) / elapsed, commits / elapsed, [rss for _, rss in got]


def run_all(stores: list[Store], keys: list[bytes], args: argparse.Namespace) -> list[Result]:
    """Every phase on every store in paired rounds: round r runs one slice of the
    phase on each store in turn (the order rotating), so a minute of a slow disk or
    busy cores (this machine is shared) lands on every store alike; a store's rate
    is the median of its rounds, a ratio the median of the rounds' ratios."""
    rng = random.Random(7)
    value = bytes(rng.randrange(256) for _ in range(VALUE))
    results = {s.name: Result(s.name) for s in stores}
    n = len(keys)

    def phase(name: str, slices: list[tuple[int, Callable[[Store], Callable[[], Any]]]]) -> None:
        for r, (count, make_slice) in enumerate(slices):
            order = stores[r % len(stores) :] + stores[: r % len(stores)]
            for store in order:
                fn = make_slice(store)
                t0 = time.perf_counter()
                fn()
                results[store.name].rounds.setdefault(name, []).append(count / (time.perf_counter() - t0))
        print(f"{name}: " + ", ".join(f"{s.name} {results[s.name].rate(name):,.0f}/s" for s in stores), flush=True)

    # the load: 1,000 puts per transaction, grouped into args.rounds rounds
    per_round = max(1, n // 1000 // args.rounds)
    batches = list(_batches(keys, 1000))

    def load_slice(group: list[list[bytes]]) -> tuple[int, Callable[[Store], Callable[[], Any]]]:
        pairs = [[(k, value) for k in b] for b in group]

        def run(store: Store) -> Callable[[], Any]:
            def load() -> None:
                for p in pairs:
                    store.put_batch(p)

            return load

        return sum(len(b) for b in group), run

    phase(LOAD, [load_slice(batches[i : i + per_round]) for i in range(0, len(batches), per_round)])
    for store in stores:
        results[store.name].sizes["after load"] = store.size()
    if args.load_only:
        return [results[s.name] for s in stores]

    def get_slice(sample: list[bytes]) -> tuple[int, Callable[[Store], Callable[[], Any]]]:
        def run(store: Store) -> Callable[[], Any]:
            def gets() -> None:
                get = store.get
                for k in sample:
                    get(k)

            return gets

        return len(sample), run

    sample = [keys[rng.randrange(n)] for _ in range(args.gets)]
    phase(GET, [get_slice(b) for b in _batches(sample, max(1, args.gets // args.rounds))])
    phase(SCAN_ALL, [(n, lambda store: store.scan_all) for _ in range(args.rounds)])
    ordered = sorted(keys)  # starts with SCAN keys after them: every scan counts SCAN keys
    starts = [ordered[rng.randrange(max(1, n - SCAN))] for _ in range(args.scans * args.rounds)]

    def scan_slice(group: list[bytes]) -> tuple[int, Callable[[Store], Callable[[], Any]]]:
        return len(group) * SCAN, lambda store: lambda: [store.scan(s, SCAN) for s in group]

    phase(SCAN_RANGE, [scan_slice(g) for g in _batches(starts, args.scans)])
    new_keys = [rng.randbytes(16) for _ in range(args.batch_puts * 500)]
    # Every put stores a value the key does not hold yet (an overwrite with the loaded
    # value would let a store that notices leave the page alone).
    batch_pairs = [
        (keys[rng.randrange(n)] if i % 2 else new_keys[i // 2], rng.randbytes(VALUE))
        for i in range(args.batch_puts * 1000)
    ]

    def put_slice(group: list[list[tuple[bytes, bytes]]]) -> tuple[int, Callable[[Store], Callable[[], Any]]]:
        def run(store: Store) -> Callable[[], Any]:
            def puts() -> None:
                for p in group:
                    store.put_batch(p)

            return puts

        return sum(map(len, group)), run

    put_batches = list(_batches(batch_pairs, 1000))
    step = max(1, len(put_batches) // args.rounds)
    phase(PUT_BATCH, [put_slice(put_batches[i : i + step]) for i in range(0, len(put_batches), step)])

    def single_slice(picks: list[tuple[bytes, bytes]]) -> tuple[int, Callable[[Store], Callable[[], Any]]]:
        def run(store: Store) -> Callable[[], Any]:
            def puts() -> None:
                for k, v in picks:
                    store.put_one(k, v)

            return puts

        return len(picks), run

    singles = [(keys[rng.randrange(n)], rng.randbytes(VALUE)) for _ in range(args.rounds * args.per_round)]
    phase(PUT_ONE, [single_slice(b) for b in _batches(singles, args.per_round)])
    if args.reader_seconds > 0:
        for r in range(args.reader_rounds):
            order = stores[r % len(stores) :] + stores[: r % len(stores)]
            for store in order:
                paced = (args.reader_pace, READ_4_PACED, READ_4_PACED_WRITER)
                for pace, gets, writes in ((None, READ_4, READ_4_WRITER), paced):
                    rate, commit_rate, rss = readers_round(store, keys, value, args.reader_seconds, READERS, pace)
                    results[store.name].rounds.setdefault(gets, []).append(rate)
                    results[store.name].rounds.setdefault(writes, []).append(commit_rate)
                    results[store.name].reader_rss += rss
        print(f"(paced: {args.reader_pace:g} commits/s for every store)")
        for op in (READ_4, READ_4_WRITER, READ_4_PACED, READ_4_PACED_WRITER):
            print(f"{op}: " + ", ".join(f"{s.name} {results[s.name].rate(op):,.0f}/s" for s in stores))

    def delete_slice(batch: list[bytes]) -> tuple[int, Callable[[Store], Callable[[], Any]]]:
        return len(batch), lambda store: lambda: store.delete_batch(batch)

    doomed = keys[: n // 2]
    phase(DELETE, [delete_slice(b) for b in _batches(doomed, 1000)][: args.rounds * 10])
    for store in stores:
        results[store.name].sizes["after deleting"] = store.size()
        if isinstance(store, EngineStore):
            store.compact()
            results[store.name].sizes["after compact()"] = store.size()
    return [results[s.name] for s in stores]


LOAD = "bulk load, tx of 1,000 puts"
GET = "random get"
SCAN_ALL = "full ordered scan (keys/s)"
SCAN_RANGE = f"range scans of {SCAN:,} (keys/s)"
PUT_BATCH = "random put, tx of 1,000"
PUT_ONE = "durable single put (tx of 1)"
READ_4 = f"gets in {4} reader processes, one writer committing"
READ_4_WRITER = "the writer's commits/s in that phase"
#: The same phase with every store's writer paced at one commit rate (--reader-pace).
PACE = 100
READ_4_PACED = f"gets in {4} reader processes, one writer paced (the same commits/s for every store)"
READ_4_PACED_WRITER = "the paced writer's commits/s achieved"
DELETE = "delete, tx of 1,000"
READERS = 4

#: The issue's targets (issue 29): (operation, other store, engine / other at least).
TARGETS = [
    (GET, "lmdb", 0.5),
    (GET, "sqlite3", 2.0),
    (LOAD, "lmdb", 0.5),
    (LOAD, "sqlite3", 1.2),
    (SCAN_ALL, "lmdb", 1.0),
    (SCAN_RANGE, "lmdb", 1.0),
    (PUT_ONE, "sqlite3", 1.0),
    (PUT_ONE, "lmdb", 1.0),
    (READ_4, "lmdb", 0.5),
    (READ_4_PACED, "lmdb", 0.5),  # (the same row with both writers at one commit rate)
]


def _paired(by: dict[str, Result], op: str, other: str) -> float | None:
    """The median of the per-round ratios engine / other (None if not measured)."""
    ours, theirs = by[ENGINE].rounds.get(op), by[other].rounds.get(op) if other in by else None
    if not ours or not theirs:
        return None
    return median(paired_ratios(ours, theirs))


def write_results(results: list[Result], args: argparse.Namespace, seconds: float) -> None:
    by = {r.name: r for r in results}
    others = [s for s in ("sqlite3", "lmdb", "diskcache") if s in by]
    command = f"python3 -m benchmarks.kv{' --quick' if args.quick else ''} --keys {args.keys} --rounds {args.rounds}"
    lines = [
        "# engine.kv against sqlite3, LMDB and diskcache",
        "",
        f"{args.keys:,} keys of 16 bytes, {VALUE}-byte values, side by side in {args.rounds} paired rounds "
        f"(`{command}`, {seconds:.0f} s, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). "
        "Operations per second, the median of the rounds (higher is better); ratio = the median of "
        "the rounds' engine / other ratios. The paced 4-reader phase: every writer at "
        f"{args.reader_pace:g} commits/s (`--reader-pace`).",
        "",
        "| operation | engine.kv | " + " | ".join(others) + " | " + " | ".join(f"vs {o}" for o in others) + " |",
        "|---|---:|" + "---:|" * (2 * len(others)),
    ]
    for op in by[ENGINE].rounds:
        rates = [by[s].rate(op) for s in [ENGINE, *others]]
        ratios = [_paired(by, op, o) for o in others]
        lines.append(
            f"| {op} | " + " | ".join(f"{r:,.0f}" for r in rates) + " | "
            + " | ".join("-" if r is None else f"{r:.2f}x" for r in ratios) + " |"
        )
    names = [ENGINE, *others]
    lines += ["", "| memory and disk (MB) | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    if any(by[s].reader_rss for s in names):
        rss = [f"{median(by[s].reader_rss):.0f}" for s in names]
        lines.append("| a reader process's RSS growth, opened to done (median) | " + " | ".join(rss) + " |")
    for what in ("after load", "after deleting", "after compact()"):
        row = [by[s].sizes.get(what) for s in names]
        lines.append(f"| file size {what} | " + " | ".join("-" if v is None else f"{v / 1e6:.1f}" for v in row) + " |")
    targets = []
    lines += ["", "| target (issue 29) | ratio (median of paired rounds) | met? |", "|---|---:|---|"]
    for op, other, bound in TARGETS:
        ratio = _paired(by, op, other)
        if ratio is None:
            continue
        lines.append(f"| {op} >= {bound:g}x {other} | {ratio:.2f}x | {'yes' if ratio >= bound else 'no'} |")
        targets.append({
            "measure": f"{op} ({args.keys:,} keys)", "against": other, "ratio": ratio, "target": bound,
            "op": ">=", "met": ratio >= bound, "how": "median of paired rounds",
        })
    os.makedirs(RESULTS, exist_ok=True)
    data = {
        "keys": args.keys,
        "value_bytes": VALUE,
        "rounds": args.rounds,
        "seconds": round(seconds, 1),
        "command": command,
        "reader_pace": args.reader_pace,
        "results": [
            {"store": r.name, "rounds": r.rounds, "rates": {op: r.rate(op) for op in r.rounds}, "sizes": r.sizes,
             "reader_rss_mib": r.reader_rss}
            for r in results
        ],
        "targets": targets,
    }
    suffix = "" if args.keys >= 1_000_000 else f"-{args.keys // 1000}k"
    with open(os.path.join(RESULTS, f"kv{suffix}.json"), "w") as f:
        json.dump(data, f, indent=2)
    with open(os.path.join(RESULTS, f"kv{suffix}-run.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="200,000 keys and fewer operations")
    parser.add_argument("--keys", type=int, help="keys loaded (default 1,000,000; --quick 200,000)")
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds of every phase (default 5)")
    parser.add_argument("--reader-seconds", type=float, help="seconds per round of the 4-reader phase (0: skip)")
    parser.add_argument("--reader-pace", type=float, default=PACE,
                        help=f"commits per second of the paced 4-reader phase (default {PACE})")
    parser.add_argument("--dir", help="where to put the stores (default: a temporary directory)")
    parser.add_argument("--only", help="comma-separated store names")
    parser.add_argument("--load-only", action="store_true", help="the bulk load alone (no other phase)")
    args = parser.parse_args(argv)
    args.keys = args.keys or (200_000 if args.quick else 1_000_000)
    args.gets = 50_000 if args.quick else 200_000
    args.batch_puts = 10 if args.quick else 20
    args.per_round = 30 if args.quick else 60
    args.scans = 2 if args.quick else 4
    args.reader_rounds = min(args.rounds, 3 if args.quick else 5)
    if args.reader_seconds is None:
        args.reader_seconds = 1.0 if args.quick else 2.0
    rng = random.Random(1)
    keys = list({rng.randbytes(16): None for _ in range(args.keys)})
    base = args.dir or tempfile.mkdtemp(prefix="kvbench-")
    t0 = time.perf_counter()
    stores = []
    for make in STORES:
        if args.only and make.name not in args.only.split(","):
            continue
        root = os.path.join(base, make.__name__)
        shutil.rmtree(root, ignore_errors=True)
        stores.append(make(root))
    try:
        results = run_all(stores, keys, args)
    finally:
        for store in stores:
            store.close()
            shutil.rmtree(store.root, ignore_errors=True)
    if not args.only and not args.load_only:
        write_results(results, args, time.perf_counter() - t0)
    else:
        by = {r.name: r for r in results}
        for r in results:
            print(r.name, {op: round(r.rate(op)) for op in r.rounds})
            if r.name != ENGINE and ENGINE in by:
                print(f"  engine/{r.name}", {op: round(_paired(by, op, r.name) or 0, 3) for op in r.rounds})


if __name__ == "__main__":
    main()
