"""The server's metrics in Prometheus' text exposition format, through
``prometheus_client`` (``engine queue serve DIR --metrics-port N``).

What is exported is the server's: connections, requests by command, error
replies by kind, items stored and gets that found an item or none, bytes read
and written, and per queue name the reads open on connections and the gets
waiting.  The queues' own figures (backlogs, disk) are the stores' metrics
(:mod:`engine.metrics`, a separate collector): a process may register both in
one registry.

Nothing is counted twice: the collector reads the server's own counters (plain
integers it keeps for Kestrel's ``stats``) when Prometheus scrapes, so a request
costs the server no metrics work.  The HTTP endpoint is ``prometheus_client``'s
own server on a thread of its own, bound to loopback unless told otherwise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "engine_kestrel"


@dataclass(frozen=True)
class Snapshot:
    """The server's figures at one instant (copied on the scrape's thread)."""

    start_time: float
    connections: int
    counters: dict[str, int]
    requests: dict[str, int]
    errors: dict[str, int]
    #: (queue, reader, reads open on connections, gets waiting) per name in use.
    readers: list[tuple[str, str, int, int]] = field(default_factory=list)


class KestrelCollector(Collector):
    """A ``prometheus_client`` collector over a server's :class:`Snapshot`."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        s = self._snapshot()
        c = s.counters
        yield _gauge("start_time_seconds", "When the server started (seconds since the epoch).", s.start_time)
        yield _gauge("connections", "Clients connected now.", s.connections)
        yield _counter("connections", "Connections accepted.", c["total_connections"])
        yield _counter("connections_refused", "Connections refused: over --max-connections.",
                       c["refused_connections"])
        requests = CounterMetricFamily(f"{PREFIX}_requests", "Requests, by command (unknown: not a command).",
                                       labels=["command"])
        for command, count in sorted(s.requests.items()):
            requests.add_metric([command], count)
        yield requests
        errors = CounterMetricFamily(f"{PREFIX}_errors", "Error replies, by kind: ERROR (not understood or not "
                                     "allowed now), CLIENT_ERROR (a bad request), SERVER_ERROR (the server or "
                                     "a queue failed).", labels=["kind"])
        for kind, count in sorted(s.errors.items()):
            errors.add_metric([kind], count)
        yield errors
        yield _counter("items_stored", "Items stored by set (STORED).", c["total_items"])
        gets = CounterMetricFamily(f"{PREFIX}_gets", "Gets and monitor reads that found an item (hit) or none "
                                   "(miss).", labels=["result"])
        gets.add_metric(["hit"], c["get_hits"])
        gets.add_metric(["miss"], c["get_misses"])
        yield gets
        yield _counter("read_bytes", "Bytes read from clients.", c["bytes_read"])
        yield _counter("written_bytes", "Bytes written to clients.", c["bytes_written"])
        held = GaugeMetricFamily(f"{PREFIX}_open_reads", "Reads open on connections (/open, monitor), per queue "
                                 "and reader (\"\": the default reader).", labels=["queue", "reader"])
        waiting = GaugeMetricFamily(f"{PREFIX}_waiting_gets", "Gets waiting for an item (/t=, monitor), per queue "
                                    "and reader.", labels=["queue", "reader"])
        for queue, reader, open_reads, waiters in s.readers:
            held.add_metric([queue, reader], open_reads)
            waiting.add_metric([queue, reader], waiters)
        yield held
        yield waiting


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", doc, value=value)


class MetricsEndpoint:
    """``/metrics`` over HTTP for one collector, on ``host``:``port`` (0: a free
    port; :attr:`address` says which), served by ``prometheus_client``'s server."""

    def __init__(self, collector: Collector, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self._httpd: WSGIServer
        self._thread: threading.Thread
        self._httpd, self._thread = start_http_server(port, addr=host, registry=self.registry)
        host_bound, port_bound = self._httpd.server_address[:2]
        #: The address and port it listens on (``port`` 0 asked for any free one).
        self.address = (str(host_bound), int(port_bound))

    def close(self) -> None:
        """Stop serving (blocks for up to half a second: the server's poll)."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)


def wall_time_of(monotonic_start: float) -> float:
    """A ``time.monotonic()`` instant as seconds since the epoch."""
    return time.time() - (time.monotonic() - monotonic_start)
