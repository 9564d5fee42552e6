"""What a get costs a key-value reader while a writer commits, in CPU instructions:
``python3 -m benchmarks.kv_reader_instructions [--keys N] [--tree DIR]``.

Counts user-space instructions with valgrind's callgrind (no timing, so the
count does not swing with the shared machine's load), as
:mod:`benchmarks.kv_instructions` does.  One process holds a writer
(``KV.open``) and a reader (``KV.open_reader``) of a store of ``--keys`` random
16-byte keys with 100-byte values in ``/dev/shm``; the reader's cache is warmed by
one full scan.  Then ``n`` rounds of: the writer commits one durable put of a
random new key, the reader does ``k`` gets of random loaded keys.  A reader
process in :mod:`benchmarks.kv`'s 4-reader phase sees the same: some gets after
each commit.  Figure = (instructions of that run - instructions of the same run
with no gets) / (n * k): what the reader pays per get, its share of taking each
new commit (locks, header, checksums, the changed pages read again) included.
``k`` = 0 commits between gets (no writer activity: ``--no-commits``) is the
get alone.

``--tree DIR`` measures the engine at ``DIR`` (another checkout: the before
figure), importing it through ``PYTHONPATH``.  Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import os, random, sys
from engine.kv import KV
path, n, k, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
commits = sys.argv[5] == "1"
rng = random.Random(1)
keys = list({rng.randbytes(16): None for _ in range(int(sys.argv[6]))})
rng = random.Random(seed)
sample = [keys[rng.randrange(len(keys))] for _ in range(n * k)]
new = [rng.randbytes(16) for _ in range(n)]
value = b"v" * 100
kv = KV.open(path)
reader = KV.open_reader(path)
for _ in reader.items():
    pass
get = reader.get
at = 0
for i in range(n):
    if commits:
        kv[new[i]] = value
    for key in sample[at : at + k]:
        get(key)
    at += k
reader.close()
kv.close()
"""


def build(keys: int, tree: str, where: str) -> str:
    path = os.path.join(where, "r.kv")
    code = (
        "import random, sys\nfrom engine.kv import KV\n"
        "rng = random.Random(1)\nkeys = list({rng.randbytes(16): None for _ in range(int(sys.argv[2]))})\n"
        "with KV.open(sys.argv[1]) as kv:\n"
        "    for i in range(0, len(keys), 1000):\n"
        "        with kv.transaction() as tx:\n"
        "            for key in keys[i : i + 1000]:\n"
        "                tx[key] = b'x' * 100\n"
    )
    subprocess.run([sys.executable, "-c", code, path, str(keys)], check=True, env=_env(tree))
    return path


def _env(tree: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=tree, PYTHONHASHSEED="0")


def instructions(path: str, tree: str, n: int, k: int, commits: bool, keys: int) -> int:
    """Instructions of one child run on a fresh copy of the store."""
    work = tempfile.mkdtemp(dir="/dev/shm", prefix="kvri-")
    try:
        for name in os.listdir(os.path.dirname(path)):
            if name.startswith(os.path.basename(path)):
                shutil.copy(os.path.join(os.path.dirname(path), name), work)
        copy = os.path.join(work, os.path.basename(path))
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-P", "-c", CHILD,
             copy, str(n), str(k), "7", "1" if commits else "0", str(keys)],
            capture_output=True, text=True, env=_env(tree), check=True,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    assert found, out.stderr[-2000:]
    return int(found.group(1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--tree", default=os.getcwd(), help="the engine checkout to measure")
    parser.add_argument("--commits", type=int, default=200, help="n: commits (rounds)")
    parser.add_argument("--gets", default="10,100", help="k: gets after each commit (comma-separated)")
    args = parser.parse_args(argv)
    where = tempfile.mkdtemp(dir="/dev/shm", prefix="kvri-store-")
    try:
        path = build(args.keys, args.tree, where)
        n = args.commits
        for k in (int(x) for x in args.gets.split(",")):
            with_gets = instructions(path, args.tree, n, k, True, args.keys)
            without = instructions(path, args.tree, n, 0, True, args.keys)
            print(f"a commit every {k} gets: {(with_gets - without) / (n * k):,.0f} instructions per get")
        # No commits: 2m gets minus m gets.
        m = n * 10
        two = instructions(path, args.tree, 2, m, False, args.keys)
        one = instructions(path, args.tree, 1, m, False, args.keys)
        print(f"no commits: {(two - one) / m:,.0f} instructions per get")
    finally:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
