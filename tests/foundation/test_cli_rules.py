"""The command line's shared rules (docs/guide/conventions.md, "Command line"),
checked over the whole ``engine`` parser so a new command cannot miss them:

* every argument and option says what it is for (``help=``);
* placeholders are upper-case nouns (``DIR``, ``PATH``, ``SECONDS``);
* every command that prints a report or records takes ``--json``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from engine.cli import build_parser

#: Commands that print no report: they change a store, serve, or run a program.
#: Each with why; a command missing from here must take --json.
NO_REPORT = {
    "streams serve": "a server: runs until stopped",
    "demo": "creates data and runs the pipeline; its report is the pipeline's PNG and Parquet",
    "metrics": "a server (/metrics); --once prints Prometheus' own text format",
    "dashboard": "a web server: runs until stopped",
}

#: ``DIR``, ``SECONDS``, ``-- PROG ARGS`` (the words of a command line), ``PATH ...``.
_PLACEHOLDER = re.compile(r"^(-- )?[A-Z][A-Z0-9_]*( [A-Z][A-Z0-9_]*)*( \.\.\.)?$")


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix.strip(), parser
        return
    for action in subs:
        for name, sub in action.choices.items():
            yield from _commands(sub, f"{prefix} {name}")


def _arguments(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        yield action


def test_every_argument_has_help() -> None:
    missing = [
        f"engine {name}: {action.option_strings or action.dest}"
        for name, parser in _commands(build_parser())
        for action in _arguments(parser)
        if not (action.help or "").strip()
    ]
    assert not missing, "arguments without help text:\n" + "\n".join(missing)


def test_placeholders_are_upper_case_nouns() -> None:
    bad = []
    for name, parser in _commands(build_parser()):
        for action in _arguments(parser):
            if action.nargs == 0 or (action.choices is not None and action.metavar is None):
                continue  # a flag, or a choice shown as {a,b,c}
            metavar = action.metavar if action.metavar is not None else action.dest.upper()
            names = metavar if isinstance(metavar, tuple) else (metavar,)
            if not all(_PLACEHOLDER.match(m) for m in names):
                bad.append(f"engine {name}: {action.option_strings or action.dest} shows {metavar!r}")
    assert not bad, "placeholders that are not upper-case nouns:\n" + "\n".join(bad)


def test_every_report_command_takes_json() -> None:
    commands = dict(_commands(build_parser()))
    unknown = sorted(set(NO_REPORT) - set(commands))
    assert not unknown, f"NO_REPORT names commands that do not exist: {unknown}"
    has_json = {name: any("--json" in a.option_strings for a in p._actions) for name, p in commands.items()}
    missing = [f"engine {name}" for name, json in has_json.items() if name not in NO_REPORT and not json]
    assert not missing, "commands that print a report without --json:\n" + "\n".join(missing)
    stale = [name for name in NO_REPORT if has_json[name]]
    assert not stale, f"NO_REPORT lists commands that take --json now: {stale}"
