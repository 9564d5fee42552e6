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
* the journal alone: ``Journal.append`` of the same op plus its resets with the
  ``JRNL_COMPLETE`` flags, no transaction object, no store (what the store's
  Python costs on top);
* the format's floor (``benchmarks/floor/pages_tx.c``, C: the commit's 8,255 bytes
  as one O_DSYNC write and the checkpoints as the store takes them, nothing else;
  ``benchmarks.pagestore.setup_floor_commit``), or without a C compiler a bare Python
  loop writing the commit's bytes as one range + fdatasync
  (``benchmarks.pagestore.setup_raw_commit``).

Nothing is written to ``benchmarks/results``; the figures quoted in
``benchmarks/results/pagestore.md`` came from this tool.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import time
from collections.abc import Callable

from benchmarks import floor
from benchmarks.common import bench_dir
from benchmarks.pagestore import (
    PAGE,
    Step,
    _loop,
    _payloads,
    setup_floor_commit,
    setup_pagestore,
    setup_raw_commit,
    setup_sqlite,
)
from engine.pages import PageStore


def setup_journal_alone(directory: str) -> tuple[Step, Callable[[], None]]:
    """``Journal.append`` of a one-page update and the journal's resets (with their
    ``JRNL_COMPLETE`` flags) as the store drives them: no transaction object, no
    store file."""
    store = PageStore.open(os.path.join(directory, "journal-alone.db"), page_size=PAGE)
    with store.transaction() as tx:
        tx.allocate()
    journal = store._journal
    head = struct.Struct("<BIQHH").pack(2, 12 + 2 * PAGE, PAGE, 0, PAGE)
    data = _payloads()

    def body(i: int) -> None:
        journal.append(int(time.time()), [head, data[(i + 1) & 1], data[i & 1]])
        if journal.size >= 4 << 20:
            journal.reset()

    return _loop(body), store.close


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40, help="paired rounds (default 40)")
    parser.add_argument("--slice", type=float, default=0.3, help="seconds per contender per round")
    args = parser.parse_args(argv)
    with bench_dir("pagestore-paired-") as directory:
        steps: dict[str, Step] = {}
        closers = []
        for name, setup in (
            ("sqlite3 WAL FULL", setup_sqlite),
            ("engine PageStore", setup_pagestore),
            ("journal alone", setup_journal_alone),
            ("raw one-range commit", setup_raw_commit)
            if floor.available("pages_tx")
            else ("floor pages_tx (C)", setup_floor_commit),
        ):
            step, close = setup(directory)
            steps[name] = step
            closers.append(close)
        for step in steps.values():
            step(1.0)  # warm-up: files reach their steady size
        names = list(steps)
        rates: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                start = time.perf_counter()
                count = steps[name](args.slice)
                elapsed = time.perf_counter() - start
                if isinstance(count, tuple):  # a step that times itself
                    count, elapsed = count
                rates[name].append(count / elapsed)
        for close in closers:
            close()
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
