"""The ``engine`` command line.

Subcommands come from the stores: each ``engine.<store>.cli`` module has a
``register(subparsers)`` function.  This module adds the cross-format ones:
``inspect`` (what is this file?) and ``verify`` (run its self-check), which find
the format through :mod:`engine.detection` and hand its handler the file system.

Every store module is part of engine, so one that fails to import is an error
naming it (exit status 2), never a command quietly missing from ``--help``.  The
one optional part is the Spark pipeline: without the ``spark`` extra its commands
are still listed, ``--help`` says the extra is not installed, and using one says
so instead of failing inside Spark.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn

from rich.table import Table

import engine
from engine.clireport import add_json_option, print_json
from engine.detection import detect
from engine.errors import EngineError, UnknownFormatError
from engine.fs import default_fs
from engine.terminal import terminal_console

#: Store modules that add subcommands, in help order.
CLI_MODULES = (
    "engine.queue.cli",
    "engine.pages.cli",
    "engine.streams.cli",
    "engine.applog.cli",
    "engine.events.cli",
    "engine.kv.cli",
    "engine.monitor.cli",
    "engine.spark.cli",
)

#: CLI modules whose commands need an optional extra -> (extra, the modules it installs).
NEEDS_EXTRA: dict[str, tuple[str, tuple[str, ...]]] = {
    "engine.spark.cli": ("spark", ("pyspark", "pyarrow", "pandas", "matplotlib")),
}

console = terminal_console()
err_console = terminal_console(stderr=True)


class CliModuleImportError(ImportError):
    """A store's command-line module failed to import: engine itself is broken."""


def _missing(modules: Sequence[str]) -> list[str]:
    """Those of ``modules`` that cannot be imported here (not installed)."""
    missing = []
    for name in modules:
        if name in sys.modules:
            if sys.modules[name] is None:  # an import of it is refused
                missing.append(name)
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _extra_note(module_name: str) -> str | None:
    """Why the commands of ``module_name`` cannot run here, or ``None`` if they can."""
    if module_name not in NEEDS_EXTRA:
        return None
    extra, modules = NEEDS_EXTRA[module_name]
    missing = _missing(modules)
    if not missing:
        return None
    return (
        f"needs the optional {extra!r} extra, which is not installed here "
        f"(missing: {', '.join(missing)}); install it with: pip install 'engine[{extra}]'"
    )


def _cmd_inspect(args: argparse.Namespace) -> int:
    fs = default_fs()
    status = 0
    for path in args.paths:
        try:
            handler = detect(path, fs)
            summary = handler.stats(fs, path) if args.json else handler.summarize(fs, path)
        except EngineError as exc:
            err_console.print(f"engine inspect: {exc}")
            status = 1 if isinstance(exc, UnknownFormatError) else 2
            continue
        except OSError as exc:  # unreadable: one line, and on to the next path
            err_console.print(f"engine inspect: {_os_error_text(exc)}")
            status = max(status, 1)
            continue
        if args.json:
            print_json({"path": path, "format": handler.name, "description": handler.description,
                        "summary": summary})
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
    fs = default_fs()
    status = 0
    for path in args.paths:
        try:
            handler = detect(path, fs)
            notes = handler.verify(fs, path)
        except UnknownFormatError as exc:
            err_console.print(f"engine verify: {exc}")
            status = max(status, 1)
            continue
        except EngineError as exc:
            err_console.print(f"engine verify: {path}: FAILED: {exc}")
            if args.json:
                print_json({"path": path, "ok": False, "error": str(exc), "error_type": type(exc).__name__})
            status = 2
            continue
        except OSError as exc:  # unreadable: one line, and on to the next path
            err_console.print(f"engine verify: {_os_error_text(exc)}")
            status = max(status, 1)
            continue
        if args.json:
            print_json({"path": path, "format": handler.name, "ok": True, "notes": list(notes)})
            continue
        for note in notes:
            console.print(f"{path}: note: {note}")
        console.print(f"{path}: ok ({handler.name})")
    return status


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2
    (``engine queue get: error: argument --count: COUNT must be 1 or more, got 0;
    engine queue get --help shows the usage``), not argparse's usage block: the
    rule every ``engine`` error follows.  Sub-commands inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help shows the usage)\n")


def count_type(option: str, minimum: int = 1) -> Callable[[str], int]:
    """An argparse ``type`` for a COUNT: a whole number, ``minimum`` (1) or more;
    the error names ``option`` and what was typed."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        return value

    return parse


#: Placeholders of whole-number options and the least value each takes.
_AT_LEAST = {"COUNT": 1, "BYTES": 0, "SEQ": 0}


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(command words, parser)`` for ``parser`` and every sub-command's parser under it."""
    yield path, parser
    for action in parser._actions:  # (argparse has no public list of a parser's actions)
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}".strip())


def _settle_commands(parser: argparse.ArgumentParser) -> None:
    """The rules every sub-command shares, applied once over the whole parser:
    each command knows its full name (``args.command``: ``"streams serve"``, for
    its messages), every option whose placeholder is ``COUNT`` takes a whole
    number, 1 or more (``--count 0``, ``--limit -1``, ``--scale -5`` are
    argument errors, exit 2), and one whose placeholder is ``BYTES`` or ``SEQ``
    (a width, a page size, a sequence number) 0 or more (``--width -1`` showed
    all but the last byte, ``--to -1`` an empty replay)."""
    for path, sub in _walk(parser, ""):
        if not path:
            continue
        if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
            sub.set_defaults(command=path)
        for action in sub._actions:  # (argparse has no public list of a parser's actions)
            if action.metavar in _AT_LEAST and action.type is int:
                name = action.option_strings[-1] if action.option_strings else action.metavar
                action.type = count_type(name, _AT_LEAST[action.metavar])


def build_parser() -> argparse.ArgumentParser:
    """The ``engine`` parser with every store's subcommands.

    Raises :class:`CliModuleImportError` if a store's CLI module does not import.
    """
    parser = OneLineParser(
        prog="engine",
        description="engine: durable queues, page store, stream journals, append logs "
        "and event journals, with a Spark pipeline over them.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"engine {engine.__version__}",
                        help="print engine's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    inspect_p = sub.add_parser("inspect", help="recognise files of any engine format and summarise them")
    inspect_p.add_argument("paths", nargs="+", metavar="PATH", help="a store's file or directory (any format)")
    add_json_option(inspect_p)
    inspect_p.set_defaults(func=_cmd_inspect)

    verify_p = sub.add_parser("verify", help="run a store's self-check (non-zero exit on a problem)")
    verify_p.add_argument("paths", nargs="+", metavar="PATH", help="a store's file or directory (any format)")
    add_json_option(verify_p)
    verify_p.set_defaults(func=_cmd_verify)

    notes = []
    for module_name in CLI_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise CliModuleImportError(
                f"{module_name} failed to import ({type(exc).__name__}: {exc}); engine is broken "
                f"or half-installed (python -c 'import {module_name}' shows the traceback)",
                name=module_name,
            ) from exc
        before = set(sub.choices)
        module.register(sub)
        note = _extra_note(module_name)
        if note is not None:
            commands = ", ".join(sorted(set(sub.choices) - before))
            notes.append(f"{commands}: {note}")
    _settle_commands(parser)
    if notes:
        parser.epilog = "\n".join(textwrap.fill(n, 78, subsequent_indent="  ") for n in notes)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except CliModuleImportError as exc:
        err_console.print(f"engine: error: {exc}")
        return 2
    args = parser.parse_args(argv)
    note = _extra_note(args.func.__module__)
    if note is not None:
        err_console.print(f"engine {args.command}: {note}")
        return 2
    try:
        result = args.func(args)
    except EngineError as exc:
        err_console.print(f"engine {args.command}: error: {exc}")
        return 2
    except ImportError as exc:
        # A store's module that fails to import (a format handler, say) is engine's
        # own breakage: say which, loudly; never carry on as if the store did not exist.
        err_console.print(f"engine {args.command}: error: {exc}")
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        # Permission denied, a directory where a file belongs, a symbolic link loop,
        # a vanished file: the user's environment, not a bug: one line, exit 1.
        err_console.print(f"engine {args.command}: error: {_os_error_text(exc)}")
        return 1
    return int(result or 0)


def _os_error_text(exc: OSError) -> str:
    """``path: reason`` for an OSError, in the words the OS uses."""
    reason = exc.strerror or str(exc)
    reason = reason[:1].lower() + reason[1:]  # "permission denied", as the other messages
    if exc.filename is not None:
        target = f" -> {exc.filename2}" if exc.filename2 is not None else ""
        return f"{exc.filename}{target}: {reason}"
    return reason


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
