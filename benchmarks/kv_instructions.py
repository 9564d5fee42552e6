"""What one key-value operation costs, in CPU instructions, for engine.kv, LMDB and sqlite3:
``python3 -m benchmarks.kv_instructions [--keys N] [--only OPS] [--stores NAMES] [--json]``.

Counts user-space instructions per operation with valgrind's callgrind (no
timing, so the count does not swing with the shared machine's load), the way
:mod:`benchmarks.append_ceiling` does: each count is the difference between a
fresh process (``python -P``, ``PYTHONHASHSEED=0``) doing ``2n`` operations and
one doing ``n``, divided by ``n`` (start-up, imports and opening cancel out).

The stores are built once, outside valgrind, with ``--keys`` (default 200,000)
random 16-byte keys and 100-byte values, in ``/dev/shm`` (so a sync costs no
waiting, and waiting is not counted anyway); every measured process works on a
fresh copy.  Operations, as :mod:`benchmarks.kv` runs them:

* ``get``: ``kv[key]`` of random loaded keys (after one full ordered scan, so
  the engine's decoded-node cache is warm, as in a long-running process);
* ``bulk``: puts of new random keys in transactions of 1,000 (per put);
* ``scan``: full ordered scans (per key; the first decodes every node);
* ``range``: scans of 100 keys from a random loaded key (per key);
* ``single``: an overwrite of a random key with a new value in its own durable
  transaction (per commit).

The ``floor`` row is the harness itself over a dict in memory (no durability,
the least Python per operation): what every row pays on top of its store.

Settings as :mod:`benchmarks.kv`: LMDB (py-lmdb) ``sync=True``; sqlite3 a
``WITHOUT ROWID`` table, WAL, ``synchronous=FULL``.  Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import pickle
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from itertools import islice
from typing import Any

VALUE = 100
RANGE = 100
#: Operations of the smaller run (the larger does twice as many).
COUNTS = {"get": 20_000, "bulk": 5_000, "scan": 1, "range": 10_000, "single": 300}
JSON_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "kv_instructions.json")


def _keys(n: int) -> list[bytes]:
    rng = random.Random(1)
    return list({rng.randbytes(16): None for _ in range(n)})


def _value(seed: int) -> bytes:
    return random.Random(seed).randbytes(VALUE)


# -- the stores ----------------------------------------------------------------------------------------
class Engine:
    def __init__(self, root: str) -> None:
        from engine.kv import KV

        os.makedirs(root, exist_ok=True)
        self.kv = KV.open(os.path.join(root, "bench.kv"))

    def load(self, pairs: list[tuple[bytes, bytes]]) -> None:
        with self.kv.transaction() as tx:
            for k, v in pairs:
                tx[k] = v

    def getter(self) -> Callable[[bytes], Any]:
        return self.kv.__getitem__

    def put_one(self, key: bytes, value: bytes) -> None:
        self.kv[key] = value

    def scan(self, start: bytes | None, n: int | None) -> int:
        it = self.kv.items(start)
        return sum(1 for _ in (it if n is None else islice(it, n)))

    def close(self) -> None:
        self.kv.close()


class Lmdb:
    def __init__(self, root: str) -> None:
        import lmdb

        os.makedirs(root, exist_ok=True)
        self.env = lmdb.open(root, map_size=8 << 30, sync=True, metasync=True)

    def load(self, pairs: list[tuple[bytes, bytes]]) -> None:
        with self.env.begin(write=True) as txn:
            for k, v in pairs:
                txn.put(k, v)

    def getter(self) -> Callable[[bytes], Any]:
        env = self.env

        def get(key: bytes) -> Any:
            with env.begin() as txn:
                return txn.get(key)

        return get

    def put_one(self, key: bytes, value: bytes) -> None:
        with self.env.begin(write=True) as txn:
            txn.put(key, value)

    def scan(self, start: bytes | None, n: int | None) -> int:
        with self.env.begin() as txn, txn.cursor() as cur:
            found = cur.set_range(start) if start is not None else cur.first()
            if not found:
                return 0
            it = cur.iternext()
            return sum(1 for _ in (it if n is None else islice(it, n)))

    def close(self) -> None:
        self.env.close()


class Sqlite:
    def __init__(self, root: str) -> None:
        os.makedirs(root, exist_ok=True)
        self.db = sqlite3.connect(os.path.join(root, "bench.sqlite"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")

    def load(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", pairs)
        self.db.execute("COMMIT")

    def getter(self) -> Callable[[bytes], Any]:
        execute = self.db.execute

        def get(key: bytes) -> Any:
            row = execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
            return None if row is None else row[0]

        return get

    def put_one(self, key: bytes, value: bytes) -> None:
        self.db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))

    def scan(self, start: bytes | None, n: int | None) -> int:
        if start is None:
            return sum(1 for _ in self.db.execute("SELECT k, v FROM kv ORDER BY k"))
        return sum(1 for _ in self.db.execute("SELECT k, v FROM kv WHERE k >= ? ORDER BY k LIMIT ?", (start, n)))

    def close(self) -> None:
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.close()


class Floor:
    """The harness alone: a dict in memory (pickled between processes), each
    operation the least Python can do for it; what every other row pays on top."""

    def __init__(self, root: str) -> None:
        os.makedirs(root, exist_ok=True)
        self.path = os.path.join(root, "floor.pickle")
        self.data: dict[bytes, bytes] = {}
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                self.data = pickle.load(f)
        self.ordered: list[bytes] | None = None

    def load(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self.data.update(pairs)
        self.ordered = None

    def getter(self) -> Callable[[bytes], Any]:
        return self.data.__getitem__

    def put_one(self, key: bytes, value: bytes) -> None:
        self.data[key] = value

    def scan(self, start: bytes | None, n: int | None) -> int:
        if self.ordered is None:
            self.ordered = sorted(self.data)
        i = 0 if start is None else bisect.bisect_left(self.ordered, start)
        keys = self.ordered[i:] if n is None else self.ordered[i : i + n]
        data = self.data
        return sum(1 for _ in ((k, data[k]) for k in keys))

    def close(self) -> None:
        with open(self.path, "wb") as f:
            pickle.dump(self.data, f)


STORES: dict[str, Callable[[str], Any]] = {"engine": Engine, "lmdb": Lmdb, "sqlite3": Sqlite, "floor": Floor}


# -- one measured process ----------------------------------------------------------------------------
def _work(store_name: str, root: str, op: str, n: int, nkeys: int) -> None:
    store = STORES[store_name](root)
    keys = _keys(nkeys)
    rng = random.Random(3)
    if op == "get":
        store.scan(None, None)  # warm: every node decoded once, as in a long-running process
        get = store.getter()
        for k in [keys[rng.randrange(nkeys)] for _ in range(n)]:
            get(k)
    elif op == "bulk":
        fresh = [rng.randbytes(16) for _ in range(n)]
        value = _value(5)
        for i in range(0, n, 1000):
            store.load([(k, value) for k in fresh[i : i + 1000]])
    elif op == "scan":
        for _ in range(n):  # n full ordered scans
            store.scan(None, None)
    elif op == "range":
        store.scan(None, None)
        starts = [keys[rng.randrange(nkeys)] for _ in range(n // RANGE)]
        for s in starts:
            store.scan(s, RANGE)
    elif op == "single":
        store.scan(None, None)
        value = _value(6)
        for k in [keys[rng.randrange(nkeys)] for _ in range(n)]:
            store.put_one(k, value)
    else:
        raise SystemExit(f"unknown operation {op!r}")
    store.close()


def _instructions(store_name: str, pristine: str, op: str, n: int, nkeys: int, here: str) -> int:
    """Instructions (valgrind's ``I refs``) of a fresh process doing ``n`` operations on a copy of ``pristine``."""
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=here)
    with tempfile.TemporaryDirectory(prefix="kvcg-", dir="/dev/shm") as scratch:
        root = os.path.join(scratch, "store")
        shutil.copytree(pristine, root)
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={os.path.join(scratch, 'out')}",
             sys.executable, "-P", "-m", "benchmarks.kv_instructions", "--worker", store_name, root, op, str(n),
             str(nkeys)],
            env=env, capture_output=True, text=True, cwd=here,
        )
    if out.returncode != 0:
        raise SystemExit(f"{store_name} {op} failed:\n{out.stderr[-3000:]}")
    found = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def build(parent: str, store_name: str, nkeys: int) -> str:
    """A store of ``nkeys`` loaded keys (1,000 per transaction) under ``parent``."""
    root = os.path.join(parent, store_name)
    store = STORES[store_name](root)
    keys = _keys(nkeys)
    value = _value(4)
    for i in range(0, nkeys, 1000):
        store.load([(k, value) for k in keys[i : i + 1000]])
    store.close()
    return root


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--worker"]:
        _work(argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--only", default=",".join(COUNTS), help="operations, comma-separated")
    parser.add_argument("--stores", default=",".join(STORES), help="stores, comma-separated")
    parser.add_argument("--json", action="store_true", help=f"write {JSON_PATH}")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("kv_instructions needs valgrind (apt install valgrind)")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ops = args.only.split(",")
    names = args.stores.split(",")
    table: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="kvcg-base-", dir="/dev/shm") as parent:
        for name in names:
            pristine = build(parent, name, args.keys)
            for op in ops:
                n = COUNTS[op]
                small = _instructions(name, pristine, op, n, args.keys, here)
                large = _instructions(name, pristine, op, 2 * n, args.keys, here)
                per = n * args.keys if op == "scan" else n
                table.setdefault(op, {})[name] = (large - small) / per
                print(f"{op:<8} {name:<8} {table[op][name]:>12,.0f} instructions/op", flush=True)
    print()
    print(f"| operation ({args.keys:,} keys) | " + " | ".join(names) + " | " +
          " | ".join(f"engine/{o}" for o in names if o != "engine") + " |")
    for op in ops:
        row = table[op]
        ratios = [f"{row['engine'] / row[o]:.2f}x" for o in names if o != "engine" and "engine" in row]
        print(f"| {op} | " + " | ".join(f"{row[n]:,.0f}" for n in names) + " | " + " | ".join(ratios) + " |")
    if args.json:
        os.makedirs(os.path.dirname(JSON_PATH), exist_ok=True)
        with open(JSON_PATH, "w", encoding="utf-8") as f:
            json.dump({"keys": args.keys, "instructions_per_op": table}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
