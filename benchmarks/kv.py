"""Key-value store benchmark: engine.kv against sqlite3, LMDB and diskcache, side by side.

    python -m benchmarks.kv [--quick] [--keys N] [--dir DIR]

N keys of 16 random bytes with 100-byte values (1,000,000; ``--quick``:
100,000), loaded in transactions of 1,000.  Then, for every store:

* random gets of loaded keys;
* random puts (half overwrites, half new keys) in durable transactions of 1,000;
* random puts (overwrites) in durable transactions of 1 (every commit synced
  before it returns);
* range scans of 10,000 keys from a random loaded key;
* file size on disk after the load and after deleting half the keys (in
  transactions of 1,000); for engine also after ``compact()``.

Every phase runs on the four stores (all open at once) in interleaved rounds:
a slice of the phase (1,000 puts, 5,000 gets, one scan, 60 single puts) on each
store in turn, so the shared machine's swings (the disk's sync rate varies
several-fold between minutes) land on every store alike.

Durability settings: engine defaults (one fdatasync per commit); sqlite3 a
``WITHOUT ROWID`` table with a BLOB primary key, ``journal_mode=WAL``,
``synchronous=FULL``; LMDB (py-lmdb) with ``sync=True``; diskcache ``Cache``
with ``sqlite_synchronous=2`` (FULL) and ``transact()`` for batches (its range
scan is a SQL range query on its own table: it has no ordered range API).
Results go to ``benchmarks/results/kv.md`` and ``kv.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

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

    def delete_batch(self, keys: list[bytes]) -> None:
        with self.cache.transact():
            for k in keys:
                self.cache.delete(k)

    def close(self) -> None:
        self.cache.close()


STORES: list[Callable[[str], Store]] = [EngineStore, SqliteStore, LmdbStore, DiskcacheStore]


@dataclass
class Result:
    name: str
    rates: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class Timer:
    """Seconds spent per store, accumulated over interleaved rounds."""

    def __init__(self, stores: list[Store]) -> None:
        self.spent = {s.name: 0.0 for s in stores}

    def run(self, store: Store, fn: Callable[[], Any]) -> None:
        t0 = time.perf_counter()
        fn()
        self.spent[store.name] += time.perf_counter() - t0


def run_all(stores: list[Store], keys: list[bytes], args: argparse.Namespace) -> list[Result]:
    """Every phase on every store in interleaved rounds: round r runs a slice of
    the phase on each store in turn, so a minute of a slow disk or busy cores
    (this machine is shared) lands on every store alike."""
    rng = random.Random(7)
    value = bytes(rng.randrange(256) for _ in range(VALUE))
    results = {s.name: Result(s.name) for s in stores}
    n = len(keys)

    def phase(name: str, count: int, slices: list[Callable[[Store], Callable[[], Any]]]) -> None:
        timer = Timer(stores)
        for make_slice in slices:
            for store in stores:
                timer.run(store, make_slice(store))
        for store in stores:
            results[store.name].rates[name] = count / timer.spent[store.name]

    def load_slice(batch: list[bytes]) -> Callable[[Store], Callable[[], Any]]:
        pairs = [(k, value) for k in batch]
        return lambda store: lambda: store.put_batch(pairs)

    phase("load (tx of 1,000)", n, [load_slice(b) for b in _batches(keys, 1000)])
    for store in stores:
        results[store.name].sizes["after load"] = store.size()

    def get_slice(sample: list[bytes]) -> Callable[[Store], Callable[[], Any]]:
        def run(store: Store) -> Callable[[], Any]:
            def gets() -> None:
                get = store.get
                for k in sample:
                    get(k)

            return gets

        return run

    sample = [keys[rng.randrange(n)] for _ in range(args.gets)]
    phase("random get", len(sample), [get_slice(b) for b in _batches(sample, 5000)])
    new_keys = [rng.randbytes(16) for _ in range(args.batch_puts * 500)]
    batch_pairs = [
        (keys[rng.randrange(n)] if i % 2 else new_keys[i // 2], value) for i in range(args.batch_puts * 1000)
    ]

    def put_slice(pairs: list[tuple[bytes, bytes]]) -> Callable[[Store], Callable[[], Any]]:
        return lambda store: lambda: store.put_batch(pairs)

    phase("random put, tx of 1,000", len(batch_pairs), [put_slice(b) for b in _batches(batch_pairs, 1000)])

    def single_slice(picks: list[bytes]) -> Callable[[Store], Callable[[], Any]]:
        def run(store: Store) -> Callable[[], Any]:
            def puts() -> None:
                for k in picks:
                    store.put_one(k, value)

            return puts

        return run

    singles = [keys[rng.randrange(n)] for _ in range(args.rounds * args.per_round)]
    phase("random put, tx of 1", len(singles), [single_slice(b) for b in _batches(singles, args.per_round)])
    starts = [keys[rng.randrange(n)] for _ in range(args.scans)]

    def scan_slice(start: bytes) -> Callable[[Store], Callable[[], Any]]:
        return lambda store: lambda: store.scan(start, SCAN)

    phase("range scan of 10,000 (keys/s)", len(starts) * SCAN, [scan_slice(s) for s in starts])

    def delete_slice(batch: list[bytes]) -> Callable[[Store], Callable[[], Any]]:
        return lambda store: lambda: store.delete_batch(batch)

    doomed = keys[: n // 2]
    phase("delete half, tx of 1,000", len(doomed), [delete_slice(b) for b in _batches(doomed, 1000)])
    for store in stores:
        results[store.name].sizes["after deleting half"] = store.size()
        if isinstance(store, EngineStore):
            store.compact()
            results[store.name].sizes["after compact()"] = store.size()
    return [results[s.name] for s in stores]


def write_results(results: list[Result], args: argparse.Namespace, seconds: float) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    data = {
        "keys": args.keys,
        "value_bytes": VALUE,
        "seconds": round(seconds, 1),
        "results": [{"store": r.name, "rates": r.rates, "sizes": r.sizes} for r in results],
    }
    with open(os.path.join(RESULTS, "kv.json"), "w") as f:
        json.dump(data, f, indent=2)
    by = {r.name: r for r in results}
    eng = by["engine.kv"]
    lines = [
        "# engine.kv against sqlite3, LMDB and diskcache",
        "",
        f"{args.keys:,} keys of 16 bytes, {VALUE}-byte values; one run, side by side "
        f"(`python -m benchmarks.kv{' --quick' if args.quick else ''}`, {seconds:.0f} s). "
        "Operations per second (higher is better); ratio = engine / other.",
        "",
        "| operation | engine.kv | sqlite3 | diskcache | LMDB | vs sqlite3 | vs diskcache | vs LMDB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for op, rate in eng.rates.items():
        others = [by[s].rates.get(op, 0.0) for s in ("sqlite3", "diskcache", "lmdb")]
        ratios = [f"{rate / o:.2f}x" if o else "-" for o in others]
        lines.append(
            f"| {op} | {rate:,.0f} | " + " | ".join(f"{o:,.0f}" for o in others) + " | " + " | ".join(ratios) + " |"
        )
    lines += ["", "| file size on disk (MB) | engine.kv | sqlite3 | diskcache | LMDB |", "|---|---:|---:|---:|---:|"]
    for what in ("after load", "after deleting half", "after compact()"):
        row = [by[s].sizes.get(what) for s in ("engine.kv", "sqlite3", "diskcache", "lmdb")]
        lines.append(f"| {what} | " + " | ".join("-" if v is None else f"{v / 1e6:.1f}" for v in row) + " |")
    lines += ["", *_targets(by)]
    with open(os.path.join(RESULTS, "kv.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


#: The issue's targets: (operation, other store, ratio engine / other at least).
TARGETS = [
    ("random get", "sqlite3", 1.0),
    ("random get", "diskcache", 1.0),
    ("random put, tx of 1,000", "sqlite3", 1.0),
    ("random put, tx of 1,000", "diskcache", 1.0),
    ("range scan of 10,000 (keys/s)", "sqlite3", 1.0),
    ("range scan of 10,000 (keys/s)", "diskcache", 1.0),
    ("random put, tx of 1", "sqlite3", 1.0),
    ("random get", "lmdb", 0.3),  # the stretch target
]


def _targets(by: dict[str, Result]) -> list[str]:
    """The targets table: each ratio against its bound, met or not."""
    eng = by["engine.kv"].rates
    out = ["| target | ratio | met? |", "|---|---:|---|"]
    for op, other, bound in TARGETS:
        rate = by[other].rates.get(op) if other in by else None
        if not rate or op not in eng:
            continue
        ratio = eng[op] / rate
        stretch = " (stretch)" if other == "lmdb" else ""
        verdict = "yes" if ratio >= bound else "no"
        out.append(f"| {op} >= {bound:.1f}x {other}{stretch} | {ratio:.2f}x | {verdict} |")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="100,000 keys and fewer operations")
    parser.add_argument("--keys", type=int)
    parser.add_argument("--dir", help="where to put the stores (default: a temporary directory)")
    parser.add_argument("--only", help="comma-separated store names")
    args = parser.parse_args(argv)
    args.keys = args.keys or (100_000 if args.quick else 1_000_000)
    args.gets = 50_000 if args.quick else 200_000
    args.batch_puts = 10 if args.quick else 20
    args.rounds = 10
    args.per_round = 30 if args.quick else 60
    args.scans = 10 if args.quick else 20
    rng = random.Random(1)
    keys = list({rng.randbytes(16): None for _ in range(args.keys)})
    base = args.dir or tempfile.mkdtemp(prefix="kvbench-")
    t0 = time.perf_counter()
    stores = []
    for make in STORES:
        if args.only and make.name not in args.only.split(","):  # type: ignore[attr-defined]
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
    if not args.only:
        write_results(results, args, time.perf_counter() - t0)
    else:
        for r in results:
            print(r)


if __name__ == "__main__":
    main()
