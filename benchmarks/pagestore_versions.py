"""Two versions of the page store, paired: ``python3 -m benchmarks.pagestore_versions REV``.

Measures this working tree's ``engine`` against the one at git revision ``REV``
(extracted with ``git archive`` into a scratch directory), one fresh process per
version and round, the order alternating, on the same disk. Two workloads:

* ``hundred`` (default): 100-page update transactions cycling over 1,000 pages,
  ``--tx`` of them (400 = 160 MB of page data) and a final checkpoint, in MB/s of
  page data — the benchmark's 100-page workload;
* ``one``: one-page (4 KiB) update commits for ``--seconds``, in commits per second.

Reports each version's median and the median of the per-round ratios (new / old):
on this machine the disk's rate swings between minutes, so only ratios taken
side by side in the same minute carry.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

from benchmarks.common import bench_dir

_WORKER = textwrap.dedent(
    """
    import os, sys, time
    root, directory, mode, amount = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    sys.path.insert(0, root)
    from engine.pages import PageStore

    PAGE = 4096
    os.makedirs(directory, exist_ok=True)
    store = PageStore.open(os.path.join(directory, "versions.db"), page_size=PAGE)
    blobs = [os.urandom(PAGE) for _ in range(8)]
    if mode == "hundred":
        with store.transaction() as tx:
            pages = [tx.allocate() for _ in range(1000)]
        store.checkpoint()
        start = time.perf_counter()
        for n in range(int(amount)):
            base = (n * 100) % 1000
            with store.transaction() as tx:
                for i in range(100):
                    tx.write(pages[base + i], 0, blobs[(n + i) & 7])
        store.checkpoint()
        print(int(amount) * 100 * PAGE / (1 << 20) / (time.perf_counter() - start))
    else:
        with store.transaction() as tx:
            page = tx.allocate()
        n = 0
        warm = time.perf_counter() + 0.3
        while time.perf_counter() < warm:
            with store.transaction() as tx:
                tx.write(page, 0, blobs[n & 7])
            n += 1
        count, start = 0, time.perf_counter()
        end = start + amount
        while time.perf_counter() < end:
            with store.transaction() as tx:
                tx.write(page, 0, blobs[count & 7])
            count += 1
        print(count / (time.perf_counter() - start))
    store.close()
    """
)


def _run(root: str, directory: str, mode: str, amount: float) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _WORKER, root, directory, mode, str(amount)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the git revision to compare against (e.g. HEAD~1)")
    parser.add_argument("--mode", choices=("hundred", "one"), default="hundred")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tx", type=int, default=400, help="100-page transactions per run (hundred)")
    parser.add_argument("--seconds", type=float, default=1.5, help="seconds per run (one)")
    args = parser.parse_args(argv)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    amount = float(args.tx if args.mode == "hundred" else args.seconds)
    unit = "MB/s" if args.mode == "hundred" else "commits/s"
    with tempfile.TemporaryDirectory(prefix="engine-rev-") as old_root, bench_dir("pagestore-versions-") as scratch:
        archive = subprocess.run(["git", "-C", here, "archive", args.rev, "engine"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", old_root], input=archive.stdout, check=True)
        roots = {"old": old_root, "new": here}
        rates: dict[str, list[float]] = {"old": [], "new": []}
        ratios: list[float] = []
        for round_no in range(args.rounds):
            order = ["old", "new"] if round_no % 2 == 0 else ["new", "old"]
            got = {name: _run(roots[name], os.path.join(scratch, name), args.mode, amount) for name in order}
            for name, rate in got.items():
                rates[name].append(rate)
            ratios.append(got["new"] / got["old"])
            print(f"round {round_no + 1}: old {got['old']:,.0f}  new {got['new']:,.0f} {unit}", flush=True)
    print(f"{args.mode}: {args.rounds} rounds, {args.rev} (old) against the working tree (new)")
    for name in ("old", "new"):
        print(f"  {name}: median {statistics.median(rates[name]):,.0f} {unit}")
    median, mean = statistics.median(ratios), statistics.mean(ratios)
    print(f"  new/old: median of per-round ratios {median:.3f}x (mean {mean:.3f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
