"""``engine metrics``, ``engine top`` and ``engine dashboard``: what is happening
in a directory of stores (Prometheus, a terminal, a browser).

All three read the stores' files only (:func:`engine.metrics.scan`): no lock,
nothing written, safe beside running writers.  The servers bind to loopback
unless ``--host`` says otherwise, and stop on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import threading
from types import FrameType
from typing import Any

from engine.clireport import add_json_option, parse_duration_ns, parse_port, print_json
from engine.errors import ConfigError
from engine.fs import default_fs, no_such
from engine.metrics import LOOPBACK
from engine.terminal import terminal_console

err_console = terminal_console(stderr=True)


def _directory(path: str) -> str:
    """``path`` if it is a directory; the OS's error (exit 1) otherwise, before anything starts."""
    if not os.path.isdir(path):
        if os.path.exists(path):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        raise no_such(default_fs(), path, "directory")
    return path


def _need_port(args: argparse.Namespace) -> None:
    if args.port is None:
        raise ConfigError(f"--port PORT is needed to serve (engine {args.command} --help shows the usage)")


def _wait_for_stop() -> None:
    """Block until Ctrl-C or SIGTERM."""
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stop.wait(3600):
            pass
    except KeyboardInterrupt:
        pass


def _cmd_metrics(args: argparse.Namespace) -> int:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from engine.metrics import DirectoryCollector, serve_metrics

    collector = DirectoryCollector(_directory(args.dir))
    if not args.once:
        _need_port(args)
    if args.once:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        print(generate_latest(registry).decode(), end="")
        return 0
    server = serve_metrics(collector, port=args.port, host=args.host)
    err_console.print(f"engine metrics: serving {args.dir} at {server.url} (Ctrl-C stops)")
    try:
        _wait_for_stop()
    finally:
        server.stop()
    return 0


def _cmd_top(args: argparse.Namespace) -> int:
    from engine.monitor.top import once, render, run_live
    from engine.monitor.track import Tracker

    tracker = Tracker(_directory(args.dir))
    if args.once:
        view = once(tracker, args.interval)
        if args.json:
            print_json(view)
        else:
            terminal_console().print(render(view))
        # For scripts: a store or directory it could not read is not success.
        return 1 if view["errors"] or any(s["error"] for s in view["stores"]) else 0
    if args.json:
        raise ConfigError("--json needs --once (the live view is for people)")
    try:
        run_live(tracker, terminal_console(), args.interval)
    except KeyboardInterrupt:
        pass
    return 0


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from engine.monitor.dashboard import DashboardServer
    from engine.monitor.track import Tracker

    _need_port(args)
    server = DashboardServer(Tracker(_directory(args.dir)), args.port, args.host, args.interval)
    server.start()
    err_console.print(f"engine dashboard: {args.dir} at {server.url} (read-only; Ctrl-C stops)")
    try:
        _wait_for_stop()
    finally:
        server.stop()
    return 0


def _interval(text: str) -> float:
    ns = parse_duration_ns(text, "--interval")
    if ns < 100_000_000:
        raise argparse.ArgumentTypeError(f"must be at least 0.1 seconds, got {text!r}")
    return ns / 1e9


def register(subparsers: Any) -> None:
    """Add ``engine metrics``, ``engine top`` and ``engine dashboard``."""

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("dir", metavar="DIR", help="the directory whose stores to show (all levels below it)")

    def serving(p: argparse.ArgumentParser, what: str) -> None:
        p.add_argument("--port", type=parse_port, default=None, metavar="PORT",
                       help=f"TCP port for the {what} (0: any free port, printed at start); needed to serve")
        p.add_argument("--host", default=LOOPBACK, metavar="HOST",
                       help=f"address to listen on (default {LOOPBACK}: this machine only; 0.0.0.0: every "
                       "interface, and the stores' names and sizes with them)")

    m = subparsers.add_parser("metrics", help="serve a directory's stores as Prometheus metrics (/metrics)")
    common(m)
    serving(m, "/metrics endpoint")
    m.add_argument("--once", action="store_true",
                   help="print the metrics once in Prometheus' text format and exit (no server)")
    m.set_defaults(func=_cmd_metrics)

    t = subparsers.add_parser("top", help="a live terminal view of a directory's stores: who falls behind, disk, rates")
    common(t)
    t.add_argument("--interval", type=_interval, default=2.0, metavar="SECONDS",
                   help="seconds between scans, or with a unit (500ms, 5s; default 2)")
    t.add_argument("--once", action="store_true",
                   help="scan twice, --interval apart, print the view once and exit (with --json: for scripts)")
    add_json_option(t)
    t.set_defaults(func=_cmd_top)

    d = subparsers.add_parser("dashboard", help="serve one read-only web page charting a directory's stores, live")
    common(d)
    serving(d, "web page")
    d.add_argument("--interval", type=_interval, default=2.0, metavar="SECONDS",
                   help="seconds between scans and page refreshes, or with a unit (500ms, 5s; default 2)")
    d.set_defaults(func=_cmd_dashboard)
