"""``engine queue serve DIR``: the Kestrel-compatible server, until SIGINT/SIGTERM.

Once it listens it prints one line (``--json``: one JSON document with the keys
``directory``, ``host``, ``port``, ``sync``, ``max_item_size_bytes``,
``max_line_bytes``, ``max_connections``, ``max_open_reads``, ``threads``,
``metrics_host`` and ``metrics_port``, None without ``--metrics-port``), then
serves until Ctrl-C, SIGTERM, or (``--allow-shutdown``) a client's
``shutdown``; it then closes its queues cleanly (readers checkpointed, locks
released) and exits 0.  A wrong argument (a port out of range, a host that is
not this machine's) is one line on stderr and exit status 2, and creates
nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from engine.clireport import add_json_option, parse_duration_ns, print_json
from engine.errors import ConfigError
from engine.queue.kestrel.server import KestrelServer, ServerOptions, serve


def _sync(text: str) -> Any:
    """``--sync``: "always", "never", or a period (seconds, or ``100ms``, ``1s``)."""
    if text in ("always", "never"):
        return text
    try:
        return parse_duration_ns(text, "--sync") / 1e9
    except (ConfigError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or 'always', 'never')") from None


def _positive(option: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option}: {text!r} is not an integer") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{option}: must be positive, not {value}")
        return value

    return parse


def _port(option: str, text: str | None) -> int | None:
    """A TCP port argument: 0 (any free port) to 65535; checked here, not by
    argparse, so that a wrong one is one line (``engine queue: error: ...``)."""
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{option} {text!r} is not a port number (0 to 65535)") from None
    if not 0 <= value <= 65535:
        raise ConfigError(f"{option} {value} is out of range: a TCP port is 0 to 65535 (0: any free port)")
    return value


def _cmd_serve(args: argparse.Namespace) -> int:
    port = _port("--port", args.port)
    assert port is not None
    options = ServerOptions(
        host=args.host,
        port=port,
        sync=args.sync,
        max_item_size=args.max_item_size,
        max_line=args.max_line,
        max_connections=args.max_connections,
        max_open_reads=args.max_open_reads,
        threads=args.threads,
        allow_shutdown=args.allow_shutdown,
        metrics_port=_port("--metrics-port", args.metrics_port),
        metrics_host=args.metrics_host,
    )

    def ready(server: KestrelServer) -> None:
        sync = options.sync if isinstance(options.sync, str) else f"every {options.sync:g} s"
        if args.json:
            print_json({
                "directory": args.directory,
                "host": options.host,
                "port": server.port,
                "sync": options.sync,
                "max_item_size_bytes": options.max_item_size,
                "max_line_bytes": options.max_line,
                "max_connections": options.max_connections,
                "max_open_reads": options.max_open_reads,
                "threads": options.threads,
                "metrics_host": None if server.metrics_address is None else server.metrics_address[0],
                "metrics_port": None if server.metrics_address is None else server.metrics_address[1],
            })
        else:
            metrics = ""
            if server.metrics_address is not None:
                metrics = "; metrics on http://{}:{}/metrics".format(*server.metrics_address)
            print(
                f"engine queue serve: queues of {args.directory} on {options.host}:{server.port} "
                f"(sync {sync}){metrics}; Ctrl-C stops",
            )
        sys.stdout.flush()

    asyncio.run(serve(args.directory, options, ready=ready))
    return 0


def register_serve(sub: Any) -> None:
    """Add ``engine queue serve`` to ``engine queue``'s sub-commands."""
    defaults = ServerOptions()
    p = sub.add_parser("serve", help="serve every queue of DIR over Kestrel's memcache protocol (until Ctrl-C)")
    p.add_argument("directory", metavar="DIR", help="the directory holding the queues (created if missing)")
    p.add_argument("--host", default=defaults.host, metavar="HOST",
                   help=f"the address to listen on (default {defaults.host}: this machine only)")
    p.add_argument("--port", default=str(defaults.port), metavar="PORT",
                   help=f"the TCP port (default {defaults.port}, Kestrel's; 0: any free port)")
    p.add_argument("--sync", type=_sync, default=defaults.sync, metavar="MODE",
                   help="the queues' sync mode: 'always' (STORED once fsynced; default), a period in "
                        "seconds or with a unit (1s, 200ms: fsync in the background), or 'never'")
    p.add_argument("--max-item-size", type=_positive("--max-item-size"), default=defaults.max_item_size,
                   metavar="BYTES", help=f"largest item a set may carry (default {defaults.max_item_size})")
    p.add_argument("--max-line", type=_positive("--max-line"), default=defaults.max_line, metavar="BYTES",
                   help=f"longest request line (default {defaults.max_line})")
    p.add_argument("--max-connections", type=_positive("--max-connections"), default=defaults.max_connections,
                   metavar="COUNT", help=f"clients connected at once (default {defaults.max_connections})")
    p.add_argument("--max-open-reads", type=_positive("--max-open-reads"), default=defaults.max_open_reads,
                   metavar="COUNT", help="reads a connection may hold open per queue (get/open, monitor; "
                   f"Kestrel's maxOpenTransactions; default {defaults.max_open_reads})")
    p.add_argument("--threads", type=_positive("--threads"), default=defaults.threads, metavar="COUNT",
                   help=f"threads for blocking queue calls: opens, flush, delete, stats (default {defaults.threads})")
    p.add_argument("--allow-shutdown", action="store_true",
                   help="accept the 'shutdown' command (off by default: any client could stop the server)")
    p.add_argument("--metrics-port", default=None, metavar="PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port, printed)")
    p.add_argument("--metrics-host", default=defaults.metrics_host, metavar="HOST",
                   help=f"the address of the metrics endpoint (default {defaults.metrics_host}: this machine only)")
    add_json_option(p)
    p.set_defaults(func=_cmd_serve)
