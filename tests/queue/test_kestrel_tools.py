"""``engine queue serve`` with libmemcached's command-line tools (Debian's
``libmemcached-tools``): memcping, memcstat, memccp, memccat, memcdump, memcrm
and memcflush against a real server process on loopback (stopped by its PID).

A test whose tool is missing is skipped with the reason, unless
``ENGINE_REQUIRE_TOOLS=1`` (then it fails): CI installs the package and sets it.
Every tool run is bounded by a timeout."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kestrel_helpers import TIMEOUT, client, serving

pytest.importorskip("pymemcache.client.base")


@pytest.fixture
def port(tmp_path: Path) -> Iterator[int]:
    with serving(tmp_path / "queues") as (_, info):
        yield int(info["port"])


def run(name: str, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    """libmemcached's ``name`` (found by :func:`kestrel_helpers.tool`) against the server."""
    from kestrel_helpers import tool

    return subprocess.run([tool(name), f"--servers=127.0.0.1:{port}", *args], capture_output=True, text=True,
                          timeout=TIMEOUT)


def test_memcping_and_memcstat(port: int) -> None:
    """They read the VERSION line first: ``VERSION engine-0.1.0`` made both fail
    with "strtol() failed to parse major version"."""
    c = client("127.0.0.1", port)
    assert c.get("jobs") is None and c.get("jobs+audit") is None
    c.set("jobs", b"12345")
    c.close()
    pinged = run("memcping", port)
    assert pinged.returncode == 0, pinged.stderr
    shown = run("memcstat", port)
    assert shown.returncode == 0, shown.stderr
    lines = dict(line.strip().split(": ", 1) for line in shown.stdout.splitlines() if ": " in line)
    assert lines["version"].startswith("2.4.7+engine-")
    assert (lines["queue_jobs_items"], lines["queue_jobs_bytes"], lines["queue_jobs+audit_items"]) == ("1", "5", "1")
    assert lines["queue_jobs_children"] == "jobs+audit"


def test_memccp_puts_files_and_memccat_takes_them(port: int, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.write_bytes(b"resize photo 1")
    for _ in range(2):
        copied = run("memccp", port, str(jobs))  # set <file name> 0 0 <size>
        assert copied.returncode == 0, copied.stderr
    peeked = run("memccat", port, "jobs/peek")
    assert (peeked.returncode, peeked.stdout) == (0, "resize photo 1\n"), peeked.stderr
    for _ in range(2):
        taken = run("memccat", port, "jobs")  # a plain get: taken
        assert (taken.returncode, taken.stdout) == (0, "resize photo 1\n"), taken.stderr
    empty = run("memccat", port, "jobs")
    assert empty.returncode == 1 and empty.stdout == ""  # END: "not found"


def test_memcdump_lists_the_queues_and_fanout_readers(port: int) -> None:
    c = client("127.0.0.1", port)
    for name in ("orders", "orders+audit", "jobs"):
        assert c.get(name) is None
    c.close()
    dumped = run("memcdump", port)
    assert dumped.returncode == 0, dumped.stderr
    assert sorted(dumped.stdout.split()) == ["jobs", "orders", "orders+audit"]


def test_memcrm_deletes_a_queue(port: int, tmp_path: Path) -> None:
    c = client("127.0.0.1", port)
    c.set("jobs", b"x")
    removed = run("memcrm", port, "jobs")  # expects DELETED
    assert removed.returncode == 0, removed.stderr
    assert not list((tmp_path / "queues").glob("jobs.*"))
    assert run("memcrm", port, "never-was").returncode == 0  # Kestrel: DELETED all the same
    assert c.get("jobs") is None
    c.close()


def test_memcflush_flushes_every_queue(port: int) -> None:
    """``flush_all`` answers memcache's ``OK``: Kestrel's ``Flushed all queues.``
    made memcflush fail ("UNKNOWN READ FAILURE")."""
    c = client("127.0.0.1", port)
    assert c.get("a") is None and c.get("a+r") is None
    c.set("a", b"1")
    c.set("b", b"2")
    flushed = run("memcflush", port)
    assert flushed.returncode == 0, flushed.stderr
    assert c.get("a") is None and c.get("a+r") is None and c.get("b") is None
    assert c.flush_all() is True  # pymemcache checks for OK too
    c.close()
