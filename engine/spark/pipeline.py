"""The main job: summarise every store under a data directory with Spark.

``engine pipeline DATA_DIR --out OUT_DIR [--master URL]`` finds the stores
(:mod:`engine.spark.discover`), reads each through its Spark source, aggregates
on Spark, and writes:

* ``OUT_DIR/summary.parquet`` — one row per store (or per queue reader), the
  :data:`SUMMARY_SCHEMA` columns (Spark's Parquet writer: a directory);
* ``OUT_DIR/summary.png`` — a chart per kind of store;
* a table per kind on the terminal.

Per append log: records, payload bytes, time span and records per minute.  Per
queue and reader: backlog and oldest item.  Per stream journal: complete /
aborted / open streams.  Per event journal: persistence ids and events.  Per page
store: pages and free pages.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.spark.discover import Found, discover

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("engine.spark")

#: Columns of the summary (Spark DDL); null where a column does not apply.
SUMMARY_DDL = (
    "kind string, name string, detail string, records long, bytes long, "
    "first_time timestamp, last_time timestamp, span_seconds double, per_minute double, "
    "backlog long, oldest timestamp, complete long, aborted long, open long, "
    "ids long, events long, pages long, free_pages long"
)
SUMMARY_COLUMNS = [c.strip().split(" ")[0] for c in SUMMARY_DDL.split(",")]


@dataclass
class Summary:
    """The pipeline's result: rows (dicts keyed by :data:`SUMMARY_COLUMNS`) and files."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "path: problem" for stores that could not be read
    parquet: str | None = None
    chart: str | None = None
    found: Found | None = None

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["kind"] == kind]


def _row(kind: str, name: str, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: None for c in SUMMARY_COLUMNS}
    row.update(kind=kind, name=name, **values)
    return row


def _rel(root: str, path: str) -> str:
    rel = os.path.relpath(path, root)
    return path.rstrip("/").rsplit("/", 1)[-1] if rel == "." else rel


def _union(frames: Sequence[DataFrame]) -> DataFrame | None:
    out = None
    for f in frames:
        out = f if out is None else out.unionByName(f)
    return out


def summarize_logs(spark: SparkSession, root: str, paths: list[str]) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    frames = []
    for p in paths:
        df = spark.read.format("engine-log").load(p)
        frames.append(df.agg(
            F.count(F.lit(1)).alias("records"),
            F.coalesce(F.sum(F.length("data")), F.lit(0)).alias("bytes"),
            F.min("time").alias("first_time"),
            F.max("time").alias("last_time"),
            F.min("time_ns").alias("t0"),
            F.max("time_ns").alias("t1"),
        ).withColumn("name", F.lit(_rel(root, p))))
    all_ = _union(frames)
    rows = []
    for r in (all_.collect() if all_ is not None else []):
        span = (r["t1"] - r["t0"]) / 1e9 if r["records"] else 0.0
        per_min = r["records"] / (span / 60.0) if span > 0 else float(r["records"])
        rows.append(_row("log", r["name"], records=r["records"], bytes=r["bytes"],
                         first_time=r["first_time"], last_time=r["last_time"],
                         span_seconds=span, per_minute=per_min))
    return sorted(rows, key=lambda x: x["name"])


def summarize_queues(spark: SparkSession, root: str, paths: list[str]) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    from engine.fs import resolve
    from engine.queue.diagnose import queue_names
    from engine.spark.queuesource import reader_names

    frames = []
    expected: list[tuple[str, str, str]] = []
    fs = resolve(None)
    for p in paths:
        for q in queue_names(fs, p):
            expected.extend((_rel(root, p), q, r) for r in reader_names(fs, p, q))
        df = spark.read.format("engine-queue").load(p)
        frames.append(df.groupBy("queue", "reader").agg(
            F.count(F.lit(1)).alias("backlog"),
            F.coalesce(F.sum(F.length("data")), F.lit(0)).alias("bytes"),
            F.min("add_time").alias("oldest"),
        ).withColumn("dir", F.lit(_rel(root, p))))
    all_ = _union(frames)
    got = {(r["dir"], r["queue"], r["reader"]): r for r in (all_.collect() if all_ is not None else [])}
    rows = []
    for key in sorted(set(expected) | set(got)):
        d, q, rd = key
        r = got.get(key)
        rows.append(_row("queue", f"{d}/{q}", detail=rd or "(default)",
                         backlog=r["backlog"] if r else 0, bytes=r["bytes"] if r else 0,
                         oldest=r["oldest"] if r else None))
    return rows


def summarize_streams(spark: SparkSession, root: str, paths: list[str]) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    frames = []
    for p in paths:
        df = spark.read.format("engine-streams").load(p)
        frames.append(df.agg(
            F.count(F.lit(1)).alias("records"),
            F.coalesce(F.sum("bytes"), F.lit(0)).alias("bytes"),
            F.count(F.when(F.col("status") == "complete", 1)).alias("complete"),
            F.count(F.when(F.col("status") == "aborted", 1)).alias("aborted"),
            F.count(F.when(F.col("status") == "open", 1)).alias("open"),
        ).withColumn("name", F.lit(_rel(root, p))))
    all_ = _union(frames)
    return sorted((_row("streams", r["name"], records=r["records"], bytes=r["bytes"], complete=r["complete"],
                        aborted=r["aborted"], open=r["open"])
                   for r in (all_.collect() if all_ is not None else [])), key=lambda x: x["name"])


def summarize_events(spark: SparkSession, root: str, paths: list[str]) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    from engine.events import EventJournal

    frames = []
    for p in paths:
        df = spark.read.format("engine-events").load(p)
        frames.append(df.agg(
            F.countDistinct("persistence_id").alias("live_ids"),
            F.count(F.lit(1)).alias("events"),
            F.coalesce(F.sum(F.length("payload")), F.lit(0)).alias("bytes"),
        ).withColumn("name", F.lit(_rel(root, p))).withColumn("path", F.lit(p)))
    all_ = _union(frames)
    rows = []
    for r in (all_.collect() if all_ is not None else []):
        # Ids whose events were all deleted still count as ids (their highest
        # sequence number survives); the driver reads that from the meta file.
        with EventJournal.open_read_only(r["path"]) as j:
            ids = len(j.persistence_ids())
        rows.append(_row("events", r["name"], ids=ids, events=r["events"], bytes=r["bytes"]))
    return sorted(rows, key=lambda x: x["name"])


def summarize_pages(spark: SparkSession, root: str, paths: list[str]) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    frames = []
    for p in paths:
        df = spark.read.format("engine-pages").load(p)
        frames.append(df.agg(
            F.count(F.lit(1)).alias("pages"),
            F.count(F.when(F.col("free"), 1)).alias("free_pages"),
            F.coalesce(F.sum(F.length("data")), F.lit(0)).alias("bytes"),
        ).withColumn("name", F.lit(_rel(root, p))))
    all_ = _union(frames)
    return sorted((_row("pages", r["name"], pages=r["pages"], free_pages=r["free_pages"], bytes=r["bytes"])
                   for r in (all_.collect() if all_ is not None else [])), key=lambda x: x["name"])


def run_pipeline(spark: SparkSession, data_dir: str, out_dir: str, *, chart: bool = True) -> Summary:
    """Summarise every store under ``data_dir`` into ``out_dir``; see the module docstring.

    Both paths are made absolute here, on the driver: a cluster's executors
    resolve a relative path from their own working directory.
    """
    from engine.fs import make_dirs, resolve
    from engine.spark import available_sources

    data_dir, out_dir = os.path.abspath(data_dir), os.path.abspath(out_dir)
    found = discover(data_dir)
    sources = set(available_sources())
    summary = Summary(found=found)
    plan = [
        ("engine-log", found.logs, summarize_logs),
        ("engine-queue", found.queues, summarize_queues),
        ("engine-streams", found.streams, summarize_streams),
        ("engine-events", found.events, summarize_events),
        ("engine-pages", found.pages, summarize_pages),
    ]
    for source, paths, fn in plan:
        if not paths:
            continue
        if source not in sources:
            log.warning("%d store(s) for %s found but that source is not installed; skipped", len(paths), source)
            continue
        try:
            summary.rows.extend(fn(spark, data_dir, paths))
        except Exception:
            # One damaged store must not hide the others: summarise them one by one
            # and report the ones that fail.
            for path in paths:
                try:
                    summary.rows.extend(fn(spark, data_dir, [path]))
                except Exception as exc:
                    problem = _first_line(exc)
                    log.warning("%s: %s", path, problem)
                    summary.errors.append(f"{_rel(data_dir, path)}: {problem}")
    make_dirs(resolve(None), out_dir)
    out_parquet = os.path.join(out_dir, "summary.parquet")
    df = spark.createDataFrame([tuple(r[c] for c in SUMMARY_COLUMNS) for r in summary.rows], SUMMARY_DDL)
    df.coalesce(1).write.mode("overwrite").parquet(out_parquet)
    summary.parquet = out_parquet
    if chart:
        summary.chart = draw_chart(summary, os.path.join(out_dir, "summary.png"))
    return summary


def _first_line(exc: BaseException) -> str:
    """A one-line description of an error (Spark wraps Python errors in long traces)."""
    text = str(exc).strip()
    for line in reversed(text.splitlines()):
        line = line.strip()
        if "Error:" in line or "error:" in line:
            return line[:300]
    return (text.splitlines() or [type(exc).__name__])[0][:300]


def draw_chart(summary: Summary, path: str) -> str:
    """One bar chart per kind of store, in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    logs = summary.of_kind("log")
    if logs:
        panels.append(("Append logs: records per minute", [r["name"] for r in logs],
                       {"records/min": [r["per_minute"] or 0 for r in logs]}))
    queues = summary.of_kind("queue")
    if queues:
        panels.append(("Queues: backlog per reader", [f"{r['name']}\n{r['detail']}" for r in queues],
                       {"backlog": [r["backlog"] for r in queues]}))
    streams = summary.of_kind("streams")
    if streams:
        panels.append(("Stream journals", [r["name"] for r in streams],
                       {k: [r[k] for r in streams] for k in ("complete", "aborted", "open")}))
    events = summary.of_kind("events")
    if events:
        panels.append(("Event journals", [r["name"] for r in events],
                       {"ids": [r["ids"] for r in events], "events": [r["events"] for r in events]}))
    pages = summary.of_kind("pages")
    if pages:
        panels.append(("Page stores", [r["name"] for r in pages],
                       {"pages": [r["pages"] for r in pages], "free": [r["free_pages"] for r in pages]}))
    n = max(1, len(panels))
    fig, axes = plt.subplots(n, 1, figsize=(9, 3.2 * n), squeeze=False)
    for ax, (title, labels, series) in zip(axes[:, 0], panels):
        width = 0.8 / max(1, len(series))
        for k, (label, values) in enumerate(series.items()):
            xs = [i + k * width for i in range(len(labels))]
            ax.bar(xs, values, width=width, label=label)
        ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(labels))])
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_title(title)
        if len(series) > 1:
            ax.legend(fontsize=8)
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no stores found", ha="center", va="center")
        axes[0, 0].set_axis_off()
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    fig.suptitle(f"engine pipeline summary ({stamp})")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def print_summary(summary: Summary, console: Any) -> None:
    """The summary as rich tables, one per kind of store."""
    from rich.table import Table

    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.1f}"
        if isinstance(v, int):
            return f"{v:,}"
        if isinstance(v, dt.datetime):
            return v.strftime("%Y-%m-%d %H:%M:%S")
        return str(v)

    layouts = [
        ("log", "Append logs", ["name", "records", "bytes", "first_time", "last_time", "span_seconds", "per_minute"]),
        ("queue", "Queues", ["name", "detail", "backlog", "bytes", "oldest"]),
        ("streams", "Stream journals", ["name", "complete", "aborted", "open", "bytes"]),
        ("events", "Event journals", ["name", "ids", "events", "bytes"]),
        ("pages", "Page stores", ["name", "pages", "free_pages", "bytes"]),
    ]
    for kind, title, cols in layouts:
        rows = summary.of_kind(kind)
        if not rows:
            continue
        table = Table(title=title)
        for c in cols:
            table.add_column("reader" if c == "detail" else c.replace("_", " "),
                             justify="left" if c in ("name", "detail") else "right")
        for r in rows:
            table.add_row(*(fmt(r[c]) for c in cols))
        console.print(table)
    if not summary.rows and not summary.errors:
        console.print("no stores found")
    for problem in summary.errors:
        console.print(f"[red]could not read {problem}")
