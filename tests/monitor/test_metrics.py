"""Metrics in Prometheus' exposition format: scraped from live servers over HTTP
and parsed with prometheus_client's own parser."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import engine
from engine.fs import timing
from engine.metrics import DirectoryCollector, LiveCollector, scan, serve_metrics
from engine.streams.client import Client
from tests.monitor.monitor_helpers import make_stores, start_server, stop


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by (name, sorted labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        return samples(answer.read().decode())


def test_engine_metrics_serves_every_store_of_a_directory(tmp_path: Path) -> None:
    make_stores(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc, url = start_server(["metrics", str(tmp_path), "--port", "0"], r"at (http://\S+/metrics)")
    try:
        assert url.startswith("http://127.0.0.1:")  # loopback unless told otherwise
        got = scrape(url)
    finally:
        stop(proc)
    reader = lambda r: (("queue", "jobs"), ("reader", r), ("store", "queues/jobs"))  # noqa: E731
    assert got[("engine_queue_backlog_items", reader("fast"))] == 0
    assert got[("engine_queue_backlog_items", reader("slow"))] == 25
    assert got[("engine_queue_backlog_items", reader("idle"))] == 30
    assert got[("engine_queue_backlog_bytes", reader("idle"))] == sum(len(b"job %d" % i) for i in range(30))
    assert got[("engine_queue_confirmed_total", reader("slow"))] == 5
    assert got[("engine_queue_oldest_item_age_seconds", reader("idle"))] >= 0
    assert got[("engine_queue_puts_total", (("queue", "jobs"), ("store", "queues/jobs")))] == 30
    for store, kind in (("queues/jobs", "queue"), ("logs/clicks", "log"), ("events", "events"),
                        ("pages.db", "pages"), ("uploads.jnl", "streams"), ("kv/app.kv", "kv")):
        labels = (("kind", kind), ("store", store))
        assert got[("engine_store_disk_bytes", labels)] > 0, store
        assert got[("engine_store_files", labels)] >= 1, store
        assert got[("engine_store_readable", labels)] == 1, store
    assert got[("engine_store_records", (("kind", "log"), ("store", "logs/clicks")))] == 50
    assert got[("engine_store_records", (("kind", "kv"), ("store", "kv/app.kv")))] == 2
    assert got[("engine_store_commits_total", (("kind", "kv"), ("store", "kv/app.kv")))] == 2
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # read-only: no file created


def test_a_damaged_store_is_unreadable_not_the_end_of_the_scrape(tmp_path: Path) -> None:
    make_stores(tmp_path)
    with open(tmp_path / "pages.db", "r+b") as f:
        f.seek(9)
        f.write(b"\xff\xff")  # the header's checksum no longer matches
    snap = scan(tmp_path)
    pages = next(s for s in snap.stores if s.kind == "pages")
    assert pages.error and pages.records is None
    assert all(s.error is None for s in snap.stores if s.kind != "pages")
    server = serve_metrics(DirectoryCollector(tmp_path), port=0)
    try:
        got = scrape(server.url)
    finally:
        server.stop()
    assert got[("engine_store_readable", (("kind", "pages"), ("store", "pages.db")))] == 0
    assert got[("engine_store_readable", (("kind", "log"), ("store", "logs/clicks")))] == 1


def test_metrics_port_must_be_a_port(tmp_path: Path) -> None:
    from engine.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["metrics", str(tmp_path), "--port", "99999"])
    assert exited.value.code == 2
    assert main(["metrics", str(tmp_path / "nosuch"), "--port", "0"]) == 1


def test_streams_serve_exposes_its_server_and_fsyncs(tmp_path: Path) -> None:
    sock = str(tmp_path / "journald.sock")
    proc, url = start_server(["streams", "serve", sock, str(tmp_path / "s.jnl"), "--size", "1M",
                              "--metrics-port", "0"], r"metrics at (http://\S+/metrics)")
    try:
        for n in range(3):
            Client.send(sock, f"upload-{n}", b"data" * 100)
        raw = socket.socket(socket.AF_UNIX)  # a client that gives up before naming a stream
        raw.connect(sock)
        raw.close()
        deadline = time.monotonic() + 30
        while True:
            got = scrape(url)
            committed = got.get(("engine_server_requests_total", (("outcome", "committed"), ("server", sock))))
            if committed == 3 and got.get(("engine_server_connections", (("server", sock),))) == 0:
                break  # every client served, the one that gave up included
            assert time.monotonic() < deadline, got
            time.sleep(0.1)
        assert ("engine_server_errors_total", (("error", "rejected"), ("server", sock))) in got
        fsyncs = got[("engine_fsync_seconds_count", (("directory", str(tmp_path)),))]
        assert fsyncs >= 3  # every committed stream is synced
        assert got[("engine_fsync_seconds_bucket", (("directory", str(tmp_path)), ("le", "+Inf")))] == fsyncs
    finally:
        stop(proc)


def test_live_collector_reads_queues_and_drops_closed_ones(tmp_path: Path) -> None:
    live = LiveCollector()
    q = engine.Queue.open(tmp_path, "jobs", sync="always")
    live.watch_queue("jobs", q)
    live.watch_store("jobs", q)
    reader = q.reader("worker")
    q.put(b"x")
    q.put(b"y")
    item = reader.get(0)
    assert item is not None
    server = serve_metrics(live, port=0)
    try:
        got = scrape(server.url)
        assert got[("engine_queue_open_reads", (("queue", "jobs"), ("reader", "worker"), ("store", "jobs")))] == 1
        assert any(name == "engine_fsync_seconds_count" and value >= 1 for (name, _), value in got.items())
        q.close()
        got = scrape(server.url)
        assert not any(name == "engine_queue_open_reads" for name, _ in got)
    finally:
        server.stop()
        q.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url, timeout=5)


def test_fsync_histogram_counts_every_sync(tmp_path: Path) -> None:
    before = timing.snapshot().get(str(tmp_path / "log"))
    with engine.AppendLog.open(tmp_path / "log", sync="always") as log:
        for i in range(5):
            log.append(b"%d" % i)
    after = timing.snapshot()[str(tmp_path / "log")]
    assert after.count - (before.count if before else 0) >= 5
    assert sum(after.buckets) == after.count and after.total_seconds > 0
