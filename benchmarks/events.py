"""Event journal vs sqlite3, side by side: ``python3 -m benchmarks.events [--quick]``.

Measures, in one run on the same disk:

* durable writes/s with batches of 1 and of 100 events (200-byte payloads) spread
  over 1,000 persistence ids: ours (sync="always": one fdatasync for a batch
  inside a 512-byte sector, else two ordered ones) against sqlite3 (table
  of id, seq, payload; WAL; synchronous=FULL; one transaction per batch);
* replay events/s of one id among 1,000 (all its events, ids chosen at random).

Targets (issue 7): batches of 100 >= 1.0x sqlite3, batches of 1 >= 0.5x, replay >= 2x.
Results go to ``benchmarks/results/events.json``.

``--paired OTHER_TREE`` instead compares this tree with another checkout of the
engine (e.g. the previous commit) in fresh processes, alternating, by CPU time:
``write`` with ``sync="never"`` (per batch of 10), the first replay pass of an
opened journal (every batch checked against ``data.crc``) and a warm pass (per
id; 1,000 ids x 50 events); it prints the medians and the median ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time

from benchmarks.common import Row, bench_dir, raw_append_fsync_rate, report
from engine.events import EventJournal

IDS = 1000
PAYLOAD = 200


def _pid(i: int) -> str:
    return f"persistence-id-{i:04d}"


class Sqlite:
    """The baseline: one row per event, clustered by (id, seq)."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS events (pid TEXT NOT NULL, seq INTEGER NOT NULL, "
                        "payload BLOB NOT NULL, PRIMARY KEY (pid, seq)) WITHOUT ROWID")

    def write(self, pid: str, events: list[tuple[int, bytes]]) -> None:
        cur = self.db.cursor()
        cur.execute("BEGIN")
        cur.executemany("INSERT INTO events VALUES (?, ?, ?)", [(pid, s, p) for s, p in events])
        cur.execute("COMMIT")

    def replay(self, pid: str) -> int:
        n = 0
        for _seq, _payload in self.db.execute("SELECT seq, payload FROM events WHERE pid = ? ORDER BY seq", (pid,)):
            n += 1
        return n

    def close(self) -> None:
        self.db.close()


def _writes(store: object, batch: int, order: list[str], highest: dict[str, int], payload: bytes) -> float:
    """Seconds to write one batch for each id in ``order``."""
    write = store.write  # type: ignore[attr-defined]
    start = time.perf_counter()
    for pid in order:
        h = highest[pid]
        write(pid, [(h + k + 1, payload) for k in range(batch)])
        highest[pid] = h + batch
    return time.perf_counter() - start


def bench_writes(quick: bool) -> list[Row]:
    payload = os.urandom(PAYLOAD)
    rows: list[Row] = []
    plan = [(1, 300 if quick else 2000), (100, 50 if quick else 300)]
    for batch, batches in plan:
        with bench_dir("events-") as tmp:
            journal = EventJournal.open(os.path.join(tmp, "journal"))
            db = Sqlite(os.path.join(tmp, "baseline.sqlite"))
            ours_h = {_pid(i): 0 for i in range(IDS)}
            base_h = dict(ours_h)
            # Every id exists before timing (a new id costs the journal extra syncs once).
            for i in range(IDS):
                pid = _pid(i)
                journal.write(pid, [(1, payload)])
                db.write(pid, [(1, payload)])
                ours_h[pid] = base_h[pid] = 1
            # Alternate short rounds of ours and sqlite3 so that both see the same
            # disk and the same neighbours (the machine is shared), swapping who
            # goes first each round; sum the times.
            rounds = 10
            ours_t = base_t = 0.0
            for r in range(rounds):
                order = [_pid((r * batches // rounds + i) % IDS) for i in range(batches // rounds)]
                if r % 2:
                    base_t += _writes(db, batch, order, base_h, payload)
                    ours_t += _writes(journal, batch, order, ours_h, payload)
                else:
                    ours_t += _writes(journal, batch, order, ours_h, payload)
                    base_t += _writes(db, batch, order, base_h, payload)
            ours = batches // rounds * rounds * batch / ours_t
            base = batches // rounds * rounds * batch / base_t
            journal.verify()
            journal.close()
            db.close()
        rows.append(Row(f"sqlite3 writes, batch {batch}", base, "events/s",
                        note=f"{base / batch:,.0f} batches/s; WAL, synchronous=FULL"))
        rows.append(Row(f"events writes, batch {batch}", ours, "events/s",
                        note=f"{ours / batch:,.0f} batches/s; vs sqlite3 {ours / base:.2f}x"))
    return rows


def bench_replay(quick: bool) -> list[Row]:
    payload = os.urandom(PAYLOAD)
    per_id = 50 if quick else 200
    batch = 10
    rng = random.Random(1)
    with bench_dir("events-replay-") as tmp:
        # The layout replay meets in practice: ids interleaved, batches of 10.
        journal = EventJournal.open(os.path.join(tmp, "journal"), sync="never")
        db = Sqlite(os.path.join(tmp, "baseline.sqlite"))
        db.db.execute("PRAGMA synchronous=OFF")
        db.db.execute("BEGIN")
        for round_ in range(per_id // batch):
            for i in range(IDS):
                events = [(round_ * batch + k + 1, payload) for k in range(batch)]
                journal.write(_pid(i), events)
                db.db.executemany("INSERT INTO events VALUES (?, ?, ?)", [(_pid(i), s, p) for s, p in events])
        db.db.execute("COMMIT")
        journal.close()
        reader = EventJournal.open_reader(os.path.join(tmp, "journal"))
        picks = [_pid(rng.randrange(IDS)) for _ in range(100 if quick else 200)]

        def ours() -> int:
            n = 0
            for pid in picks:
                for _event in reader.replay(pid):
                    n += 1
            return n

        def base() -> int:
            return sum(db.replay(pid) for pid in picks)

        ours(), base()  # warm the page cache for both
        totals = {"ours": [0, 0.0], "base": [0, 0.0]}
        ratios = []  # per round, to show the spread
        contenders = [("ours", ours), ("base", base)]
        for round_ in range(11):  # alternate, swapping who goes first, as for writes
            took = {}
            for name, fn in contenders if round_ % 2 == 0 else contenders[::-1]:
                start = time.perf_counter()
                n = fn()
                took[name] = time.perf_counter() - start
                totals[name][1] += took[name]
                totals[name][0] += n
                assert n == per_id * len(picks)
            ratios.append(took["base"] / took["ours"])
        results = {name: n / t for name, (n, t) in totals.items()}
        ratios.sort()
        reader.close()
        db.close()
    return [
        Row("sqlite3 replay of one id among 1,000", results["base"], "events/s",
            note=f"{per_id} events per id, SELECT ... ORDER BY seq on the (id, seq) key"),
        Row("events replay of one id among 1,000", results["ours"], "events/s",
            note=f"{per_id} events per id in runs of {batch}; vs sqlite3 {results['ours'] / results['base']:.2f}x "
                 f"(rounds: min {ratios[0]:.2f}x, median {ratios[len(ratios) // 2]:.2f}x, max {ratios[-1]:.2f}x)",
            extra={"round ratio min": ratios[0], "round ratio median": ratios[len(ratios) // 2],
                   "round ratio max": ratios[-1]}),
    ]


_PAIRED_CHILD = """
import os, shutil, tempfile, time
from engine.events import EventJournal
payload = os.urandom(200)
tmp = tempfile.mkdtemp()
d = os.path.join(tmp, "j")
pids = [f"persistence-id-{i:04d}" for i in range(1000)]
j = EventJournal.open(d, sync="never")
for p in pids:
    j.write(p, [(1, payload)])
took = 0.0
for r in range(5):
    t = time.process_time()
    for p in pids:
        j.write(p, [(2 + r * 10 + k, payload) for k in range(10)])
    took += time.process_time() - t
j.close()
out = [took / 5000 * 1e6]
reader = EventJournal.open_reader(d)
for _pass in range(2):
    t = time.process_time()
    for p in pids:
        for _e in reader.replay(p):
            pass
    out.append((time.process_time() - t) / 1000 * 1e6)
reader.close()
shutil.rmtree(tmp)
print(*out)
"""


def paired(other: str, rounds: int) -> None:
    """This tree against ``other`` (another checkout), alternating fresh processes."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    names = ("write, sync=never (us/batch)", "first replay pass (us/id)", "warm replay (us/id)")
    got: dict[str, list[list[float]]] = {here: [], other: []}
    for round_ in range(rounds):
        for tree in (here, other) if round_ % 2 == 0 else (other, here):
            env = dict(os.environ, PYTHONPATH=tree)
            line = subprocess.run([sys.executable, "-c", _PAIRED_CHILD], env=env, cwd="/", check=True,
                                  capture_output=True, text=True).stdout
            got[tree].append([float(x) for x in line.split()])
    for i, name in enumerate(names):
        new = [r[i] for r in got[here]]
        old = [r[i] for r in got[other]]
        ratios = [o / n for n, o in zip(new, old)]
        print(f"{name}: this {statistics.median(new):.2f}, other {statistics.median(old):.2f}, "
              f"median ratio other/this {statistics.median(ratios):.3f} (min {min(ratios):.3f}, "
              f"max {max(ratios):.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small run (seconds)")
    parser.add_argument("--paired", metavar="OTHER_TREE", help="compare CPU time with another checkout")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of --paired (default 7)")
    args = parser.parse_args()
    if args.paired:
        paired(os.path.abspath(args.paired), args.rounds)
        return
    with bench_dir("events-raw-") as tmp:
        raw = raw_append_fsync_rate(tmp, PAYLOAD, seconds=0.5 if args.quick else 1.5)
    rows = [Row("raw write+fdatasync loop", raw, "ops/s", note="the disk's limit for one sync per op")]
    rows += bench_writes(args.quick)
    rows += bench_replay(args.quick)
    os.makedirs("benchmarks/results", exist_ok=True)
    report(
        "event journal vs sqlite3" + (" (quick)" if args.quick else ""),
        rows,
        targets=[
            ("events writes, batch 100", "sqlite3 writes, batch 100", 1.0),
            ("events writes, batch 1", "sqlite3 writes, batch 1", 0.5),
            ("events replay of one id among 1,000", "sqlite3 replay of one id among 1,000", 2.0),
        ],
        json_path="benchmarks/results/events.json",
    )


if __name__ == "__main__":
    main()
