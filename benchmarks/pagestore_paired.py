"""Paired one-page commit comparison: ``python3 -m benchmarks.pagestore_paired [--rounds N]``.

The main benchmark (``benchmarks.pagestore``) sums each contender's commits over
interleaved slices.  On this shared, virtualised disk the synced rate moves by
tens of percent between seconds, so a 3% difference needs a paired design: every
round runs each contender for one short slice (forward order in even rounds,
backward in odd ones) and the *per-round* ratio to sqlite3 is kept; the median of
those ratios is the result.

Contenders (durable one-page updates, 4 KiB):

* sqlite3, WAL, synchronous=FULL (the reference, as in the main benchmark);
* engine PageStore, default commit (one pre-linked range, O_DSYNC);
* engine PageStore with ``exact_header=True`` (three writes, whole-file sync);
* the journal alone: ``Journal.append`` of the same op plus its resets with the
  ``JRNL_COMPLETE`` flags, no transaction object, no store (what the store's
  Python costs on top);
* a bare loop writing our commit's 8,255 bytes as one O_DSYNC range (the disk's
  ceiling for our format).

Nothing is written to ``benchmarks/results``; the figures quoted in
``benchmarks/results/pagestore.md`` came from this tool.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import struct
import sys
import time
from collections.abc import Callable

from benchmarks.common import bench_dir
from engine.pages import PageStore

PAGE = 4096
#: One one-page update's journal transaction: header, MODIFY head and images, COMPLETE.
TX_SIZE = 25 + 17 + 2 * PAGE + 21
#: Transactions per 4 MiB: the journal's space is reused after each checkpoint.
PER_JOURNAL = (4 << 20) // TX_SIZE
DSYNC: int | None = getattr(os, "RWF_DSYNC", None)

Body = Callable[[], None]


def _payloads() -> tuple[bytes, bytes]:
    a = os.urandom(PAGE)
    return a, a[::-1]


def sqlite_body(directory: str) -> Body:
    con = sqlite3.connect(os.path.join(directory, "paired.sqlite"), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
    data = _payloads()
    con.execute("INSERT INTO t VALUES (1, ?)", (data[0],))
    count = [0]

    def body() -> None:
        count[0] += 1
        con.execute("UPDATE t SET v = ? WHERE id = 1", (data[count[0] & 1],))

    return body


def engine_body(directory: str, name: str, *, exact_header: bool = False) -> Body:
    store = PageStore.open(os.path.join(directory, name), page_size=PAGE, exact_header=exact_header)
    with store.transaction() as tx:
        page = tx.allocate()
    data = _payloads()
    count = [0]

    def body() -> None:
        count[0] += 1
        with store.transaction() as tx:
            tx.write(page, 0, data[count[0] & 1])

    return body


def journal_body(directory: str) -> Body:
    store = PageStore.open(os.path.join(directory, "journal-only.db"), page_size=PAGE)
    with store.transaction() as tx:
        tx.allocate()
    journal = store._journal  # the journal alone, as the store drives it
    assert journal is not None
    head = struct.Struct("<BIQHH").pack(2, 12 + 2 * PAGE, PAGE, 0, PAGE)
    data = _payloads()
    count = [0]

    def body() -> None:
        count[0] += 1
        journal.append(int(time.time()), [head, data[(count[0] + 1) & 1], data[count[0] & 1]])
        if journal.size >= 4 << 20:
            journal.reset(durable=False)

    return body


def raw_body(directory: str) -> Body:
    path = os.path.join(directory, "raw-one-range.bin")
    buf = os.urandom(TX_SIZE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, os.urandom(20 + PER_JOURNAL * TX_SIZE), 0)
    os.fsync(fd)
    count = [0]

    def body() -> None:
        at = 20 + (count[0] % PER_JOURNAL) * TX_SIZE
        count[0] += 1
        if DSYNC is not None:
            os.pwritev(fd, [buf], at, DSYNC)
        else:  # pragma: no cover - not Linux
            os.pwrite(fd, buf, at)
            os.fdatasync(fd)

    return body


def rate(body: Body, seconds: float) -> float:
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        body()
        n += 1
    return n / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40, help="paired rounds (default 40)")
    parser.add_argument("--slice", type=float, default=0.3, help="seconds per contender per round")
    args = parser.parse_args(argv)
    with bench_dir("pagestore-paired-") as directory:
        contenders = {
            "sqlite3 WAL FULL": sqlite_body(directory),
            "engine PageStore": engine_body(directory, "default.db"),
            "engine exact_header": engine_body(directory, "exact.db", exact_header=True),
            "journal alone": journal_body(directory),
            "raw one-range O_DSYNC": raw_body(directory),
        }
        for body in contenders.values():
            rate(body, 1.0)  # warm-up: files reach their steady size
        names = list(contenders)
        rates: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                rates[name].append(rate(contenders[name], args.slice))
    base = rates[names[0]]
    print(f"paired one-page commits, {args.rounds} rounds of {args.slice} s per contender")
    for name in names:
        ratios = [a / b for a, b in zip(rates[name], base, strict=True)]
        print(
            f"  {name:24s} median {statistics.median(rates[name]):7.0f} tx/s   vs sqlite3: median of "
            f"per-round ratios {statistics.median(ratios):.3f}x (mean {statistics.mean(ratios):.3f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
