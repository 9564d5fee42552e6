"""A Kestrel-compatible server for engine's queues (``engine queue serve DIR``).

Kestrel's memcache text protocol (``set``, ``get`` with ``/t=``, ``/open``,
``/close``, ``/abort``, ``/peek``, fanout readers ``<queue>+<reader>``,
``delete``, ``flush``, ``flush_all``, ``stats``, ``version``) over every queue
of a directory, on asyncio.  See docs/guide/server.md.
"""

from __future__ import annotations

from engine.queue.kestrel.server import KestrelServer, RunningServer, ServerOptions, serve, serve_in_thread

__all__ = ["KestrelServer", "RunningServer", "ServerOptions", "serve", "serve_in_thread"]
