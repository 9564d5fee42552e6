"""``engine pipeline``, ``engine demo`` and ``engine spark cleanup``: Spark on the command line."""

from __future__ import annotations

import argparse
import errno
import os
from typing import Any

from rich.console import Console

from engine.clireport import add_json_option, print_json
from engine.terminal import terminal_console

console = terminal_console()
err_console = terminal_console(stderr=True)


def _one_line(command: str, exc: Exception, log_path: str) -> int:
    """Spark's errors carry long Java and Python stack traces: one line, and where the rest is."""
    from engine.spark.pipeline import first_line

    err_console.print(f"engine {command}: error: {first_line(exc)}", markup=False, highlight=False)
    err_console.print(f"(the whole trace: run again with --verbose; Spark's log: {log_path})",
                      markup=False, highlight=False)
    return 1


def _cmd_pipeline(args: argparse.Namespace) -> int:
    from engine.errors import EngineError
    from engine.fs import make_dirs, no_such, resolve
    from engine.spark.demo import run_spark_phase, start_spark
    from engine.spark.pipeline import print_summary

    # Absolute on the driver: executors elsewhere resolve paths from their own directory.
    data_dir, out_dir = os.path.abspath(args.data_dir), os.path.abspath(args.out)
    # With --json, standard output carries only the JSON document: progress goes to stderr.
    # The progress is a spinner: only a terminal shows it (piped, it left blank lines
    # above the tables).
    progress = err_console if args.json else console
    if args.quiet or not progress.is_terminal:
        progress = Console(quiet=True)
    if not os.path.isdir(data_dir):
        raise no_such(resolve(None), data_dir, "data directory") if not os.path.exists(data_dir) else \
            NotADirectoryError(errno.ENOTDIR, "not a directory", data_dir)
    make_dirs(resolve(None), out_dir)
    log_path = os.path.join(out_dir, "spark.log")
    try:
        spark = start_spark(args.master, "engine-pipeline", progress, log_path=None if args.verbose else log_path,
                            ship=args.ship_package)
        try:
            summary = run_spark_phase(spark, data_dir, out_dir, progress, chart=not args.no_chart)
        finally:
            spark.stop()
    except (EngineError, KeyboardInterrupt):
        raise  # engine's own errors are one line already
    except Exception as exc:
        if args.verbose:
            raise
        return _one_line("pipeline", exc, log_path)
    if args.json:
        print_json({"rows": summary.rows, "errors": summary.errors, "parquet": summary.parquet,
                    "chart": summary.chart})
        return 1 if summary.errors else 0
    print_summary(summary, console, err_console)
    console.print(f"summary: {summary.parquet}")
    if summary.chart:
        console.print(f"chart: {summary.chart}")
    return 1 if summary.errors else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from engine.errors import EngineError
    from engine.spark.demo import run_demo

    try:
        summary = run_demo(args.dir, args.out, args.master, args.scale, console, force=args.force,
                           verbose=args.verbose, quiet=args.quiet, err_console=err_console)
    except (EngineError, KeyboardInterrupt):
        raise  # engine's own errors are one line already
    except Exception as exc:
        if args.verbose:
            raise
        status = _one_line("demo", exc, os.path.join(os.path.abspath(args.dir), "spark.log"))
        err_console.print(f"(running it again reuses {args.dir})", markup=False, highlight=False)
        return status
    return 1 if summary.errors else 0


def _cmd_spark_cleanup(args: argparse.Namespace) -> int:
    from engine.spark import queuesink
    from engine.spark.sink import cleanup

    for dataset in args.datasets:
        path = os.path.abspath(dataset)
        if path.endswith(queuesink.STAGE_SUFFIX):
            # An engine-queue sink's staging directory: committed jobs a crash
            # interrupted are finished into the queue, the others removed.
            settled = queuesink.cleanup(path)
            if args.json:
                print_json({"staging": dataset, "settled": settled})
            else:
                console.print(f"{dataset}: {len(settled)} staged job director{'y' if len(settled) == 1 else 'ies'}"
                              + (": " + ", ".join(settled) if settled else ""))
            continue
        removed = cleanup(path)
        if args.json:
            print_json({"dataset": dataset, "removed": removed})
            continue
        console.print(f"{dataset}: removed {len(removed)} unpublished job director{'y' if len(removed) == 1 else 'ies'}"
                      + (": " + ", ".join(removed) if removed else ""))
    return 0


def register(subparsers: Any) -> None:
    """Add ``pipeline``, ``demo`` and ``spark cleanup`` to the ``engine`` command.

    Placeholders name what they stand for in capitals (``DIR``, ``URL``,
    ``COUNT``); every option says its default.
    """
    p = subparsers.add_parser(
        "pipeline", help="summarise every store under a directory with Spark (Parquet, table, PNG)")
    p.add_argument("data_dir", metavar="DIR", help="the directory to search for stores (all levels below it)")
    p.add_argument("--out", required=True, metavar="OUT_DIR", help="where summary.parquet and summary.png go")
    p.add_argument("--master", default=None, metavar="URL",
                   help="Spark master (default local[*]; e.g. spark://host:7077)")
    p.add_argument("--ship-package", choices=("auto", "always", "never"), default=None, metavar="WHEN",
                   help="send the engine package to a cluster's executors: auto (default: only when they "
                   "cannot import it), always, never (fail at once when they cannot)")
    p.add_argument("--no-chart", action="store_true", help="skip the PNG chart")
    p.add_argument("--quiet", action="store_true", help="no progress display; print only the result")
    add_json_option(p)
    p.add_argument("--verbose", action="store_true",
                   help="show Spark's start-up output, log and stack traces (default: one line per error; "
                   "Spark's log in OUT_DIR/spark.log)")
    p.set_defaults(func=_cmd_pipeline)

    d = subparsers.add_parser(
        "demo", help="create realistic data in every format, then run the pipeline over it "
        "(needs Java 17+ and the [spark] extra)")
    d.add_argument("dir", nargs="?", default="engine-demo", metavar="DIR",
                   help="a new or empty directory, or one an unfinished run left (default ./engine-demo)")
    d.add_argument("--out", default=None, metavar="OUT_DIR", help="pipeline output (default DIR/out)")
    d.add_argument("--master", default=None, metavar="URL", help="Spark master (default local[*])")
    d.add_argument("--scale", type=int, default=10_000, metavar="COUNT",
                   help="about how many queue items to make; the other stores scale with it (default 10000)")
    d.add_argument("--quiet", action="store_true", help="no progress display; print only the result")
    d.add_argument("--force", action="store_true",
                   help="use DIR even if it is not empty: replace the demo's own entries in it "
                   "(queues, pages, streams, logs, events, out, spark.log), keep the rest")
    d.add_argument("--verbose", action="store_true",
                   help="show Spark's start-up output, log and stack traces (default: one line per error; "
                   "Spark's log in DIR/spark.log)")
    d.set_defaults(func=_cmd_demo)

    sp = subparsers.add_parser("spark", help="maintenance of what the engine-log and engine-queue Spark sinks write")
    spsub = sp.add_subparsers(dest="spark_command", required=True, metavar="COMMAND")
    c = spsub.add_parser("cleanup", help="remove the job directories no manifest lists (what a crashed "
                         "driver left); for a queue sink's DIR/<queue>.sink, finish the commits a crash "
                         "interrupted and remove the uncommitted jobs; run it when no job is writing")
    c.add_argument("datasets", nargs="+", metavar="DIR",
                   help="a dataset directory the engine-log sink wrote, or a queue's staging directory "
                   "(DIR/<queue>.sink) of the engine-queue sink")
    add_json_option(c)
    c.set_defaults(func=_cmd_spark_cleanup, command="spark cleanup")
