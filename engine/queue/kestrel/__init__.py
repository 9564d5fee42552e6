"""A Kestrel-compatible server for engine's queues (``engine queue serve DIR``).

Kestrel 2's memcache text protocol (``set``, ``get`` with ``/t=``, ``/open``,
``/close``, ``/abort``, ``/peek``, fanout readers ``<queue>+<reader>``,
``monitor``, ``confirm``, ``delete``, the flushes, ``stats``, ``dump_stats``,
``status``, ``version``, ``reload``, ``shutdown``) over every queue of a
directory, on asyncio, with Prometheus metrics on request.  See
docs/guide/server.md.
"""

from __future__ import annotations

from engine.queue.kestrel.server import KestrelServer, RunningServer, ServerOptions, serve, serve_in_thread

__all__ = ["KestrelServer", "RunningServer", "ServerOptions", "serve", "serve_in_thread"]
