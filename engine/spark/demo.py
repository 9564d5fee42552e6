"""``engine demo [DIR]``: realistic data in every format, then the pipeline over it.

What it creates (each part only if its store is installed in this build):

* ``queues/``: an ``orders`` queue with three fanout readers (billing, shipping,
  audit); producer threads put orders while consumer threads read and confirm
  at different speeds, so the readers end with different backlogs;
* ``pages/store.db``: page-store transactions (allocate, write, free);
* ``streams/uploads.journal``: concurrent streams from several threads, some
  completed and some aborted;
* ``logs/clicks`` (TTL one day) and ``logs/metrics`` (small segments): append
  logs with an hour of timestamps;
* ``events/accounts``: an event journal with many persistence ids.

Each step shows a rich progress bar.  The sizes scale with ``--scale``.
"""

from __future__ import annotations

import importlib
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from engine.errors import ConfigError
from engine.fs import default_fs, make_dirs


def _have(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError:
        return False
    return True


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("[bold]{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console)


def make_queue(root: str, n: int, progress: Progress) -> None:
    """Queue ``orders``: 2 producer threads, fanout readers consuming 90% / 40% / 0%."""
    from engine.queue import Queue

    qdir = os.path.join(root, "queues")
    make_dirs(default_fs(), qdir)
    q = Queue.open(qdir, "orders", sync=0.05)
    readers = {name: q.reader(name) for name in ("billing", "shipping", "audit")}
    task = progress.add_task("queue: produce + consume", total=n)
    producers = 2
    per = n // producers
    # Consumers take a share of what is produced: billing keeps up, shipping lags,
    # audit reads nothing (its backlog is everything).
    share = {"billing": 0.9, "shipping": 0.4, "audit": 0.0}
    stop = threading.Event()

    def produce(k: int) -> None:
        rnd = random.Random(k)
        for i in range(per):
            q.put(f'{{"order": {k * per + i}, "amount": {rnd.randint(1, 500)}}}'.encode())
            progress.advance(task)

    def consume(name: str) -> None:
        reader = readers[name]
        target = int(share[name] * producers * per)
        done = 0
        while done < target and not stop.is_set():
            item = reader.get(timeout=0.2)
            if item is None:
                continue
            reader.confirm([item.id])
            done += 1

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
    threads += [threading.Thread(target=consume, args=(name,)) for name in readers if share[name] > 0]
    for t in threads:
        t.start()
    for t in threads[:producers]:
        t.join()
    for t in threads[producers:]:
        t.join(timeout=30)
    stop.set()
    q.checkpoint()
    q.close()


def make_logs(root: str, n: int, progress: Progress) -> None:
    """Logs ``clicks`` (TTL one day) and ``metrics`` (64 KiB segments), an hour of times."""
    from engine.applog import AppendLog

    task = progress.add_task("append logs", total=2 * n)
    now = time.time_ns()
    hour = 3600 * 10**9
    rnd = random.Random(7)
    pages = ["/", "/cart", "/checkout", "/search", "/item"]
    with AppendLog.open(os.path.join(root, "logs", "clicks"), ttl=24 * hour, sync=0.05) as log:
        t = now - hour
        batch = []
        for i in range(n):
            t += rnd.randint(1, 2 * hour // n)
            batch.append((f"user={rnd.randint(1, 999)} page={rnd.choice(pages)}".encode(), 0, min(t, now)))
            if len(batch) == 1000 or i == n - 1:
                log.append_many(batch)
                progress.advance(task, len(batch))
                batch = []
    with AppendLog.open(os.path.join(root, "logs", "metrics"), segment_bytes=64 * 1024, sync="never") as log:
        t = now - hour
        step = hour // n
        batch = []
        for i in range(n):
            t += step
            batch.append((f"cpu={rnd.random():.3f} mem={rnd.randint(100, 900)}".encode(), 1, t))
            if len(batch) == 1000 or i == n - 1:
                log.append_many(batch)
                progress.advance(task, len(batch))
                batch = []


def make_streams(root: str, n: int, progress: Progress) -> None:
    """Four threads writing ``n`` streams into one journal; about 15% aborted."""
    from engine.streams import StreamJournal

    sdir = os.path.join(root, "streams")
    make_dirs(default_fs(), sdir)
    journal = StreamJournal.open(os.path.join(sdir, "uploads.journal"), size=8 * 1024 * 1024, create=True)
    task = progress.add_task("concurrent streams", total=n)
    lock = threading.Lock()
    counter = iter(range(n))

    def worker(k: int) -> None:
        rnd = random.Random(k)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            stream = journal.open_stream(f"upload-{i:05d}".encode())
            for _ in range(rnd.randint(1, 6)):
                stream.write(os.urandom(rnd.randint(100, 3000)))
            if rnd.random() < 0.15:
                stream.abort()
            else:
                stream.close()
            progress.advance(task)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    journal.close()


def make_events(root: str, n: int, progress: Progress) -> None:
    """``n`` events in small batches over ``n / 20`` persistence ids, one delete_to."""
    from engine.events import EventJournal

    edir = os.path.join(root, "events", "accounts")
    make_dirs(default_fs(), edir)
    ids = max(1, n // 20)
    task = progress.add_task("event journal", total=n)
    rnd = random.Random(3)
    seq = {f"account-{i:04d}": 0 for i in range(ids)}
    with EventJournal.open(edir, sync="never") as journal:
        written = 0
        while written < n:
            pid = rnd.choice(list(seq))
            batch = []
            for _ in range(min(rnd.randint(1, 5), n - written)):
                seq[pid] += 1
                batch.append((seq[pid], f'{{"deposit": {rnd.randint(1, 100)}}}'.encode()))
            journal.write(pid, batch)
            written += len(batch)
            progress.advance(task, len(batch))
        first = next(iter(seq))
        if seq[first] > 1:
            journal.delete_to(first, seq[first] - 1)


def make_pages(root: str, n: int, progress: Progress) -> None:
    """``n`` one-page transactions (allocate + write, or free), then a few frees."""
    from engine.pages import PageStore

    pdir = os.path.join(root, "pages")
    make_dirs(default_fs(), pdir)
    task = progress.add_task("page-store transactions", total=n)
    rnd = random.Random(5)
    live: list[int] = []
    with PageStore.open(os.path.join(pdir, "store.db"), page_size=4096, create=True) as store:
        for i in range(n):
            with store.transaction() as tx:
                if live and rnd.random() < 0.2:
                    tx.free(live.pop(rnd.randrange(len(live))))
                else:
                    page = tx.allocate()
                    tx.write(page, 0, f"record {i}".encode().ljust(64, b"."))
                    live.append(page)
            progress.advance(task)
        # A last clean-up transaction leaves some pages on the free list.
        with store.transaction() as tx:
            for _ in range(max(1, len(live) // 10) if len(live) > 1 else 0):
                tx.free(live.pop(rnd.randrange(len(live))))


#: (name, module that must exist, maker, share of --scale)
STEPS: list[tuple[str, str, Callable[[str, int, Progress], None], float]] = [
    ("queue", "engine.queue", make_queue, 1.0),
    ("pages", "engine.pages", make_pages, 0.05),
    ("streams", "engine.streams", make_streams, 0.05),
    ("logs", "engine.applog", make_logs, 2.0),
    ("events", "engine.events", make_events, 0.5),
]


def make_demo_data(root: str, scale: int = 10_000, console: Console | None = None) -> list[str]:
    """Create the demo stores under ``root`` (must be empty or missing); returns what was made."""
    console = console or Console()
    if os.path.isdir(root) and os.listdir(root):
        raise ConfigError(f"{root}: not empty; give engine demo a new directory")
    make_dirs(default_fs(), root)
    made = []
    with _progress(console) as progress:
        for name, module, maker, share in STEPS:
            if not _have(module):
                console.print(f"[yellow]{name}: store not installed in this build; skipped")
                continue
            try:
                maker(root, max(10, int(scale * share)), progress)
            except Exception as exc:  # one store's failure must not hide the others
                console.print(f"[red]{name}: demo data failed: {exc!r}")
                continue
            made.append(name)
    return made


def run_demo(root: str, out: str | None, master: str | None, scale: int, console: Console) -> Any:
    """Make the demo data under ``root``, then run the pipeline over it and print it."""
    from engine.spark.pipeline import print_summary, run_pipeline
    from engine.spark.session import build_session

    made = make_demo_data(root, scale, console)
    console.print(f"created demo data in {root}: {', '.join(made)}")
    console.print("starting Spark ...")
    spark = build_session(master, "engine-demo")
    try:
        summary = run_pipeline(spark, root, out or os.path.join(root, "out"))
    finally:
        spark.stop()
    print_summary(summary, console)
    console.print(f"summary: {summary.parquet}\nchart: {summary.chart}")
    return summary
