"""``engine pipeline`` and ``engine demo``: the Spark main job on the command line."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.console import Console

console = Console(highlight=False)


def _cmd_pipeline(args: argparse.Namespace) -> int:
    from engine.spark.pipeline import print_summary, run_pipeline
    from engine.spark.session import build_session

    if not os.path.isdir(args.data_dir):
        console.print(f"engine pipeline: {args.data_dir}: not a directory")
        return 2
    spark = build_session(args.master, "engine-pipeline", quiet=not args.verbose)
    try:
        summary = run_pipeline(spark, args.data_dir, args.out, chart=not args.no_chart)
    finally:
        spark.stop()
    print_summary(summary, console)
    console.print(f"summary: {summary.parquet}")
    if summary.chart:
        console.print(f"chart: {summary.chart}")
    return 1 if summary.errors else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from engine.spark.demo import run_demo

    run_demo(args.dir, args.out, args.master, args.scale, console)
    return 0


def register(subparsers: Any) -> None:
    """Add ``pipeline`` and ``demo`` to the ``engine`` command."""
    p = subparsers.add_parser(
        "pipeline", help="summarise every store under a directory with Spark (Parquet, table, PNG)")
    p.add_argument("data_dir", metavar="DATA_DIR")
    p.add_argument("--out", required=True, metavar="OUT_DIR", help="where summary.parquet and summary.png go")
    p.add_argument("--master", default=None, metavar="URL",
                   help="Spark master (default local[*]; e.g. spark://host:7077)")
    p.add_argument("--no-chart", action="store_true", help="skip the PNG chart")
    p.add_argument("--verbose", action="store_true", help="keep Spark's own log output")
    p.set_defaults(func=_cmd_pipeline)

    d = subparsers.add_parser(
        "demo", help="create realistic data in every format, then run the pipeline over it")
    d.add_argument("dir", nargs="?", default="engine-demo", metavar="DIR",
                   help="a new or empty directory (default ./engine-demo)")
    d.add_argument("--out", default=None, metavar="OUT_DIR", help="pipeline output (default DIR/out)")
    d.add_argument("--master", default=None, metavar="URL", help="Spark master (default local[*])")
    d.add_argument("--scale", type=int, default=10_000, help="about how many queue items to make (default 10000)")
    d.set_defaults(func=_cmd_demo)
