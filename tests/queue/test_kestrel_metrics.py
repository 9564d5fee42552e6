"""The server's Prometheus metrics, scraped from a live server over HTTP and
parsed with ``prometheus_client``'s own parser.  Servers bind 127.0.0.1 on free
ports; every request has a timeout; every server is stopped."""

from __future__ import annotations

import os
import signal
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kestrel_helpers import TIMEOUT, ask, client, raw, serving

from engine.queue.kestrel import serve_in_thread

parser = pytest.importorskip("prometheus_client.parser")
pytest.importorskip("pymemcache.client.base")


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """``/metrics`` parsed: family -> {labels: value}, each sample under its own
    name (``engine_kestrel_requests_total``...)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=TIMEOUT) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in parser.text_string_to_metric_families(text):
        assert family.documentation, family.name  # every metric says what it is
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_a_live_server_is_scraped_and_parsed(tmp_path: Path) -> None:
    with serve_in_thread(str(tmp_path), port=0, metrics_port=0) as server:
        assert server.server.metrics_address == ("127.0.0.1", server.metrics_port)  # loopback unless told
        assert server.metrics_port is not None
        c = client(server.host, server.port)
        for n in range(3):
            assert c.set("jobs", b"item %d" % n) is True
        assert c.get("jobs") == b"item 0"
        assert c.get("jobs/open") == b"item 1"
        assert c.get("empty") is None
        sock = raw(server.host, server.port)
        assert ask(sock, b"frobnicate\r\n") == b"ERROR\r\n"
        assert ask(sock, b"get ../x\r\n").startswith(b"CLIENT_ERROR")
        assert ask(sock, b"get jobs/t=soon\r\n").startswith(b"CLIENT_ERROR")
        got = scrape(server.metrics_port)
        requests = got["engine_kestrel_requests_total"]
        assert requests[(("command", "set"),)] == 3
        assert requests[(("command", "get"),)] == 5
        assert requests[(("command", "unknown"),)] == 1
        assert requests[(("command", "delete"),)] == 0  # every command is there from the start
        errors = got["engine_kestrel_errors_total"]
        assert (errors[(("kind", "ERROR"),)], errors[(("kind", "CLIENT_ERROR"),)]) == (1, 2)
        assert errors[(("kind", "SERVER_ERROR"),)] == 0
        assert got["engine_kestrel_connections"][()] == 2
        assert got["engine_kestrel_connections_total"][()] == 2
        assert got["engine_kestrel_items_stored_total"][()] == 3
        gets = got["engine_kestrel_gets_total"]
        assert (gets[(("result", "hit"),)], gets[(("result", "miss"),)]) == (2, 1)
        assert got["engine_kestrel_open_reads"][(("queue", "jobs"), ("reader", ""))] == 1
        assert got["engine_kestrel_waiting_gets"][(("queue", "jobs"), ("reader", ""))] == 0
        assert got["engine_kestrel_read_bytes_total"][()] > 0 and got["engine_kestrel_written_bytes_total"][()] > 0
        sock.close()
        c.close()
        port = server.metrics_port
    with pytest.raises(urllib.error.URLError):  # stopped with the server
        scrape(port)


def test_connections_over_the_limit_are_counted(tmp_path: Path) -> None:
    with serve_in_thread(str(tmp_path), port=0, metrics_port=0, max_connections=1) as server:
        assert server.metrics_port is not None
        first = raw(server.host, server.port)
        assert ask(first, b"version\r\n").startswith(b"VERSION ")
        second = raw(server.host, server.port)
        assert ask(second, b"version\r\n").startswith(b"SERVER_ERROR too many connections")
        got = scrape(server.metrics_port)
        assert got["engine_kestrel_connections_refused_total"][()] == 1
        assert got["engine_kestrel_connections"][()] == 1
        first.close()
        second.close()


def test_engine_queue_serve_metrics_port(tmp_path: Path) -> None:
    """``engine queue serve DIR --metrics-port 0``: the port it picked is in its
    ``--json`` line; SIGTERM stops both."""
    with serving(tmp_path, "--metrics-port", "0") as (proc, info):
        assert info["metrics_host"] == "127.0.0.1" and isinstance(info["metrics_port"], int)
        c = client("127.0.0.1", info["port"])
        assert c.set("jobs", b"x") is True
        c.close()
        got = scrape(info["metrics_port"])
        assert got["engine_kestrel_requests_total"][(("command", "set"),)] == 1
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(2 * TIMEOUT) == 0
    with serving(tmp_path) as (_, info):
        assert info["metrics_port"] is None and info["metrics_host"] is None
