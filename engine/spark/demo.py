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
* ``events/accounts``: an event journal with many persistence ids;
* ``kv/catalog.kv``: a key-value store of products, with a ``prices`` tree
  beside the default one (updates in transactions, some deletes).

Each step shows a rich progress bar.  The sizes scale with ``--scale``.

Before it creates anything it checks what the Spark phase needs (the
``[spark]`` extra and a Java 17+ runtime) and says how to get what is missing.
A run that fails leaves a marker file (:data:`MARKER`) in its directory, so
the next run may reuse the directory; ``--force`` replaces the demo's own
entries (:data:`DEMO_ENTRIES`) in any directory.  Spark's start-up noise and
log go to ``DIR/spark.log`` unless ``--verbose``; a spinner with the elapsed
time says what the Spark phase is doing.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from engine.errors import ConfigError
from engine.fs import FileSystem, default_fs, make_dirs

#: What ``engine demo`` makes in its directory (all ``--force`` removes there).
DEMO_ENTRIES = ("queues", "pages", "streams", "logs", "events", "kv", "out", "spark.log")
#: Present while a run has not finished: the next run may reuse the directory.
MARKER = ".engine-demo-unfinished"
#: The oldest Java that Spark 4 runs on.
MIN_JAVA = 17
#: Modules the ``[spark]`` extra installs.
SPARK_MODULES = ("pyspark", "pyarrow", "pandas", "matplotlib")


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
    """Logs ``clicks`` (TTL one day; traffic rising through the hour) and
    ``metrics`` (64 KiB segments; steady), an hour of times."""
    from engine.applog import AppendLog

    task = progress.add_task("append logs", total=2 * n)
    now = time.time_ns()
    hour = 3600 * 10**9
    rnd = random.Random(7)
    pages = ["/", "/cart", "/checkout", "/search", "/item"]
    with AppendLog.open(os.path.join(root, "logs", "clicks"), ttl_ns=24 * hour, sync=0.05) as log:
        batch = []
        for i in range(n):
            # Traffic rising through the hour (the rate grows linearly): the log
            # grows ever faster, where ``metrics`` below grows steadily.
            t = now - hour + int(hour * ((i + rnd.random()) / n) ** 0.5)
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


def make_kv(root: str, n: int, progress: Progress) -> None:
    """``n`` products in a key-value store: transactions of ten puts (a product
    and its price in a second tree), a price update now and then, some deletes."""
    from engine.kv import KV

    kdir = os.path.join(root, "kv")
    make_dirs(default_fs(), kdir)
    task = progress.add_task("key-value transactions", total=n)
    rnd = random.Random(11)
    with KV.open(os.path.join(kdir, "catalog.kv")) as kv:
        for start in range(0, n, 10):
            with kv.transaction() as tx:
                prices = tx.tree("prices")
                for i in range(start, min(n, start + 10)):
                    key = f"product:{i:06d}".encode()
                    tx[key] = f'{{"name": "product {i}", "stock": {rnd.randrange(100)}}}'.encode()
                    prices[key] = f"{rnd.uniform(1, 500):.2f}".encode()
                gone = f"product:{rnd.randrange(start or 1):06d}".encode()
                if start and rnd.random() < 0.3 and gone in tx:
                    del tx[gone]
            progress.advance(task, min(n, start + 10) - start)


#: (name, module that must exist, maker, share of --scale)
STEPS: list[tuple[str, str, Callable[[str, int, Progress], None], float]] = [
    ("queue", "engine.queue", make_queue, 1.0),
    ("pages", "engine.pages", make_pages, 0.05),
    ("streams", "engine.streams", make_streams, 0.05),
    ("logs", "engine.applog", make_logs, 2.0),
    ("events", "engine.events", make_events, 0.5),
    ("kv", "engine.kv", make_kv, 0.2),
]


def java_version(java: str) -> int:
    """The major version of the ``java`` executable (8 for "1.8.0_392", 17 for "17.0.15")."""
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"{java}: cannot run it to learn its version: {exc}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if not match:
        raise ConfigError(f"{java} -version: no version in its output: {(result.stderr or result.stdout)[:200]!r}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def check_requirements() -> str:
    """Raise :class:`ConfigError` saying how to get what the Spark phase needs
    (the ``[spark]`` extra, a Java 17+ runtime); returns the ``java`` found.

    Run before anything is created, so a missing Java costs no half-made directory.
    """
    missing = [m for m in SPARK_MODULES if not _have(m)]
    if missing:
        raise ConfigError(f"the Spark extra is not installed (no {', '.join(missing)}): "
                          "pip install 'engine[spark]'")
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    how = (f"Spark needs Java {MIN_JAVA} or newer: install a JDK or JRE (Debian/Ubuntu: "
           f"sudo apt install openjdk-{MIN_JAVA}-jre-headless; macOS: brew install openjdk@{MIN_JAVA}; "
           "or https://adoptium.net) and put its java on PATH or set JAVA_HOME")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH"
        raise ConfigError(f"{where}. {how}")
    version = java_version(java)
    if version < MIN_JAVA:
        raise ConfigError(f"{java} is Java {version}. {how}")
    return java


def _remove_tree(fs: FileSystem, path: str) -> None:
    """Remove ``path`` and what is under it (a symbolic link is removed, not followed)."""
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        for name in fs.listdir(path):
            _remove_tree(fs, os.path.join(path, name))
        fs.rmdir(path)
    else:
        fs.unlink(path)


def prepare_dir(root: str, *, force: bool = False) -> None:
    """Make ``root`` ready for new demo data and mark it unfinished (:data:`MARKER`).

    A missing or empty directory is used as is; one an unfinished run left
    (it holds :data:`MARKER`), or any with ``force``, has the demo's own
    entries (:data:`DEMO_ENTRIES`) removed first; nothing else in it is touched.
    Any other non-empty directory is refused.
    """
    fs = default_fs()
    if os.path.isdir(root) and os.listdir(root):
        if not (force or os.path.exists(os.path.join(root, MARKER))):
            raise ConfigError(f"{root}: not empty; give engine demo a new directory, or --force to replace "
                              f"the demo's entries in it ({', '.join(DEMO_ENTRIES)})")
        for name in DEMO_ENTRIES:
            if os.path.lexists(os.path.join(root, name)):
                _remove_tree(fs, os.path.join(root, name))
    make_dirs(fs, root)
    mark_unfinished(root)


def mark_unfinished(root: str) -> None:
    """Leave :data:`MARKER` in ``root``: the run did not finish, a rerun may reuse it."""
    with open(os.path.join(root, MARKER), "w") as f:
        f.write("engine demo did not finish here; running it again reuses this directory\n")


def mark_finished(root: str) -> None:
    """Remove :data:`MARKER` from ``root``."""
    with contextlib.suppress(FileNotFoundError):
        default_fs().unlink(os.path.join(root, MARKER))


def make_demo_data(root: str, scale: int = 10_000, console: Console | None = None, *,
                   force: bool = False, err_console: Console | None = None) -> list[str]:
    """Create the demo stores under ``root``; returns what was made.

    ``root`` must be missing, empty, left by an unfinished run, or ``force``
    given (see :func:`prepare_dir`).  On success the directory is no longer
    marked unfinished; on failure it stays marked.
    """
    console = console or Console()
    err_console = err_console or Console(stderr=True)
    prepare_dir(root, force=force)
    made = []
    with _progress(console) as progress:
        for name, module, maker, share in STEPS:
            if not _have(module):
                err_console.print(f"{name}: store not installed in this build; skipped", style="yellow",
                                  markup=False, highlight=False)
                continue
            try:
                maker(root, max(10, int(scale * share)), progress)
            except Exception as exc:  # one store's failure must not hide the others
                err_console.print(f"{name}: demo data failed: {exc!r}", style="red", markup=False, highlight=False)
                continue
            made.append(name)
    mark_finished(root)
    return made


@contextlib.contextmanager
def _stderr_to(path: str | None) -> Iterator[None]:
    """Send file descriptor 2 to ``path`` while the JVM starts (it inherits it:
    all its later output goes there too); ``None``: leave it alone."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def start_spark(master: str | None, app_name: str, console: Console, *, log_path: str | None,
                ship: str | None = None) -> Any:
    """A session (:func:`engine.spark.session.build_session`) started behind a
    spinner; the JVM's output goes to ``log_path`` (``None``: the terminal,
    with Spark's log level left as is)."""
    from engine.spark.session import build_session

    with _spark_progress(console) as progress:
        progress.add_task("Spark: starting (a JVM; about 20 s)")
        with _stderr_to(log_path):
            return build_session(master, app_name, quiet=log_path is not None, ship=ship)


def run_spark_phase(spark: Any, root: str, out: str, console: Console, *, chart: bool = True) -> Any:
    """Run the pipeline over ``root`` into ``out`` with a spinner saying what it does."""
    from engine.spark.pipeline import run_pipeline

    with _spark_progress(console) as progress:
        task = progress.add_task("Spark: starting the job")
        return run_pipeline(spark, root, out, chart=chart,
                            step=lambda what: progress.update(task, description=f"Spark: {what}"))


def _spark_progress(console: Console) -> Progress:
    """A spinner saying what Spark does, on a terminal only: elsewhere (a pipe, a
    file) a transient display leaves a blank line where it was."""
    return Progress(SpinnerColumn(), TextColumn("[bold]{task.description:<40}"), TimeElapsedColumn(),
                    console=console if console.is_terminal else Console(quiet=True), transient=True)


def run_demo(root: str, out: str | None, master: str | None, scale: int, console: Console, *,
             force: bool = False, verbose: bool = False, quiet: bool = False,
             err_console: Console | None = None) -> Any:
    """Check the requirements, make the demo data under ``root``, run the
    pipeline over it and print it (``quiet``: no progress, only the result).

    A failure leaves ``root`` marked unfinished, so a rerun reuses it.
    """
    from engine.spark.pipeline import print_summary

    check_requirements()
    if scale < 1:
        raise ConfigError(f"scale must be 1 or more, got {scale}")
    err_console = err_console or Console(stderr=True)
    root = os.path.abspath(root)
    progress = Console(quiet=True) if quiet else console
    made = make_demo_data(root, scale, progress, force=force, err_console=err_console)
    progress.print(f"created demo data in {root}: {', '.join(made)}")
    mark_unfinished(root)
    log_path = None if verbose else os.path.join(root, "spark.log")
    spark = start_spark(master, "engine-demo", progress, log_path=log_path)
    try:
        summary = run_spark_phase(spark, root, out or os.path.join(root, "out"), progress)
    finally:
        spark.stop()
    print_summary(summary, console, err_console)
    console.print(f"summary: {summary.parquet}\nchart: {summary.chart}")
    if log_path:
        console.print(f"Spark's log: {log_path}")
    mark_finished(root)
    return summary
