"""The main job: summarise every store under a data directory with Spark.

``engine pipeline DATA_DIR --out OUT_DIR [--master URL]`` finds the stores
(:mod:`engine.spark.discover`), reads each through its Spark source, aggregates
on Spark, and writes:

* ``OUT_DIR/summary.parquet`` — one row per store (or per queue reader), the
  :data:`SUMMARY_SCHEMA` columns (Spark's Parquet writer: a directory);
* ``OUT_DIR/summary.png`` — a chart per kind of store;
* a table per kind on the terminal.

Per append log: records, payload bytes, time span and records per minute (none
for a span under :data:`MIN_RATE_SPAN_SECONDS`).  Per
queue and reader: backlog and oldest item.  Per stream journal: complete /
aborted / open streams.  Per event journal: persistence ids and events.  Per page
store: pages and free pages.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.stores import Found, discover, disk_usage

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("engine.spark")

#: Columns of the summary (Spark DDL); null where a column does not apply.
SUMMARY_DDL = (
    "kind string, name string, detail string, records long, bytes long, "
    "first_time timestamp, last_time timestamp, span_seconds double, per_minute double, "
    "backlog long, oldest timestamp, complete long, aborted long, open long, "
    "ids long, events long, pages long, free_pages long, keys long, trees long, disk_bytes long"
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
    #: Per append log: (bucket start, records per minute in that bucket), for the chart.
    log_rates: dict[str, list[tuple[dt.datetime, float]]] = field(default_factory=dict)
    #: Per append log: (bucket end, records up to it), how the log grew, for the chart.
    log_growth: dict[str, list[tuple[dt.datetime, int]]] = field(default_factory=dict)
    #: Per event journal: {events an id holds: how many ids hold that many}, for the chart.
    events_per_id: dict[str, dict[int, int]] = field(default_factory=dict)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["kind"] == kind]


def _utc(value: Any) -> Any:
    """A time Spark handed back as a naive local datetime, as an aware UTC one (so
    every table and ``--json`` says its zone); other values as they are."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC)
    return value


def _row(kind: str, name: str, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: None for c in SUMMARY_COLUMNS}
    row.update(kind=kind, name=name, **{key: _utc(value) for key, value in values.items()})
    return row


def _rel(root: str, path: str) -> str:
    rel = os.path.relpath(path, root)
    return path.rstrip("/").rsplit("/", 1)[-1] if rel == "." else rel


def _union(frames: Sequence[DataFrame]) -> DataFrame | None:
    out = None
    for f in frames:
        out = f if out is None else out.unionByName(f)
    return out


#: The shortest span a rate is given for: records written within a second of
#: each other (a batch, a test, one instant) have no meaningful per-minute rate
#: (10 records 4 ms apart would be "148,000 a minute").
MIN_RATE_SPAN_SECONDS = 1.0


def per_minute(records: int, span_seconds: float) -> float | None:
    """Records per minute over ``span_seconds``; None for a span shorter than
    :data:`MIN_RATE_SPAN_SECONDS` (no rate rather than an absurd one)."""
    if span_seconds < MIN_RATE_SPAN_SECONDS:
        return None
    return records / (span_seconds / 60.0)


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
        per_min = per_minute(r["records"], span)
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
        with EventJournal.open_reader(r["path"]) as j:
            ids = len(j.persistence_ids())
        rows.append(_row("events", r["name"], ids=ids, events=r["events"], bytes=r["bytes"]))
    return sorted(rows, key=lambda x: x["name"])


#: Bucket widths the log timeline may use, in minutes (about 120 buckets or fewer).
_BUCKETS = (1, 5, 15, 60, 6 * 60, 24 * 60, 7 * 24 * 60)


def log_rates(spark: SparkSession, root: str, rows: list[dict[str, Any]], paths: list[str],
              growth: dict[str, list[tuple[dt.datetime, int]]] | None = None,
              ) -> dict[str, list[tuple[dt.datetime, float]]]:
    """Records per minute over time, per append log: counts per time bucket
    (the narrowest of :data:`_BUCKETS` giving at most ~120 buckets over the
    log's span), divided by the bucket's minutes.  ``growth`` (when given) gets,
    per log, the records held at the end of each bucket."""
    from pyspark.sql import functions as F

    by_name = {r["name"]: r for r in rows}
    out: dict[str, list[tuple[dt.datetime, float]]] = {}
    for p in paths:
        name = _rel(root, p)
        row = by_name.get(name, {})
        minutes = next((b for b in _BUCKETS if (row.get("span_seconds") or 0.0) / 60.0 / b <= 120), _BUCKETS[-1])
        df = spark.read.format("engine-log").load(p)
        counts = df.groupBy(F.window("time", f"{minutes} minutes").start.alias("t")).count().orderBy("t").collect()
        points = []
        held, grew = 0, []
        for r in counts:
            if r["t"] is None:
                continue
            held += r["count"]
            grew.append((_utc(r["t"]) + dt.timedelta(minutes=minutes), held))
            start = _utc(r["t"])
            covered = _covered_minutes(start, minutes, row.get("first_time"), row.get("last_time"))
            if covered >= minutes / 2 or len(counts) <= 2:
                points.append((start, r["count"] / max(covered, minutes / 2)))
        out[name] = points
        if growth is not None:
            growth[name] = grew
    return out


def _covered_minutes(start: dt.datetime, minutes: int, first: dt.datetime | None, last: dt.datetime | None) -> float:
    """Minutes of the bucket ``[start, start + minutes)`` the log covers.

    The first and last buckets are partial: a rate over their whole width
    would show a drop that is not there, and one over a few seconds a spike;
    :func:`log_rates` divides by the covered minutes and leaves out a bucket
    covered less than half (unless the log has no others).
    """
    end = start + dt.timedelta(minutes=minutes)
    lo = max(start, first) if first is not None else start
    hi = min(end, last) if last is not None else end
    return max((hi - lo).total_seconds() / 60.0, 0.0)


def events_per_id(spark: SparkSession, root: str, paths: list[str]) -> dict[str, dict[int, int]]:
    """Per event journal, how many persistence ids hold 1, 2, 3 ... live events."""
    from pyspark.sql import functions as F

    out: dict[str, dict[int, int]] = {}
    for p in paths:
        df = spark.read.format("engine-events").load(p)
        dist = df.groupBy("persistence_id").agg(F.count(F.lit(1)).alias("n")).groupBy("n").count().collect()
        out[_rel(root, p)] = {int(r["n"]): int(r["count"]) for r in sorted(dist, key=lambda r: r["n"])}
    return out


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


def summarize_kv(spark: SparkSession, root: str, paths: list[str]) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    from engine.kv import KV

    frames = []
    for p in paths:
        with KV.open_reader(p) as reader:  # the source reads one tree at a time: name them all
            trees = reader.trees()
        df = _union([spark.read.format("engine-kv").option("tree", t).load(p) for t in trees])
        if df is None:
            continue
        frames.append(df.agg(
            F.count(F.lit(1)).alias("keys"),
            F.countDistinct("tree").alias("trees"),
            F.coalesce(F.sum(F.length("key") + F.length("value")), F.lit(0)).alias("bytes"),
        ).withColumn("name", F.lit(_rel(root, p))))
    all_ = _union(frames)
    return sorted((_row("kv", r["name"], keys=r["keys"], trees=r["trees"], records=r["keys"], bytes=r["bytes"])
                   for r in (all_.collect() if all_ is not None else [])), key=lambda x: x["name"])


def run_pipeline(spark: SparkSession, data_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
                 chart: bool = True,
                 step: Callable[[str], None] | None = None) -> Summary:
    """Summarise every store under ``data_dir`` into ``out_dir``; see the module docstring.

    Both paths are made absolute here, on the driver: a cluster's executors
    resolve a relative path from their own working directory.  ``step`` is
    told what the job does next ("reading 2 append logs"), for a progress
    display: a Spark job over a large directory takes a while.
    """
    tell = step or (lambda what: None)
    from engine.fs import as_path, make_dirs, resolve

    data_dir, out_dir = as_path(data_dir, "data_dir"), as_path(out_dir, "out_dir")
    from engine.spark import available_sources

    data_dir, out_dir = os.path.abspath(data_dir), os.path.abspath(out_dir)
    found = discover(data_dir)
    sources = set(available_sources())
    summary = Summary(found=found)
    # An unreadable corner: said (once, in summary.errors: the command line prints
    # them; a warning here too printed each twice), and the rest still summarised.
    for problem in found.errors:
        log.info("%s", problem)
        summary.errors.append(_rel(data_dir, problem) if problem.startswith(data_dir) else problem)
    plan = [
        ("engine-log", found.logs, summarize_logs, "append log"),
        ("engine-queue", found.queues, summarize_queues, "queue directory"),
        ("engine-streams", found.streams, summarize_streams, "stream journal"),
        ("engine-events", found.events, summarize_events, "event journal"),
        ("engine-pages", found.pages, summarize_pages, "page store"),
        ("engine-kv", found.kv, summarize_kv, "key-value store"),
    ]
    for source, paths, fn, what in plan:
        if not paths:
            continue
        tell(f"reading {len(paths)} {what}{'s' if len(paths) > 1 else ''}")
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
                    problem = first_line(exc)
                    log.info("%s: %s", path, problem)
                    summary.errors.append(f"{_rel(data_dir, path)}: {problem}")
    _add_disk_bytes(summary, data_dir, found)
    make_dirs(resolve(None), out_dir)
    tell("writing summary.parquet")
    out_parquet = os.path.join(out_dir, "summary.parquet")
    df = spark.createDataFrame([tuple(r[c] for c in SUMMARY_COLUMNS) for r in summary.rows], SUMMARY_DDL)
    df.coalesce(1).write.mode("overwrite").parquet(out_parquet)
    summary.parquet = out_parquet
    if chart:
        tell("drawing summary.png")
        logs = [p for p in found.logs if _rel(data_dir, p) in {r["name"] for r in summary.of_kind("log")}]
        events = [p for p in found.events if _rel(data_dir, p) in {r["name"] for r in summary.of_kind("events")}]
        try:
            summary.log_rates = log_rates(spark, data_dir, summary.of_kind("log"), logs, summary.log_growth)
            summary.events_per_id = events_per_id(spark, data_dir, events)
        except Exception as exc:  # the chart's extra detail must not cost the summary
            log.warning("chart detail skipped: %s", first_line(exc))
        summary.chart = draw_chart(summary, os.path.join(out_dir, "summary.png"))
    return summary


def _add_disk_bytes(summary: Summary, root: str, found: Found) -> None:
    """Each row's ``disk_bytes``: what its store's files take on disk (a queue's
    readers: their queue's files), read on the driver from the file sizes."""
    from engine.fs import resolve

    fs = resolve(None)
    where = {(kind, _rel(root, p)): p for kind, paths in found.by_kind().items() for p in paths}
    for row in summary.rows:
        try:
            if row["kind"] == "queue":
                directory, _, queue = row["name"].rpartition("/")
                path = where.get(("queue", directory))
                row["disk_bytes"] = disk_usage(fs, path, queue)[0] if path else None
            elif (row["kind"], row["name"]) in where:
                row["disk_bytes"] = disk_usage(fs, where[(row["kind"], row["name"])])[0]
        except OSError as exc:  # unreadable meanwhile: the figure stays unknown
            log.warning("%s: disk usage unknown: %s", row["name"], exc)


#: An exception of the JVM connector (engine.spark.*Exception) in Spark's text, and the
#: engine.errors class each stands for.
_JVM_ERROR = re.compile(r"\bengine\.spark\.(\w+)Exception: (.*)")
_JVM_ERRORS = {"CorruptFile": "CorruptFileError", "Config": "ConfigError"}


def first_line(exc: BaseException) -> str:
    """A one-line description of an error, without Spark's (Java or Python) stack trace."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines()]
    for line in lines:  # the JVM connector's own error, however deep Spark wrapped it
        found = _JVM_ERROR.search(line)
        if found:
            kind = _JVM_ERRORS.get(found.group(1), found.group(1) + "Exception")
            return f"{kind}: {found.group(2)}"[:300]
    for line in reversed(lines):  # a Python error inside a Spark task: its last line is the cause
        if "Error:" in line or "error:" in line:
            return line[:300]
    for line in lines:  # a Java one: the first "...Exception: message" line
        if "Exception: " in line:
            return line[:300]
    return (lines or [type(exc).__name__])[0][:300]


def _bar_labels(ax: Any, bars: Any, fmt: str = "{:,.0f}") -> None:
    """Write each bar's value at its end (zero-width bars get none)."""
    ax.bar_label(bars, labels=[fmt.format(b.get_width()) if b.get_width() else "" for b in bars],
                 padding=3, fontsize=8)


def _stacked(ax: Any, labels: list[str], series: dict[str, list[int]], colors: dict[str, str]) -> None:
    """Horizontal stacked bars, a value on every non-empty segment; a legend
    entry only for a series with something in it."""
    left = [0] * len(labels)
    ys = list(range(len(labels)))
    for name, values in series.items():
        if not any(values):
            continue
        bars = ax.barh(ys, values, left=left, color=colors.get(name), label=name)
        ax.bar_label(bars, labels=[f"{v:,}" if v else "" for v in values], label_type="center", fontsize=8)
        left = [a + b for a, b in zip(left, values)]
    ax.set_yticks(ys, labels)
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _disk_rows(summary: Summary) -> list[tuple[str, str, int]]:
    """``(kind, name, disk bytes)`` per store (a queue once, not per reader),
    the largest first."""
    seen: dict[tuple[str, str], int] = {}
    for r in summary.rows:
        if r.get("disk_bytes") is not None:
            seen[(r["kind"], r["name"])] = r["disk_bytes"]
    return sorted(((k, n, b) for (k, n), b in seen.items()), key=lambda x: -x[2])


def draw_chart(summary: Summary, path: str) -> str:
    """The PNG: one panel per question a user asks of the stores, the most
    pressing first.

    * queues: which reader is falling behind (backlog in items, with its bytes
      and how long the oldest item has waited; the reader most behind in red);
    * disk: how much each store takes on disk (every kind, the largest first);
    * append logs: how each log grew over time (records held);
    * stream journals: how did the streams end (complete / aborted / open);
    * event journals: how are events spread over persistence ids;
    * page stores: how much of the file is in use (pages used / free);
    * key-value stores: keys and bytes per store.

    Values are written on the bars, axes carry their units, series with
    nothing in them get no legend entry.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    from engine.clireport import human_bytes, human_duration_ns

    now = dt.datetime.now(dt.UTC)
    panels: list[tuple[float, Callable[[Any], None]]] = []  # (height in inches, draw)
    queues = summary.of_kind("queue")
    if queues:
        def queue_panel(ax: Any) -> None:
            labels = [f"{r['name']}: {r['detail']}" for r in queues]
            backlog = [r["backlog"] or 0 for r in queues]
            worst = max(range(len(queues)), key=lambda k: backlog[k])
            colors = ["tab:red" if k == worst and backlog[k] else "tab:blue" for k in range(len(queues))]
            bars = ax.barh(range(len(queues)), backlog, color=colors)
            notes = []
            for r, n in zip(queues, backlog, strict=True):
                waited = (f", oldest waited {human_duration_ns(int((now - r['oldest']).total_seconds() * 1e9))}"
                          if r["oldest"] is not None else "")
                notes.append(f"{n:,} items, {human_bytes(r['bytes'] or 0)}{waited}" if n else "caught up")
            ax.bar_label(bars, labels=notes, padding=3, fontsize=8)
            ax.set_yticks(range(len(queues)), labels)
            ax.invert_yaxis()
            ax.set_xlabel("backlog (items not yet confirmed)")
            ax.set_title(f"Queues: who is falling behind (most: {labels[worst]})", loc="left")
            ax.margins(x=0.45)
        panels.append((0.8 + 0.45 * len(queues), queue_panel))
    stores = _disk_rows(summary)
    if stores:
        def disk_panel(ax: Any) -> None:
            kinds = sorted({kind for kind, _, _ in stores})
            palette = dict(zip(kinds, ["tab:blue", "tab:green", "tab:orange", "tab:purple", "tab:olive",
                                       "tab:cyan", "tab:brown"], strict=False))
            bars = ax.barh(range(len(stores)), [b for _, _, b in stores], color=[palette[k] for k, _, _ in stores])
            ax.bar_label(bars, labels=[human_bytes(b) for _, _, b in stores], padding=3, fontsize=8)
            ax.set_yticks(range(len(stores)), [f"{name} ({kind})" for kind, name, _ in stores])
            ax.invert_yaxis()
            ax.set_xlabel("bytes on disk")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: human_bytes(int(x))))
            ax.set_title("Disk: how much each store takes", loc="left")
            ax.margins(x=0.15)
        panels.append((0.8 + 0.4 * len(stores), disk_panel))
    logs = summary.of_kind("log")
    if logs:
        def log_panel(ax: Any) -> None:
            grown = {name: pts for name, pts in summary.log_growth.items() if pts}
            if grown:
                for name, pts in sorted(grown.items()):
                    ax.plot([t for t, _ in pts], [v for _, v in pts], marker=".", label=name)
                ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M\n%m-%d"))
                ax.set_xlabel("time (UTC)")
                ax.set_ylabel("records held")
                ax.set_ylim(bottom=0)
                ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            else:  # no timeline (chart detail failed): the records per log
                bars = ax.barh(range(len(logs)), [r["records"] or 0 for r in logs], color="tab:green")
                _bar_labels(ax, bars)
                ax.set_yticks(range(len(logs)), [r["name"] for r in logs])
                ax.set_xlabel("records")
                ax.margins(x=0.12)
            ax.set_title("Append logs: how each grew", loc="left")
        panels.append((2.6, log_panel))
    streams = summary.of_kind("streams")
    if streams:
        def stream_panel(ax: Any) -> None:
            _stacked(ax, [r["name"] for r in streams],
                     {k: [r[k] or 0 for r in streams] for k in ("complete", "aborted", "open")},
                     {"complete": "tab:green", "aborted": "tab:red", "open": "tab:gray"})
            ax.set_xlabel("streams")
            ax.set_title("Stream journals: how the streams ended", loc="left")
        panels.append((0.9 + 0.45 * len(streams), stream_panel))
    events = summary.of_kind("events")
    if events:
        def events_panel(ax: Any) -> None:
            dists = {name: d for name, d in summary.events_per_id.items() if d}
            if dists:
                width = 0.8 / len(dists)
                for k, (name, dist) in enumerate(sorted(dists.items())):
                    xs = sorted(dist)
                    bars = ax.bar([x + (k - (len(dists) - 1) / 2) * width for x in xs], [dist[x] for x in xs],
                                  width=width, label=f"{name} ({sum(dist.values()):,} ids)")
                    ax.bar_label(bars, fontsize=7, padding=2)
                ax.set_xlabel("events held by one persistence id")
                ax.set_ylabel("persistence ids")
                ax.yaxis.set_major_locator(MaxNLocator(integer=True))
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
                ax.margins(y=0.15)
            else:
                bars = ax.barh(range(len(events)), [r["events"] or 0 for r in events], color="tab:purple")
                _bar_labels(ax, bars)
                ax.set_yticks(range(len(events)), [f"{r['name']} ({r['ids']:,} ids)" for r in events])
                ax.set_xlabel("events")
                ax.margins(x=0.12)
            ax.set_title("Event journals: events per persistence id", loc="left")
        panels.append((2.6, events_panel))
    pages = summary.of_kind("pages")
    if pages:
        def pages_panel(ax: Any) -> None:
            _stacked(ax, [r["name"] for r in pages],
                     {"in use": [(r["pages"] or 0) - (r["free_pages"] or 0) for r in pages],
                      "free": [r["free_pages"] or 0 for r in pages]},
                     {"in use": "tab:blue", "free": "tab:olive"})
            ax.set_xlabel("pages")
            ax.set_title("Page stores: pages in use and free", loc="left")
        panels.append((0.9 + 0.45 * len(pages), pages_panel))
    kv = summary.of_kind("kv")
    if kv:
        def kv_panel(ax: Any) -> None:
            bars = ax.barh(range(len(kv)), [r["keys"] or 0 for r in kv], color="tab:cyan")
            ax.bar_label(bars, labels=[f"{r['keys'] or 0:,} keys in {r['trees'] or 0} trees, "
                                       f"{human_bytes(r['bytes'] or 0)} of keys and values" for r in kv],
                         padding=3, fontsize=8)
            ax.set_yticks(range(len(kv)), [r["name"] for r in kv])
            ax.invert_yaxis()
            ax.set_xlabel("keys")
            ax.set_title("Key-value stores: keys", loc="left")
            ax.margins(x=0.5)
        panels.append((0.9 + 0.45 * len(kv), kv_panel))
    heights = [h + 0.6 for h, _ in panels] or [2.0]  # + room for each panel's title and axis label
    fig, axes = plt.subplots(len(heights), 1, figsize=(9, 0.4 + sum(heights)), squeeze=False,
                             layout="constrained", gridspec_kw={"height_ratios": heights})
    for ax, (_, panel) in zip(axes[:, 0], panels):
        panel(ax)
        ax.grid(alpha=0.3)
        ax.set_axisbelow(True)
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no stores found", ha="center", va="center")
        axes[0, 0].set_axis_off()
    stamp = now.strftime("%Y-%m-%d %H:%M UTC")
    fig.suptitle(f"engine pipeline summary ({stamp})", fontweight="bold")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def print_summary(summary: Summary, console: Any, err_console: Any) -> None:
    """The summary as rich tables, one per kind of store; the stores that could
    not be read on ``err_console`` (standard error), one line each."""
    from rich.table import Table

    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.1f}"
        if isinstance(v, int):
            return f"{v:,}"
        if isinstance(v, dt.datetime):
            return _utc(v).strftime("%Y-%m-%d %H:%M:%S UTC")
        return str(v)

    layouts = [
        ("log", "Append logs", ["name", "records", "bytes", "first_time", "last_time", "span_seconds", "per_minute"]),
        ("queue", "Queues", ["name", "detail", "backlog", "bytes", "oldest"]),
        ("streams", "Stream journals", ["name", "complete", "aborted", "open", "bytes"]),
        ("events", "Event journals", ["name", "ids", "events", "bytes"]),
        ("pages", "Page stores", ["name", "pages", "free_pages", "bytes"]),
        ("kv", "Key-value stores", ["name", "trees", "keys", "bytes"]),
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
        err_console.print(f"could not read {problem}", style="red", markup=False, highlight=False)
