"""The ``engine`` command line.

Subcommands come from the stores: each ``engine.<store>.cli`` module has a
``register(subparsers)`` function.  This module adds the cross-format ones:
``inspect`` (what is this file?) and ``verify`` (run its self-check).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from engine.errors import EngineError
from engine.formats import UnknownFormatError, detect

#: Store modules that add subcommands, in help order.
CLI_MODULES = (
    "engine.queue.cli",
    "engine.pages.cli",
    "engine.streams.cli",
    "engine.applog.cli",
    "engine.events.cli",
    "engine.spark.cli",
)

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _cmd_inspect(args: argparse.Namespace) -> int:
    status = 0
    for path in args.paths:
        try:
            handler = detect(path)
            summary = handler.summarize(path)
        except EngineError as exc:
            err_console.print(f"engine inspect: {exc}")
            status = 1 if isinstance(exc, UnknownFormatError) else 2
            continue
        table = Table(title=f"{path} — {handler.description}", show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value")
        table.add_row("format", handler.name)
        for key, value in summary.items():
            table.add_row(str(key), str(value))
        console.print(table)
    return status


def _cmd_verify(args: argparse.Namespace) -> int:
    status = 0
    for path in args.paths:
        try:
            handler = detect(path)
            notes = handler.verify(path)
        except UnknownFormatError as exc:
            err_console.print(f"engine verify: {exc}")
            status = max(status, 1)
            continue
        except EngineError as exc:
            err_console.print(f"engine verify: {path}: FAILED: {exc}")
            status = 2
            continue
        for note in notes:
            console.print(f"{path}: note: {note}")
        console.print(f"{path}: ok ({handler.name})")
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="engine",
        description="engine: durable queues, page store, stream journals, append logs "
        "and event journals, with a Spark pipeline over them.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    inspect_p = sub.add_parser("inspect", help="recognise files of any engine format and summarise them")
    inspect_p.add_argument("paths", nargs="+", metavar="PATH")
    inspect_p.set_defaults(func=_cmd_inspect)

    verify_p = sub.add_parser("verify", help="run a store's self-check (non-zero exit on a problem)")
    verify_p.add_argument("paths", nargs="+", metavar="PATH")
    verify_p.set_defaults(func=_cmd_verify)

    for module_name in CLI_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # A store not built yet (or an optional extra, like Spark) adds nothing.
            if exc.name is not None and module_name.startswith(exc.name):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except EngineError as exc:
        err_console.print(f"engine {args.command}: error: {exc}")
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
