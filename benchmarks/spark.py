"""Spark scan benchmark: the engine connector against Spark-written Parquet of the same data.

    python3 -m benchmarks.spark --records 10000000 --rounds 5             # issue 30's table, local[2]
    python3 -m benchmarks.spark --records 10000000 --rounds 5 --cluster   # the same on a standalone
                                                                          # master + 2 one-core workers
    python3 -m benchmarks.spark --only queue --queue-items 1000000   # the queue measure alone
    python3 -m benchmarks.spark --only log            # the log measures alone
    python3 -m benchmarks.spark --only events         # engine-events, --records events
    python3 -m benchmarks.spark --only pages          # engine-pages, --records 512-byte pages
    python3 -m benchmarks.spark --only kv             # engine-kv, --records keys
    python3 -m benchmarks.spark --only streams        # engine-streams, --records streams

Every short name is the JVM connector's (``engine/spark/jvmbuild.py``).  Data:
``--records`` log records with 80-byte payloads, written by the engine-log sink's
segment writer (with ``.crc`` files); ``--records / 10`` (``--queue-items``) queue
items, events, pages, keys and streams for the other formats.  Parquet baselines:
the same rows read through the connector once and written by Spark itself (snappy),
so both sides hold the same columns and values.

Measures, each forced through Spark's ``noop`` sink (every selected column of every
row is produced) or ``count()``, alternating connector and Parquet, ``--rounds``
rounds after one warm-up of each (median rate and median of the per-round ratios
reported, every round in the JSON).  The full run (``--only all``) is issue 30's table:

* the log: full scan (7 columns), ``count()``, ``select(index, time)`` and a
  time-range filter picking 1% of the records;                       target >= 1.0x
* full scan of the queue (7 columns);                                target >= 1.0x
* full scans of an event journal (1,000 ids), a page store (512-byte pages, 1%
  free), a key-value store (10-byte keys, 80-byte values) and two stream journals
  (80-byte streams): reported beside Parquet (no target).

``--only FORMAT`` runs one format's measures with ``--records`` of it, its full scan
and (where the format has them) ``count()``, a 1% range filter or a narrow select,
all reported beside Parquet.

The load average before and after is in the JSON (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.common import Row, Target, bench_dir, report

RESULTS = os.path.join(os.path.dirname(__file__), "results", "spark.json")
RESULTS_CLUSTER = os.path.join(os.path.dirname(__file__), "results", "spark_cluster.json")
PAYLOAD = 80
#: One measure: (name, connector action, Parquet action, rows, target or None: reported only).
Pair = tuple[str, Callable[[], Any], Callable[[], Any], int, "float | None"]


def make_log(root: str, n: int) -> str:
    """n records of 80 random printable bytes as a sink dataset (one shard, 256 MiB segments)."""
    from engine.spark.sink import ShardWriter, commit_job

    ds = os.path.join(root, "log")
    w = ShardWriter(ds, "bench", "s0", segment_bytes=256 << 20)
    rng = np.random.default_rng(1)
    t0 = time.time_ns() - n * 1000
    step = 200_000
    for a in range(0, n, step):
        b = min(n, a + step)
        raw = rng.integers(32, 127, size=(b - a) * PAYLOAD, dtype=np.uint8).tobytes()
        offsets = np.arange(b - a + 1, dtype=np.int32) * PAYLOAD
        data = pa.Array.from_buffers(pa.binary(), b - a, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])
        w.write(data, t0 + np.arange(a, b, dtype=np.int64) * 1000)
    commit_job(ds, [w.finish()], overwrite=True)
    return ds


def make_queue(root: str, n: int) -> str:
    """A queue ``bench`` with n items of 80 random printable bytes (as the log's
    records: identical items would let Parquet store the column as one dictionary
    entry and move no payload at all) and one reader ``r``."""
    from engine.queue import Queue

    d = os.path.join(root, "queue")
    os.makedirs(d)
    q = Queue.open(d, "bench", sync="never")
    q.reader("r")
    rng = np.random.default_rng(2)
    for a in range(0, n, 10_000):
        k = min(10_000, n - a)
        raw = rng.integers(32, 127, size=k * PAYLOAD, dtype=np.uint8).tobytes()
        q.put_many([raw[i : i + PAYLOAD] for i in range(0, k * PAYLOAD, PAYLOAD)])
    q.checkpoint()
    q.close()
    return d


def make_events(root: str, n: int, ids: int = 1000) -> str:
    """An event journal of n events of 80 random printable bytes over ``ids``
    persistence ids, written in batches of 100 events per id, ids interleaved."""
    from engine.events import EventJournal

    d = os.path.join(root, "events")
    rng = np.random.default_rng(3)
    per = -(-n // ids)
    written = 0
    with EventJournal.open(d, sync="never") as j:
        for start in range(1, per + 1, 100):
            for k in range(ids):
                m = min(100, per - start + 1, n - written)
                if m <= 0:
                    break
                raw = rng.integers(32, 127, size=m * PAYLOAD, dtype=np.uint8).tobytes()
                j.write(f"id-{k}", [(start + i, raw[i * PAYLOAD : (i + 1) * PAYLOAD]) for i in range(m)])
                written += m
    return d


def events_pairs(spark: Any, root: str, n: int) -> list[Pair]:
    """An event journal's measures (engine-events is the JVM connector's)."""
    ev = make_events(root, n)
    ev_pq = os.path.join(root, "events.parquet")
    spark.read.format("engine-events").load(ev).write.parquet(ev_pq)
    ev_df, ev_pq_df = spark.read.format("engine-events").load(ev), spark.read.parquet(ev_pq)
    assert ev_df.count() == ev_pq_df.count() == n
    return [
        ("events full scan (4 columns)", noop(ev_df), noop(ev_pq_df), n, None),
        ("events count()", ev_df.count, ev_pq_df.count, n, None),
    ]


def make_pages(root: str, n: int) -> str:
    """A page store of n 512-byte pages of random bytes, every 100th page freed,
    written in commits of 10,000 pages."""
    from engine.pages import PageStore

    path = os.path.join(root, "pages.db")
    rng = np.random.default_rng(5)
    with PageStore.open(path, page_size=512, create=True) as ps:
        for start in range(0, n, 10_000):
            m = min(10_000, n - start)
            raw = rng.integers(0, 256, size=m * 512, dtype=np.uint8).tobytes()
            with ps.transaction() as tx:
                for i in range(m):
                    tx.write(tx.allocate(), 0, raw[i * 512 : (i + 1) * 512])
        with ps.transaction() as tx:
            for page in range(100, n + 1, 100):
                tx.free(page)
    return path


def pages_pairs(spark: Any, root: str, n: int) -> list[Pair]:
    """A page store's measures (engine-pages is the JVM connector's)."""
    store = make_pages(root, n)
    pq = os.path.join(root, "pages.parquet")
    spark.read.format("engine-pages").load(store).write.parquet(pq)
    df, pq_df = spark.read.format("engine-pages").load(store), spark.read.parquet(pq)
    assert df.count() == pq_df.count() == n
    cut = f"page >= {n // 2} and page < {n // 2 + n // 100}"
    assert df.where(cut).count() == pq_df.where(cut).count() == n // 100
    return [
        ("pages full scan (5 columns)", noop(df), noop(pq_df), n, None),
        ("pages count()", df.count, pq_df.count, n, None),
        ("pages page-range filter (1% of pages, 5 columns)", noop(df.where(cut)), noop(pq_df.where(cut)), n, None),
    ]


def make_kv(root: str, n: int) -> str:
    """A key-value store (4 KiB pages) of n keys ``%010d`` with 80 random printable
    bytes each, written in commits of 50,000 keys."""
    from engine.kv import KV

    path = os.path.join(root, "store.kv")
    rng = np.random.default_rng(7)
    with KV.open(path, create=True) as kv:
        for start in range(0, n, 50_000):
            m = min(50_000, n - start)
            raw = rng.integers(32, 127, size=m * PAYLOAD, dtype=np.uint8).tobytes()
            with kv.transaction() as tx:
                for i in range(m):
                    tx[b"%010d" % (start + i)] = raw[i * PAYLOAD : (i + 1) * PAYLOAD]
    return path


def kv_pairs(spark: Any, root: str, n: int) -> list[Pair]:
    """A key-value store's measures (engine-kv is the JVM connector's)."""
    store = make_kv(root, n)
    pq = os.path.join(root, "kv.parquet")
    spark.read.format("engine-kv").load(store).write.parquet(pq)
    df, pq_df = spark.read.format("engine-kv").load(store), spark.read.parquet(pq)
    assert df.count() == pq_df.count() == n
    lo, hi = (b"%010d" % (n // 2)).hex(), (b"%010d" % (n // 2 + n // 100)).hex()
    cut = f"key >= X'{lo}' and key < X'{hi}'"
    assert df.where(cut).count() == pq_df.where(cut).count() == n // 100
    return [
        ("kv full scan (4 columns)", noop(df), noop(pq_df), n, None),
        ("kv count()", df.count, pq_df.count, n, None),
        ("kv key-range filter (1% of keys, 4 columns)", noop(df.where(cut)), noop(pq_df.where(cut)), n, None),
    ]


def make_streams(root: str, n: int, journals: int = 2) -> str:
    """``journals`` stream journals holding ``n`` streams of 80 random printable bytes
    between them, each stream opened, written and closed in turn (one page each)."""
    from engine.streams.journal import StreamJournal

    d = os.path.join(root, "streams")
    os.makedirs(d)
    rng = np.random.default_rng(5)
    for k in range(journals):
        per = n // journals + (k < n % journals)
        raw = rng.integers(32, 127, size=per * PAYLOAD, dtype=np.uint8).tobytes()
        with StreamJournal.open(os.path.join(d, f"j{k}.journal"), size=(per + 64) * 512, page_size=512,
                                sync_delay=1000, create=True) as j:
            for i in range(per):
                s = j.open_stream(b"s%d" % i)
                s.write(raw[i * PAYLOAD : (i + 1) * PAYLOAD])
                s.close()
    return d


def streams_pairs(spark: Any, root: str, n: int) -> list[Pair]:
    """Stream journals' measures (engine-streams is the JVM connector's)."""
    d = make_streams(root, n)
    pq = os.path.join(root, "streams.parquet")
    spark.read.format("engine-streams").load(d).write.parquet(pq)
    df, pq_df = spark.read.format("engine-streams").load(d), spark.read.parquet(pq)
    assert df.count() == pq_df.count() == n
    cols = ("stream", "status", "bytes")
    return [
        ("streams full scan (7 columns)", noop(df), noop(pq_df), n, None),
        ("streams select(stream, status, bytes)", noop(df.select(*cols)), noop(pq_df.select(*cols)), n, None),
    ]


def rate(action: Callable[[], Any], n: int) -> float:
    t = time.perf_counter()
    action()
    return n / (time.perf_counter() - t)


def noop(df: Any) -> Callable[[], Any]:
    return lambda: df.write.format("noop").mode("overwrite").save()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def standalone_cluster(workdir: str, workers: int = 2) -> Iterator[str]:
    """A loopback standalone master and ``workers`` one-core workers (pyspark's
    ``spark-class``), stopped by PID afterwards."""
    import pyspark

    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    procs: list[subprocess.Popen[bytes]] = []
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    try:
        log = open(os.path.join(workdir, "cluster.out"), "wb")  # noqa: SIM115 - closed below
        procs.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                       "--port", str(port), "--webui-port", str(_free_port())],
                                      stdout=log, stderr=subprocess.STDOUT, env=env))
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the master did not start") from None
                time.sleep(0.2)
        for k in range(workers):
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                 "--memory", "1g", "--webui-port", str(_free_port()), "--work-dir",
                 os.path.join(workdir, f"work{k}"), url], stdout=log, stderr=subprocess.STDOUT, env=env))
        time.sleep(5)
        yield url
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
        log.close()


def measure(spark: Any, root: str, n: int, queue_n: int, rounds: int,
            only: str = "all") -> tuple[list[Row], list[Target]]:
    """The measures of ``only`` (``"all"``: issue 30's table, see the module's docstring)."""
    by_format: dict[str, Callable[[Any, str, int], list[Pair]]] = {
        "log": log_pairs, "events": events_pairs, "pages": pages_pairs, "kv": kv_pairs,
        "streams": streams_pairs}
    if only in by_format:
        return paired_rounds(by_format[only](spark, root, n), rounds)
    if only == "queue":
        return paired_rounds([queue_pair(spark, root, queue_n)], rounds)
    # Each other format's first measure is its full scan; they hold ``queue_n`` rows as the queue does.
    others = [make(spark, root, queue_n)[0]
              for name, make in by_format.items() if name != "log"]
    return paired_rounds([*log_pairs(spark, root, n), queue_pair(spark, root, queue_n), *others], rounds)


def queue_pair(spark: Any, root: str, n: int) -> Pair:
    """The queue's full scan (7 columns) against Parquet; target 1.0x (issue 30)."""
    queue_dir = make_queue(root, n)
    queue_pq = os.path.join(root, "queue.parquet")
    spark.read.format("engine-queue").load(queue_dir).write.parquet(queue_pq)
    q_df, q_pq_df = spark.read.format("engine-queue").load(queue_dir), spark.read.parquet(queue_pq)
    assert q_df.count() == q_pq_df.count() == n
    return ("queue full scan (7 columns)", noop(q_df), noop(q_pq_df), n, 1.0)


def log_pairs(spark: Any, root: str, n: int) -> list[Pair]:
    """The log's measures (default schema: Spark prunes columns and pushes filters and
    aggregates down to the connector itself); targets 1.0x (issue 30)."""
    log_ds = make_log(root, n)
    log_pq = os.path.join(root, "log.parquet")
    spark.read.format("engine-log").load(log_ds).write.parquet(log_pq)
    log_df, log_pq_df = spark.read.format("engine-log").load(log_ds), spark.read.parquet(log_pq)
    assert log_df.count() == log_pq_df.count() == n
    lo = log_pq_df.selectExpr("percentile_approx(time_ns, 0.5)").first()[0]
    cut = f"time >= timestamp_micros({lo // 1000}) and time < timestamp_micros({(lo + n * 10) // 1000})"
    picked = log_df.where(cut).count()
    assert picked == log_pq_df.where(cut).count() and picked > 0, picked
    return [
        ("log full scan (7 columns)", noop(log_df), noop(log_pq_df), n, 1.0),
        ("log count()", log_df.count, log_pq_df.count, n, 1.0),
        ("log select(index, time)", noop(log_df.select("index", "time")),
         noop(log_pq_df.select("index", "time")), n, 1.0),
        (f"log time-range filter ({picked:,} rows, 7 columns)", noop(log_df.where(cut)),
         noop(log_pq_df.where(cut)), n, 1.0),
    ]


def paired_rounds(pairs: list[Pair],
                  rounds: int) -> tuple[list[Row], list[Target]]:
    """Run each pair's source and Parquet actions alternately, ``rounds`` rounds after a warm-up."""
    for _name, source, parquet, _n, _target in pairs:  # warm-up: JIT, Python workers, page cache
        source()
        parquet()
    measured: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, *_rest in pairs}
    for r in range(rounds):  # each round runs every measure, source and Parquet in turn (order alternating)
        for name, source, parquet, count, _target in pairs:
            src_rates, pq_rates = measured[name]
            if r % 2:
                pq_rates.append(rate(parquet, count))
                src_rates.append(rate(source, count))
            else:
                src_rates.append(rate(source, count))
                pq_rates.append(rate(parquet, count))
    rows, targets = [], []
    for name, _source, _parquet, _count, target in pairs:
        src_rates, pq_rates = measured[name]
        ratio = statistics.median(s / p for s, p in zip(src_rates, pq_rates))
        note = f"median of {rounds} alternating rounds; ratio {ratio:.2f}x " + (
            "(reported beside Parquet)" if target is None else
            f"(target >= {target}x: {'met' if ratio >= target else 'NOT met'})")
        rows.append(Row(f"{name}: engine source", statistics.median(src_rates), "rows/s", note,
                        extra={"ratio_to_parquet": ratio, **({} if target is None else {"target": target}),
                               **{f"round{i}": r for i, r in enumerate(src_rates)}}))
        rows.append(Row(f"{name}: Spark-written Parquet", statistics.median(pq_rates), "rows/s", "",
                        extra={f"round{i}": r for i, r in enumerate(pq_rates)}))
        if target is not None:
            targets.append(Target(f"{name}: engine source", f"{name}: Spark-written Parquet", target,
                                  ratio=ratio, how=f"median of {rounds} paired rounds"))
    return rows, targets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000, help="log records (default 1,000,000; at most 10 M)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cluster", action="store_true", help="a standalone master with 2 one-core workers")
    ap.add_argument("--only", choices=("all", "queue", "log", "events", "pages", "kv", "streams"), default="all",
                    help="all: issue 30's table; queue: only the queue measure (no log written); log: the log's "
                         "measures; "
                         "events: an event journal of --records events; pages: a page store of --records pages; "
                         "kv: a key-value store of --records keys; streams: two stream journals of --records streams")
    ap.add_argument("--queue-items", type=int, default=None,
                    help="queue items, and in the full run the other formats' rows (default --records / 10)")
    args = ap.parse_args(argv)
    n = min(args.records, 10_000_000)
    queue_n = max(1, n // 10) if args.queue_items is None else max(1, args.queue_items)
    from engine.spark.session import build_session

    load_before = os.getloadavg()
    with bench_dir("engine-bench-spark-") as root:
        if args.cluster:
            with standalone_cluster(root) as url:
                # The cluster started here runs this interpreter (standalone_cluster);
                # the driver's own Python workers (planning) run it too.
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
                spark = build_session(url, "engine-bench", shuffle_partitions=2,
                                      conf={"spark.executor.memory": "768m", "spark.cores.max": "2"})
                try:
                    rows, targets = measure(spark, root, n, queue_n, args.rounds, args.only)
                finally:
                    spark.stop()
            where = "standalone cluster, 2 one-core executors"
        else:
            spark = build_session("local[2]", "engine-bench", shuffle_partitions=2)
            try:
                rows, targets = measure(spark, root, n, queue_n, args.rounds, args.only)
            finally:
                spark.stop()
            where = "local[2]"
    load = os.getloadavg()
    rows.append(Row("load average (1 min) before / after", load[0], "", f"before {load_before[0]:.2f}, "
                    f"after {load[0]:.2f} (5 min: {load[1]:.2f})",
                    extra={"before": load_before[0], "after": load[0], "after_5min": load[1]}))
    what = {
        "all": f"{n:,} 80-byte log records, {queue_n:,} queue items and {queue_n:,} events, pages, keys and "
               "streams (issue 30's table) ",
        "queue": f"{queue_n:,} queue items ",
        "log": f"{n:,} 80-byte log records ",
        "events": f"{n:,} 80-byte events over 1,000 persistence ids (engine-events) ",
        "pages": f"{n:,} 512-byte pages (engine-pages) ",
        "kv": f"{n:,} keys with 80-byte values (engine-kv) ",
        "streams": f"{n:,} 80-byte streams in two journals (engine-streams) ",
    }[args.only]
    json_path = RESULTS_CLUSTER if args.cluster else RESULTS
    if args.only != "all":  # a subset does not replace the full run's results
        json_path = json_path.replace(".json", f"_{args.only}.json")
    report(f"Spark scans of {what}({where}, noop sink)",
           rows, targets=targets, json_path=json_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
