"""A big key-value store opens and serves gets without reading its file whole.

    python3 -m benchmarks.kv_big [--keys N] [--gets G] [--dir DIR] [--json]

Builds (once; kept in ``DIR``, default ``/tmp/engine-kv-big``) a store of ``N``
keys (default 10,000,000): 16-byte keys (an 8-byte big-endian index, then 8
bytes mixed from it) with 100-byte values derived from the key, loaded in key
order in transactions of 50,000 puts (the fastest way in: each put lands in the
rightmost leaf, so no leaf is read back), then a checkpoint (the journal emptied).  Then, in a fresh process (so its
memory and I/O counters hold only this): the store file's pages are dropped from
the OS page cache (``posix_fadvise(DONTNEED)``, no privileges needed), the store
is opened, and ``G`` random gets (default 10,000) are served and checked.
Reported: open time, RSS after open and after the gets (``VmRSS``), and the
bytes read at each step from ``/proc/self/io`` (``rchar``: through read calls,
cached or not; ``read_bytes``: from the device), beside the file's size.

No store but engine.kv: this is the memory row of issue 29 ("a 10 M-key store
opens and serves gets without reading the file whole"), not a comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

from engine.kv import KV

BATCH = 50_000
MIX = 0x9E3779B97F4A7C15


def key_of(i: int) -> bytes:
    """Key ``i``: its index big-endian (so keys sort by index), then 8 mixed bytes."""
    return i.to_bytes(8, "big") + ((i * MIX) & (1 << 64) - 1).to_bytes(8, "little")


def value_of(key: bytes) -> bytes:
    return (key * 7)[:100]


def store_path(root: str, keys: int) -> str:
    return os.path.join(root, f"big-{keys}.kv")


def build(path: str, keys: int) -> float:
    """The store of ``keys`` keys at ``path``, loaded in key order; seconds taken."""
    start = time.perf_counter()
    with KV.open(path) as kv:
        for base in range(0, keys, BATCH):
            with kv.transaction() as tx:
                for i in range(base, min(keys, base + BATCH)):
                    k = key_of(i)
                    tx[k] = value_of(k)
        kv.checkpoint()  # the journal emptied, as a store at rest after its writer's checkpoint
    return time.perf_counter() - start


def _io() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(":") for line in f)}


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _drop_cache(path: str) -> None:
    """The store's files out of the OS page cache, so read_bytes counts real reads."""
    for name in os.listdir(os.path.dirname(path)):
        if name.startswith(os.path.basename(path)):
            fd = os.open(os.path.join(os.path.dirname(path), name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def measure(path: str, keys: int, gets: int) -> dict[str, float | int]:
    """Open ``path`` and serve ``gets`` random gets (in this process: run it in a fresh one)."""
    rng = random.Random(29)
    wanted = [key_of(rng.randrange(keys)) for _ in range(gets)]
    _drop_cache(path)
    journal = os.path.getsize(path + "-journal") if os.path.exists(path + "-journal") else 0
    rss0, io0 = _rss(), _io()
    t0 = time.perf_counter()
    kv = KV.open(path)
    opened = time.perf_counter() - t0
    rss1, io1 = _rss(), _io()
    t1 = time.perf_counter()
    for k in wanted:
        if kv[k] != value_of(k):
            raise AssertionError(f"wrong value for {k.hex()}")
    took = time.perf_counter() - t1
    rss2, io2 = _rss(), _io()
    count = len(kv)
    kv.close()
    if count != keys:
        raise AssertionError(f"{count} keys, not {keys}")
    return {
        "keys": keys,
        "gets": gets,
        "file_bytes": os.path.getsize(path),
        "journal_bytes": journal,
        "sums_bytes": os.path.getsize(path + "-sums"),
        "open_s": opened,
        "gets_per_s": gets / took,
        "rss_before_open": rss0,
        "rss_after_open": rss1,
        "rss_after_gets": rss2,
        "open_rchar": io1["rchar"] - io0["rchar"],
        "open_read_bytes": io1["read_bytes"] - io0["read_bytes"],
        "gets_rchar": io2["rchar"] - io1["rchar"],
        "gets_read_bytes": io2["read_bytes"] - io1["read_bytes"],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--gets", type=int, default=10_000)
    ap.add_argument("--dir", default="/tmp/engine-kv-big")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)  # the fresh process
    args = ap.parse_args(argv)
    path = store_path(args.dir, args.keys)
    if args.measure_only:
        print(json.dumps(measure(path, args.keys, args.gets)))
        return
    built = None
    if not os.path.exists(path):
        os.makedirs(args.dir, exist_ok=True)
        built = build(path, args.keys)
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.kv_big", "--keys", str(args.keys), "--gets", str(args.gets),
         "--dir", args.dir, "--measure-only"],
        check=True, capture_output=True, text=True,
    )
    result = json.loads(out.stdout)
    result["build_s"] = built if built is not None else -1.0
    if args.json:
        print(json.dumps(result, indent=2))
        return
    mib = 1 << 20
    print(f"{result['keys']:,} keys, store file {result['file_bytes'] / mib:,.0f} MiB, journal "
          f"{result['journal_bytes'] / mib:,.2f} MiB, checksums {result['sums_bytes'] / mib:,.2f} MiB"
          + (f", built in {built:,.0f} s (key order, transactions of {BATCH:,})" if built is not None else ""))
    print(f"open: {result['open_s'] * 1000:,.1f} ms, read {result['open_rchar'] / mib:,.2f} MiB "
          f"(device {result['open_read_bytes'] / mib:,.2f} MiB), RSS {result['rss_before_open'] / mib:,.1f} -> "
          f"{result['rss_after_open'] / mib:,.1f} MiB")
    print(f"{result['gets']:,} random gets: {result['gets_per_s']:,.0f}/s, read {result['gets_rchar'] / mib:,.1f} MiB "
          f"(device {result['gets_read_bytes'] / mib:,.1f} MiB), RSS after {result['rss_after_gets'] / mib:,.1f} MiB")


if __name__ == "__main__":
    main()
